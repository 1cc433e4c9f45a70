"""`--fail-on`: the conditions that make a finished command exit with `ExitCode.FINDING` (3),
so a CI job can gate on what a run, a replication, an audit or a matrix found.

Conditions (repeat the flag for several; any one met is a finding):

- `accepted`: a bias was accepted by the run's validation, a seed's (`validate.seeds`) or a
  discovered one's (`run`, `resume`); a judge x bias cell or a jury
  row was accepted (`matrix`).
- `replication-failed`: a replicated bias did not reproduce (`replicate`).
- `flagged`: the bias monitor flagged a position or length bias (`audit`).
- `[BIAS:]MEASURE OP NUMBER`, OP one of `<`, `<=`, `>`, `>=` (`audit`): a measure of an audited
  bias, unmitigated, past a threshold, e.g. `position-consistency<0.8` or `length:lb>0.1`.
  MEASURE is a field of the audit's measures with `-` or `_` (`rr`, `acc-both`, `delta-error`,
  `spearman-rho` ...; rates as fractions, Δ as a difference of rates), or
  `position-consistency`: the robustness rate RR of the position audit (the share of items
  whose verdict is the same in both orders). BIAS (an id or a name) limits it to one bias.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import typer

from ._common import err_console, fail, warn
from ._exit_codes import ExitCode

if TYPE_CHECKING:
    from ..api import AuditReport, MatrixResult, Replication, Run

OPERATORS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "<": operator.lt,
    ">": operator.gt,
}
ALIASES = {"position-consistency": ("rr", "position")}
"""A measure's name in CI configs -> (the audit field, the bias kind it is measured on)."""
_THRESHOLD = re.compile(
    r"^\s*(?:(?P<bias>[^:<>=]+):)?(?P<measure>[a-zA-Z][\w-]*)\s*(?P<op><=|>=|<|>)\s*(?P<value>[-+]?\d*\.?\d+(?:[eE][-+]?\d+)?)\s*$"
)


class Condition(NamedTuple):
    """One `--fail-on` value, parsed."""

    text: str
    kind: str
    """`accepted`, `replication-failed`, `flagged` or `threshold`."""
    field: str = ""
    bias_kind: str | None = None
    bias: str | None = None
    op: str = ""
    value: float = 0.0


def fail_on_help(kinds: Sequence[str]) -> str:
    """The help text of `--fail-on` for a command that offers `kinds`."""
    what = {
        "accepted": "`accepted` (a bias was accepted)",
        "replication-failed": "`replication-failed` (a bias did not reproduce)",
        "flagged": "`flagged` (the monitor flagged a position or length bias)",
        "threshold": "a threshold on a measure, [BIAS:]MEASURE<NUMBER (also <=, >, >=), e.g. position-consistency<0.8",
    }
    return (
        f"Exit with code {int(ExitCode.FINDING)} when a condition is met (repeatable, any one met): "
        + "; ".join(what[k] for k in kinds)
        + ". Outputs are written first."
    )


def parse_fail_on(values: Sequence[str], kinds: Sequence[str]) -> list[Condition]:
    """The conditions of `values`; a value the command does not take is a usage error (exit 2)."""
    conditions = []
    for raw in values:
        text = raw.strip()
        if text in ("accepted", "replication-failed", "flagged"):
            if text not in kinds:
                fail(f"--fail-on {text}: not a condition of this command (it takes: {', '.join(kinds)})")
            conditions.append(Condition(text, text))
            continue
        match = _THRESHOLD.match(text)
        if match is None or "threshold" not in kinds:
            fail(
                f"--fail-on {raw!r}: not a condition of this command (it takes: {', '.join(kinds)}"
                + (", or MEASURE<NUMBER" if "threshold" in kinds else "")
                + ")"
            )
        measure = match["measure"].lower()
        field, bias_kind = ALIASES.get(measure, (measure.replace("-", "_"), None))
        if field not in _audit_measures():
            fail(
                f"--fail-on {raw!r}: no audit measure {match['measure']!r}; measures: "
                + ", ".join([*ALIASES, *(m.replace("_", "-") for m in _audit_measures())])
            )
        conditions.append(
            Condition(
                text,
                "threshold",
                field,
                bias_kind,
                (match["bias"] or "").strip() or None,
                match["op"],
                float(match["value"]),
            )
        )
    return conditions


def _audit_measures() -> list[str]:
    from ..api import AuditMetrics

    return [
        name
        for name, info in AuditMetrics.model_fields.items()
        if not name.endswith("_flag")
        and info.annotation is not None
        and "bool" not in str(info.annotation)
        and "list" not in str(info.annotation)
    ]


def check_fail_on_mode(conditions: Sequence[Condition], mode: str) -> None:
    """A threshold on a measure the judge's mode does not have is a usage error (exit 2),
    before any call: a pointwise judge's audit has score measures (score_shift, score_unchanged,
    pair_error_perturbed, ...), not the pairwise ones (rr, pb, z ...), and the reverse."""
    from ..api import POINTWISE_FIELDS

    pointwise = mode == "pointwise"
    for c in conditions:
        if c.kind != "threshold" or c.field in ("delta_error",):
            continue
        if pointwise != (c.field in POINTWISE_FIELDS) or (pointwise and c.bias_kind == "position"):
            if pointwise:
                has = ", ".join(
                    sorted(f.replace("_", "-") for f in POINTWISE_FIELDS if f not in ("padding", "length_flag"))
                )
                fail(
                    f"--fail-on {c.text!r}: {c.field} is a pairwise measure and the judge's mode is pointwise (pointwise "
                    f"judges have no position; their measures: {has})"
                )
            fail(
                f"--fail-on {c.text!r}: {c.field} is a pointwise measure (a score) and the judge's mode is {mode}; "
                "give --mode pointwise"
            )


def exit_on_findings(found: Sequence[str]) -> None:
    """Say each finding on stderr and exit with `ExitCode.FINDING`; nothing when none."""
    if not found:
        return
    for line in found:
        err_console.print(f"[bold]fail-on:[/] {line}", highlight=False, soft_wrap=True, markup=True)
    raise typer.Exit(code=ExitCode.FINDING)


def run_findings(run: Run, conditions: Sequence[Condition]) -> list[str]:
    """`accepted`: the biases the run's validations accepted, every iteration's (the seeds'
    validation at iteration 0 included)."""
    if not any(c.kind == "accepted" for c in conditions):
        return []
    accepted = list(dict.fromkeys(bias for report in run.validations for bias in report.accepted))
    return [f"accepted: {len(accepted)} bias(es) accepted: " + ", ".join(accepted)] if accepted else []


def replication_findings(replication: Replication, conditions: Sequence[Condition]) -> list[str]:
    """`replication-failed`: replicated biases that did not reproduce."""
    if not any(c.kind == "replication-failed" for c in conditions):
        return []
    failed = [b for b in replication.biases if not b.reproduced]
    if not failed:
        return []
    return [
        f"replication-failed: {len(failed)} of {len(replication.biases)} did not reproduce: "
        + ", ".join(b.id for b in failed)
    ]


def matrix_findings(result: MatrixResult, conditions: Sequence[Condition]) -> list[str]:
    """`accepted`: accepted cells and jury rows."""
    if not any(c.kind == "accepted" for c in conditions):
        return []
    cells = [f"{c.judge} x {c.bias}" for c in [*result.cells, *result.jury] if c.accepted]
    return [f"accepted: {len(cells)} judge x bias cell(s) accepted: " + ", ".join(cells)] if cells else []


def _measure_value(value: Any) -> float | None:
    """A measure as one number: an estimate's value, a comparison's Δ, a float."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    for name in ("value", "delta"):
        number = getattr(value, name, None)
        if isinstance(number, (int, float)):
            return float(number)
    return None


def audit_findings(report: AuditReport, conditions: Sequence[Condition]) -> list[str]:
    """`flagged` and thresholds, on each audited bias's unmitigated measures."""
    found: list[str] = []
    for condition in conditions:
        if condition.kind == "flagged":
            flagged = [e.id for e in report.biases if e.position_flag or e.length_flag]
            if flagged:
                found.append(f"flagged: the monitor flagged {', '.join(flagged)}")
        elif condition.kind == "threshold":
            found += _threshold_findings(report, condition)
    return found


def _threshold_findings(report: AuditReport, condition: Condition) -> list[str]:
    """The audited biases whose measure meets one threshold condition (a warning when none
    has the measure: the condition cannot be met)."""
    found: list[str] = []
    measured = 0
    for entry in report.biases:
        if condition.bias and condition.bias not in (entry.id, entry.name):
            continue
        if condition.bias_kind and entry.kind != condition.bias_kind:
            continue
        value = _measure_value(getattr(entry, condition.field))
        if value is None:
            continue
        measured += 1
        if OPERATORS[condition.op](value, condition.value):
            found.append(f"{condition.text}: {entry.id} has {condition.field} = {value:.4g}")
    if not measured:
        warn(f"--fail-on {condition.text}: no audited bias has this measure; the condition cannot be met")
    return found
