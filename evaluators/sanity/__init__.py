"""Sanity checks of explainers (docs/sanity_checks.md): does a map depend on the model?

* ``layers``: the layers of any classifier and their randomisation, cascading or independent,
  on a copy (``randomisable_layers``, ``randomised_models``);
* ``model_randomisation``: Adebayo et al.'s model parameter randomisation test, every layer ×
  explainer × similarity measure × input (``model_randomisation``, ``RandomisationScores``);
* ``random_logit``: Sixt et al.'s random-logit test (``random_logit``, ``other_classes``);
* Hedström et al. (2023)'s repairs of the MPRT: the smooth MPRT (``model_randomisation`` on
  denoised maps, ``n_samples`` > 1, ``mode="bottom_up"``) and ``efficient_mprt``
  (``efficient_mprt``, ``discrete_entropy``).

The similarity measures are ``evaluators.metrics.similarity`` (``similarity``, ``MEASURES``).
"""

from evaluators.sanity.efficient_mprt import EfficientScores, discrete_entropy, efficient_mprt
from evaluators.sanity.layers import MODES, randomisable_layers, randomised_models
from evaluators.sanity.model_randomisation import RandomisationScores, model_randomisation
from evaluators.sanity.random_logit import other_classes, random_logit

__all__ = ["EfficientScores", "MODES", "RandomisationScores", "discrete_entropy", "efficient_mprt",
           "model_randomisation", "other_classes", "randomisable_layers", "random_logit", "randomised_models"]
