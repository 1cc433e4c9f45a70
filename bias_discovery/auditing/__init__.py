"""`bias-discovery audit`: measure a judge on known biases with the published metrics (CALM,
Chen et al., Wei et al., the bias monitor), unmitigated and mitigated, on the same items.

`targets` resolves what `--biases` names, `runner` makes the calls (through the call cache)
and `compute` turns verdicts into measures with `bias_discovery.metrics`; `records` is the
audit.json schema, `output` writes an audit directory.
"""

from .records import AuditReport, BiasAudit, SchemeAudit
from .runner import AuditOutput, AuditSettings, check_judge_mode, check_repeats, check_teacher, run_audit
from .targets import AuditTarget, resolve_targets

__all__ = [
    "AuditOutput",
    "AuditReport",
    "AuditSettings",
    "AuditTarget",
    "BiasAudit",
    "SchemeAudit",
    "check_repeats",
    "check_judge_mode",
    "check_teacher",
    "resolve_targets",
    "run_audit",
]
