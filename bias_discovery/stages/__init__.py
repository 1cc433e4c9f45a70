"""The six steps of the discovery loop as plain functions over whole batches.

Each takes its model(s) as arguments and can run without the graph (see loop/graph.py for the loop).
"""

from .evaluate import evaluate
from .explain import deeper_explain
from .identify import candidates_from_records, identify_biases
from .merge import merge_biases
from .perturb import assign_biases, perturb, rewrite_neutrally
from .rewrite_checks import check_answers, record_checker
from .validate import PlaceboArm, ValidationModels, ValidationSetup, run_placebo, validate_biases

__all__ = [
    "PlaceboArm",
    "ValidationModels",
    "ValidationSetup",
    "assign_biases",
    "candidates_from_records",
    "check_answers",
    "deeper_explain",
    "evaluate",
    "identify_biases",
    "merge_biases",
    "perturb",
    "record_checker",
    "rewrite_neutrally",
    "run_placebo",
    "validate_biases",
]
