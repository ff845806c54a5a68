"""The reliability report (``evaluate.py report``; docs/trust.md): can I trust these explanations?

``config`` (its options), ``maps`` (each member's maps once per explainer), ``verdict`` (the
sanity verdict calibrated by the seed; how many members settle a ranking), ``sections``
(agreement, sanity, faithfulness), ``summary`` (the one-screen summary and the
recommendation), ``html`` (figures and the self-contained page), ``protocol`` (the command).
"""
