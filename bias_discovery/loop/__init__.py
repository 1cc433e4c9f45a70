"""The discovery loop's orchestration, in the parts `graph.Discovery` composes its nodes from.

- `bookkeeping`: run.json, the stage events with calls and tokens per stage and role, the
  progress of each step (`RunBook`, `StageProgress`);
- `resources`: the models by role and stage, the data, the embedder (`LoopResources`);
- `iteration`: an iteration's stages up to merge, staged or streamed (`IterationStages`);
- `validation`: the baseline, the placebo and the validation of a family (`LoopValidation`).

`graph.py` wires them into the LangGraph loop; each node reads its inputs from the run record
and writes its artifacts there.
"""

from .bookkeeping import RunBook, StageProgress, counts_so_far, state_or_none
from .iteration import IterationStages
from .resources import LoopResources, check_data_overlap, loop_roles
from .validation import LoopValidation, mde_phrase

__all__ = [
    "IterationStages",
    "LoopResources",
    "LoopValidation",
    "RunBook",
    "StageProgress",
    "check_data_overlap",
    "counts_so_far",
    "loop_roles",
    "mde_phrase",
    "state_or_none",
]
