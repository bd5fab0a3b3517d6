"""Measuring a release: exact output distributions, utility, a Bayesian adversary, key
compromise, truncation baselines, and calibration of epsilon to a utility target.

Nothing here changes what the mechanism outputs; it only measures it.  The evaluation's own
randomness (sample selection, stand-in keys) is a seeded numpy Generator.
"""

from .calibrate import CalibrationResult, calibrate, parse_target
from .exact import ExactMechanism, OutputDistribution
from .run import evaluate_release, evaluation_keys, select_sample
from .utility import UtilitySummary, measure_utility

__all__ = [
    "CalibrationResult",
    "ExactMechanism",
    "OutputDistribution",
    "UtilitySummary",
    "calibrate",
    "evaluate_release",
    "evaluation_keys",
    "measure_utility",
    "parse_target",
    "select_sample",
]
