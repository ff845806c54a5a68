"""What scores explanation maps: agreement between explanations (Ley et al.'s SA, SSA,
CDC; Watson et al.'s separability), and fidelity metrics of single maps."""
