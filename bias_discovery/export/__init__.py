"""Exports: turn what a discovery run found into data.

- `export_judgebench_pro` (pro.py): a JudgeBench-Pro-style benchmark, biased variants of the
  test pairs that a strong judge gets wrong in both orders, with a dataset card and an
  annotation sheet; `apply_annotations` (annotate.py) applies the human verification.
- `export_dpo` (dpo.py): bias-augmented preference data in TRL's DPO format.
- `compare_with_pro` (compare.py): a judge's error on the original set and on a Pro set.
- `export_harness` (harness.py): a Pro set, or a run's validation rewrites, as an
  lm-evaluation-harness task (lmeval_task.py) or an inspect_ai task file (inspect_task.py),
  each sample judged in both orders and scored as JudgeBench scores.

Heavy dependencies (pyarrow, the engines) are imported only when used.
"""

from ..errors import ExportError
from ..run.selection import select_biases, validated_biases
from .annotate import apply_annotations
from .compare import compare_with_pro
from .dpo import export_dpo
from .harness import export_harness
from .pro import build_pro_set, export_judgebench_pro

__all__ = [
    "ExportError",
    "apply_annotations",
    "build_pro_set",
    "compare_with_pro",
    "export_dpo",
    "export_harness",
    "export_judgebench_pro",
    "select_biases",
    "validated_biases",
]
