"""Side by side with the official BiasScope code: the same model, data and sampling, one run.

    python benchmarks/vs_biasscope.py --peer DIR --data-dir DIR --json OUT [--reps 2] [--n-target N] [--n-test N]

DIR is a checkout of github:sustech-nlp/BiasScope (the commit is read from it and recorded).
Both sides run SmolLM2-135M-Instruct in Hugging Face format (built from the embedded GGUF by
`bias_discovery.smollm2_hf`, as tests/vllm_real does) on vLLM's CPU build, as target judge and
as teacher, on the same pairs: a fixed subset of RewardBench as target pairs and of JudgeBench
as test pairs, read from the shared data copy (BIAS_DISCOVERY_DATA_DIR or --data-dir) and
written to the peer's parquet layout (`question`, `response_A`, `response_B`, `label` 1/2,
`domain`) and, the same pairs, to a JSONL file our loader reads. Sampling is greedy on both
sides, with one completion budget (`--max-tokens`, the peer's `--max_new_tokens`).

What runs, in one process of measurement, each side in a fresh process and directory:

1. **peer**: `attack_judge_and_analysis.py` (perturb, evaluate, explain, detect, merge) then
   `synthesis_bias_verification.py` (rewrite the test pairs per new bias, judge the original
   and each bias, keep a bias when its error > the original's), from a copy of the checkout's
   files in a temporary directory (so that its outputs, which it writes next to its code and
   data, never land in DIR), with its own flags: `--self-defined-tp-size 1`,
   `--max_new_tokens`, `--detection-mode 2` (its default);
2. **ours (paper rule)**: our loop with `validate.acceptance: paper`, `validate.control:
   baseline`, no sequential looks, no answer check (the peer has none), one iteration, the
   peer's own seed library (its `data/bias/basic_biases.json`, converted to our library
   format: same 7 names and definitions), the judge shown each pair in the data's own order
   (`judge.positions: fixed`, as the peer's stage 1 does), free reasoning;
3. the two alternate across `--reps` repetitions (peer first in odd ones, ours first in even
   ones);
4. **ours (defaults)**, once: our default rule (placebo control, paired McNemar test with
   Holm's correction, sequential looks, answer check, seeded position swap) on the same data,
   model, library, budget and one iteration;
5. **our test of the peer's kept biases**: the biases the peer keeps (first repetition) are
   validated by our default rule against the placebo on JudgeBench pairs *disjoint* from the
   test pairs the peer selected them on (a selection is tested on fresh items), as one family.

Metering is the same on both sides: the shim in `benchmarks/vs_biasscope_shim`
(`sitecustomize`, first on the PYTHONPATH of every measured process; it changes no code of
either side) forces `enforce_eager` on each `vllm.LLM` (what a CPU needs), logs every engine
load, and, for the peer, every `LLM.generate`/`LLM.chat` call with its requests and the prompt
and generated tokens counted from the `RequestOutput`s. Our calls and tokens come from our own
meter (events.jsonl), which counts the same fields. The KV cache is vLLM's own
`VLLM_CPU_KVCACHE_SPACE=1` (GiB) on both sides.

The JSON (`--json OUT`) holds per side and stage the wall time, model calls, prompt and
generated tokens, engine loads, what each found and kept, and the ratios ours (paper rule) ÷
peer, medians over the repetitions, with the provenance block of benchmarks/provenance.py.

The package, by step (`benchmarks/vs_biasscope.py` is its entry; this directory's name differs
from the script's, because a package shadows a same-named module on `sys.path`):

- `inputs`: the same pairs for both sides, the peer's seed library in our format, the peer's
  working copy (`Setting`: what both sides share);
- `metering`: the shim, the measured processes, spans of calls as per-stage costs;
- `peer`: running the official code and reading what it wrote;
- `ours`: running our loop (the paper's rule or our defaults) and reading its run record;
- `our_test`: our test of the peer's kept biases (`bias_discovery.api.validate_family`);
- `compare`, `differences`: medians, ratios ours ÷ peer, the seed check, why outputs differ;
- `record`: the JSON's schema and the printed table; `main`: the command, which writes the
  record through benchmarks/provenance.py (the command, start time, start commit, CPU).

It uses the library through its public names (`bias_discovery.api`).
"""

from __future__ import annotations

from .compare import (
    Difference,
    Ratio,
    SideSummary,
    median_cost,
    median_ratio,
    rep_ratios,
    seed_check,
    stage_ratios,
    summarize_side,
)
from .differences import differences
from .findings import ErrorRate, Findings
from .inputs import (
    PEER_FILES,
    PEER_REPO,
    PEER_SEED_LIBRARY,
    SEED,
    TARGET_MAX_CHARS,
    TEST_MAX_CHARS,
    Setting,
    Subsets,
    make_subsets,
    pair_chars,
    peer_layout,
    peer_rows,
    peer_seed_check_layout,
    peer_seed_library,
    select_pairs,
    write_our_jsonl,
    write_peer_parquet,
)
from .metering import FRONT_HALF, SHIM_DIR, SHIMS, STAGES, SideRun, Span, StageCost, child_env, side_run, stage_cost
from .our_test import KeptSurvival, TestedBias, kept_as_biases, our_test
from .ours import our_config, our_findings, our_spans
from .peer import PEER_PROMPTS, classify_peer_calls, peer_findings, peer_valid_line
from .record import Result, table

__all__ = [
    "FRONT_HALF",
    "PEER_FILES",
    "PEER_PROMPTS",
    "PEER_REPO",
    "PEER_SEED_LIBRARY",
    "SEED",
    "SHIMS",
    "SHIM_DIR",
    "STAGES",
    "TARGET_MAX_CHARS",
    "TEST_MAX_CHARS",
    "Difference",
    "ErrorRate",
    "Findings",
    "KeptSurvival",
    "Ratio",
    "Result",
    "Setting",
    "SideRun",
    "SideSummary",
    "Span",
    "StageCost",
    "Subsets",
    "TestedBias",
    "child_env",
    "classify_peer_calls",
    "differences",
    "kept_as_biases",
    "make_subsets",
    "median_cost",
    "median_ratio",
    "our_config",
    "our_findings",
    "our_spans",
    "our_test",
    "pair_chars",
    "peer_findings",
    "peer_layout",
    "peer_rows",
    "peer_seed_check_layout",
    "peer_seed_library",
    "peer_valid_line",
    "rep_ratios",
    "seed_check",
    "select_pairs",
    "side_run",
    "stage_cost",
    "stage_ratios",
    "summarize_side",
    "table",
    "write_our_jsonl",
    "write_peer_parquet",
]
