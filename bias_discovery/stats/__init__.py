"""Statistics for validating candidate biases: paired tests, intervals, multiplicity control.

Why this module exists
----------------------
BiasScope (Section 2.3, Eq. 10) accepts a candidate bias when the judge's error rate on the
perturbed test set is higher than on the original one. On a finite test set and a judge whose
verdicts wobble, that difference is positive about half of the time *even when the
perturbation does nothing* (see `decide_acceptance`). Here validation is instead a **paired**
comparison on the same items:

* the item-level outcome is "judge wrong at baseline" vs "judge wrong when perturbed";
* the evidence lives only in the discordant items (right -> wrong, b; wrong -> right, c), so
  the test is the exact one-sided McNemar test (a binomial test on b out of b + c);
* the size of the effect is reported with a paired percentile-bootstrap CI of
  Delta error = err(perturbed) - err(baseline), resampling items so the pairing is kept;
* one iteration validates several candidates at once, so p-values are adjusted (Holm by
  default, Benjamini-Hochberg optionally) before comparing with alpha; `error_statement` says
  in one sentence what that controls for the settings in use;
* `min_delta` is a hypothesis, not a threshold on the estimate: H0 is Δ <= min_delta, tested
  with Tango's score test (`paired_p_value`), with power and the smallest detectable Δ for it;
* a validation on growing slices (`SequentialPlan`) reports the effect given where and why
  it stopped (`sequential_effect`), since the Δ of the stopping look is biased.

The paper's plain rule stays available (`rule="paper"`) so results can be compared.

Distributions come from scipy (installed with sentence-transformers; imported on first use,
so importing this package stays light): binomial tails and log-pmfs (the exact McNemar test,
power), normal and Student-t tails and quantiles. Hand-written is only what no well-kept
library offers: Tango's score test, the alpha-spending plans and looks, the sign-flip test's
exact law, the power of these tests, and the conditional estimator after a sequential stop.

Also here: Cohen's kappa, for the annotation of exported benchmarks.

Modules (internal, hence the leading underscore): `_intervals` (Wilson, Student-t, the paired
bootstrap), `_tests` (McNemar, Tango, the paired t and sign-flip tests), `_multiplicity` (Holm,
BH), `_comparison` (`PairedComparison`, the acceptance decision, the error statement, two
judges' Δ compared), `_sequential` (plans, looks, alpha spending), `_effect` (the effect after a
stop), `_power`, `_agreement` (Cohen's kappa), `_calibration` (ECE, Brier and the reliability
bins of verdict probabilities), `_ppi` (prediction-powered inference for a judge's aggregate:
PPI++ through ppi_py, the labels a CI width needs). Every public name is re-exported here: import it from
``bias_discovery.stats``, never from a module.
"""

from __future__ import annotations

from ..formatting import MEASURE_LABELS
from ..settings.validate import DEFAULT_BOOTSTRAP_RESAMPLES, check_look_fractions
from ._agreement import (
    cohens_kappa,
)
from ._calibration import (
    Calibration,
    ReliabilityBin,
    calibration,
    expected_calibration_error,
)
from ._comparison import (
    AcceptanceRule,
    EffectDifference,
    ErrorControl,
    Measure,
    PairedComparison,
    compare_effects,
    compare_paired,
    compare_paired_scores,
    decide_acceptance,
    decide_differences,
    error_statement,
    is_shift,
    paired_counts,
    paired_values,
    per_domain_breakdown,
)
from ._effect import (
    CONDITIONAL,
    CONDITIONAL_ON_DECISION,
    FULL_SAMPLE,
    HELD_OUT,
    RECORDED_AT_STOP,
    ConditionalInterval,
    Decision,
    Effect,
    StoppingDesign,
    conditional_interval,
    continuation_tails,
    decisive_comparison,
    held_out_method,
    sequential_effect,
    stopping_design,
)
from ._intervals import (
    DOMAIN_BOOTSTRAP_RESAMPLES,
    mean_and_sd,
    mean_t_interval,
    paired_bootstrap_delta_ci,
    student_t_quantile,
    student_t_sf,
    wilson_interval,
)
from ._multiplicity import (
    Correction,
    acceptance_threshold,
    adjust_p_values,
    benjamini_hochberg_adjust,
    holm_adjust,
)
from ._power import (
    min_detectable_delta,
    min_detectable_shift,
    null_discordance,
    paired_power,
)
from ._ppi import (
    CorrectedEstimate,
    GapCoefficient,
    LabelPlan,
    difference_of_estimates,
    gap_regression,
    judge_only_mean,
    labels_for_width,
    labels_only_mean,
    ppi_covariate_mean,
    ppi_mean,
)
from ._sequential import (
    LookOutcome,
    LookRecord,
    SequentialPlan,
    SpendingFunction,
    alpha_spent,
    conditional_power,
    expected_final_n,
    look_outcome,
    plan_sequential,
    sequential_look,
    sequential_p_value,
    sequential_shift_look,
    shift_conditional_power,
)
from ._tests import (
    mcnemar_exact_one_sided,
    paired_p_value,
    paired_score_interval,
    paired_t_one_sided,
    sign_flip_p_value,
    tango_restricted_helped_rate,
    tango_z,
)

__all__ = [
    "CorrectedEstimate",
    "GapCoefficient",
    "LabelPlan",
    "difference_of_estimates",
    "gap_regression",
    "judge_only_mean",
    "labels_for_width",
    "labels_only_mean",
    "ppi_covariate_mean",
    "ppi_mean",
    "AcceptanceRule",
    "CONDITIONAL",
    "CONDITIONAL_ON_DECISION",
    "ConditionalInterval",
    "Correction",
    "DEFAULT_BOOTSTRAP_RESAMPLES",
    "DOMAIN_BOOTSTRAP_RESAMPLES",
    "Decision",
    "Effect",
    "EffectDifference",
    "ErrorControl",
    "FULL_SAMPLE",
    "HELD_OUT",
    "LookRecord",
    "PairedComparison",
    "SequentialPlan",
    "SpendingFunction",
    "StoppingDesign",
    "alpha_spent",
    "check_look_fractions",
    "conditional_interval",
    "conditional_power",
    "continuation_tails",
    "decisive_comparison",
    "error_statement",
    "expected_final_n",
    "held_out_method",
    "look_outcome",
    "min_detectable_delta",
    "min_detectable_shift",
    "null_discordance",
    "paired_counts",
    "paired_p_value",
    "paired_power",
    "paired_t_one_sided",
    "compare_paired_scores",
    "mean_and_sd",
    "paired_values",
    "Measure",
    "MEASURE_LABELS",
    "is_shift",
    "plan_sequential",
    "sequential_effect",
    "sign_flip_p_value",
    "sequential_look",
    "sequential_shift_look",
    "stopping_design",
    "shift_conditional_power",
    "sequential_p_value",
    "student_t_quantile",
    "student_t_sf",
    "acceptance_threshold",
    "adjust_p_values",
    "benjamini_hochberg_adjust",
    "compare_effects",
    "compare_paired",
    "decide_acceptance",
    "decide_differences",
    "holm_adjust",
    "mcnemar_exact_one_sided",
    "mean_t_interval",
    "paired_bootstrap_delta_ci",
    "per_domain_breakdown",
    "paired_score_interval",
    "tango_restricted_helped_rate",
    "tango_z",
    "wilson_interval",
    "cohens_kappa",
    "Calibration",
    "ReliabilityBin",
    "calibration",
    "expected_calibration_error",
    "LookOutcome",
    "RECORDED_AT_STOP",
]
