"""`bias-discovery check CONFIG`: what a long run would meet, found out in a minute.

Run on the GPU node before a run. For each role (target, teacher) and each of its servers:

- the endpoint or engine, and whether it answers (`GET /models`; an embedded or in-process
  model is loaded);
- whether the served model name is the config's `model` (a 404 hours later otherwise);
- a constraint probe per constraint kind the role needs (judge: regex or choices; teacher:
  JSON schema and choices), through the engine exactly as the run would send it: a server
  that answers with free text does not enforce structured outputs;
- the longest prompts of the run's stages on its data, measured in tokens by the model itself
  (one request with max_tokens=1 each), against the model's context: `max_model_len` from
  `/v1/models` (vLLM), `n_ctx` (llama.cpp), `max_model_len` or config.json's
  `max_position_embeddings` (offline vLLM; an estimate when the engine does not say);
- the planned calls per stage, from the config and the data sizes.

Prompts whose inputs the run generates (the teacher's rewrite, the judge's reasoning) are
measured with those parts empty and their token budgets added: a worst case, reported as a
warning when only the worst case does not fit.
"""

from ..loop.pilot import PilotRecord
from ._calls import planned_calls
from ._check import pilot_into, run_preflight
from ._endpoints import check_endpoint
from ._estimate import estimate_run
from ._prompts import role_constraints, run_prompts
from ._report import Assumptions, EndpointReport, Finding, PreflightReport, StageCalls, StageEstimate

__all__ = [
    "Assumptions",
    "EndpointReport",
    "Finding",
    "PilotRecord",
    "PreflightReport",
    "StageCalls",
    "StageEstimate",
    "check_endpoint",
    "estimate_run",
    "pilot_into",
    "planned_calls",
    "role_constraints",
    "run_preflight",
    "run_prompts",
]
