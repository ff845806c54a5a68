"""Aggregators: Mahlau & Nolde's pixel aggregators of several maps into one, Decker et al.'s
optimised aggregators, the normalisations they share and the simplex QP solver."""
