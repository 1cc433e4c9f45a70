"""Side by side with the official BiasScope code: the same model, data and sampling, one run.

    python benchmarks/vs_biasscope.py --peer DIR --json OUT [--reps 2] [--n-target N] [--n-test N]

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
peer, medians over the repetitions.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from provenance import cpu_model, git_commit  # noqa: E402

from bias_discovery.data.loaders import load_pairs  # noqa: E402
from bias_discovery.data.pairs import PreferencePair  # noqa: E402
from bias_discovery.library import Bias, BiasLibrary, BiasOrigin, slugify  # noqa: E402

SHIM_DIR = Path(__file__).resolve().parent / "vs_biasscope_shim"
PEER_REPO = "github:sustech-nlp/BiasScope"
PEER_STAGE1 = "attack_judge_and_analysis.py"
PEER_STAGE2 = "synthesis_bias_verification.py"
PEER_FILES = (
    "attack_judge_and_analysis.py",
    "synthesis_bias_verification.py",
    "bias_detector.py",
    "prompts.py",
    "utils.py",
)
"""The peer's code: copied (unchanged) into each repetition's directory, which it writes into."""
PEER_SEED_LIBRARY = Path("data/bias/basic_biases.json")

SEED = 42
TARGET_MAX_CHARS = 1200
"""Target pairs are drawn among RewardBench pairs whose question and two responses hold at most
this many characters (1,438 of 2,985): SmolLM2 on 2 CPU cores reads ~1,100 prompt tokens a
second, and the peer sends every prompt once per engine call."""
TEST_MAX_CHARS = 2500
"""Test pairs are drawn among JudgeBench pairs of at most this many characters (107 of 620)."""

SHIMS = [
    {
        "what": "benchmarks/vs_biasscope_shim/sitecustomize.py, first on PYTHONPATH of the peer's two scripts "
        "(and of ours: the same meter on both sides)",
        "changes": "vllm.LLM(...) gets enforce_eager=True: vLLM's CPU build otherwise compiles the model with "
        "inductor (slow to start; a different greedy output on this machine); our engine sets the same on a CPU",
        "observes": "each vllm.LLM load (start, end) and each LLM.generate / LLM.chat call (start, end, requests, "
        "prompt and generated tokens from the RequestOutputs, the first prompt's opening characters to name the "
        "stage); no return value, argument or file of the peer is changed otherwise",
    },
    {
        "what": "environment variable VLLM_CPU_KVCACHE_SPACE=1 (vLLM's own)",
        "changes": "a 1 GiB KV cache on the CPU instead of gpu_memory_utilization's share of RAM (0.9 for the "
        "teacher, 0.6 for the judge), which fails vLLM's free-memory check on a shared machine",
        "observes": "",
    },
    {
        "what": "peer flags --self-defined-tp-size 1 --max_new_tokens N --dtype bfloat16",
        "changes": "tensor parallel 1 (one CPU, no GPU: its default counts CUDA devices); the completion budget "
        "N, shared by both sides (its default 4096 would let SmolLM2's greedy loops run 4096 tokens on 2 cores); "
        "bfloat16 is its default, spelled out",
        "observes": "",
    },
    {
        "what": "peer working copy",
        "changes": "its five .py files are copied unchanged into a fresh directory per repetition, with the "
        "converted data (data/target/*.parquet, data/test/*.parquet) and its seed library, because it writes its "
        "outputs next to its code (results/) and its data (modified_data/, data/bias/<model>/...) and appends to "
        "them across runs",
        "observes": "",
    },
]


# ------------------------------------------------------------------------------------------
# Data: the same pairs for both sides
# ------------------------------------------------------------------------------------------


def pair_chars(pair: PreferencePair) -> int:
    return len(pair.question) + len(pair.chosen) + len(pair.rejected)


def select_pairs(
    pairs: Sequence[PreferencePair], n: int, *, max_chars: int, seed: int, exclude: Iterable[str] = ()
) -> list[PreferencePair]:
    """A seeded sample of `n` pairs among those of at most `max_chars` characters (not in
    `exclude`), in file order: the same pairs on every machine for the same data and seed."""
    skip = set(exclude)
    eligible = [p for p in pairs if pair_chars(p) <= max_chars and p.id not in skip]
    if len(eligible) < n:
        raise SystemExit(f"only {len(eligible)} pairs of at most {max_chars} characters; asked for {n}")
    keep = sorted(random.Random(seed).sample(range(len(eligible)), n))
    return [eligible[i] for i in keep]


def peer_rows(pairs: Sequence[PreferencePair]) -> list[dict[str, Any]]:
    """The pairs in the peer's parquet layout: `response_A`/`response_B` in the data's own
    order (JudgeBench's), chosen first when the data has none (the peer's RewardBench file has
    label 1 on every row), `label` 1 or 2 = the better response, and `domain`."""
    rows = []
    for p in pairs:
        chosen_first = p.data_order != "rejected_first"
        rows.append(
            {
                "id": p.id,
                "question": p.question,
                "response_A": p.chosen if chosen_first else p.rejected,
                "response_B": p.rejected if chosen_first else p.chosen,
                "label": 1 if chosen_first else 2,
                "domain": p.domain,
                "source": p.source,
            }
        )
    return rows


def write_peer_parquet(pairs: Sequence[PreferencePair], path: Path) -> Path:
    import pandas as pd

    path.parent.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(peer_rows(pairs)).astype({"label": "int64"})
    frame.to_parquet(path, index=False)
    return path


def write_our_jsonl(pairs: Sequence[PreferencePair], path: Path) -> Path:
    """The same rows for our loader (label style: "A>B" when response_A is the better one), so
    both sides read the same pairs in the same order."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as stream:
        for row in peer_rows(pairs):
            stream.write(json.dumps({**row, "label": "A>B" if row["label"] == 1 else "B>A"}, ensure_ascii=False) + "\n")
    return path


def peer_seed_library(peer_json: Path) -> BiasLibrary:
    """The peer's seed library (name -> {Definition, Manifestations}) as our library: same
    names (trimmed) and definitions, its manifestations paragraph as one manifestation."""
    raw = json.loads(peer_json.read_text(encoding="utf-8"))
    if not isinstance(raw, dict) or not raw:
        raise SystemExit(f"{peer_json}: expected a JSON object of biases, name -> {{Definition, Manifestations}}")
    biases = []
    for name, entry in raw.items():
        if not isinstance(entry, dict) or not str(entry.get("Definition") or "").strip():
            raise SystemExit(f"{peer_json}: bias {name!r} has no Definition")
        manifestations = str(entry.get("Manifestations") or "").strip()
        biases.append(
            Bias(
                id=slugify(name),
                name=name.strip(),
                definition=str(entry["Definition"]).strip(),
                manifestations=[manifestations] if manifestations else [],
                origin=BiasOrigin(kind="seed", seed_library="biasscope-official"),
            )
        )
    return BiasLibrary(name="biasscope-official", iteration=0, biases=biases)


class Subsets(BaseModel):
    """The pairs both sides use, and where each side reads them."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    target: list[PreferencePair]
    test: list[PreferencePair]
    fresh_test: list[PreferencePair]
    """Test pairs disjoint from `test`, for our test of the peer's kept biases."""


def make_subsets(data_dir: Path, n_target: int, n_test: int, n_fresh: int, seed: int = SEED) -> Subsets:
    rewardbench = load_pairs("rewardbench", data_dir=data_dir)
    judgebench = load_pairs("judgebench", data_dir=data_dir, bad_rows=[])
    target = select_pairs(rewardbench, n_target, max_chars=TARGET_MAX_CHARS, seed=seed)
    test = select_pairs(judgebench, n_test, max_chars=TEST_MAX_CHARS, seed=seed)
    fresh = select_pairs(judgebench, n_fresh, max_chars=TEST_MAX_CHARS, seed=seed + 1, exclude=[p.id for p in test])
    return Subsets(target=target, test=test, fresh_test=fresh)


def peer_layout(work: Path, subsets: Subsets, peer_dir: Path, seeds_json: Path | None = None) -> dict[str, Path]:
    """A fresh working copy of the peer: its code (unchanged), its seed library and our pairs
    in its parquet layout. Returns the paths its flags name."""
    work.mkdir(parents=True, exist_ok=True)
    for name in PEER_FILES:
        shutil.copy2(peer_dir / name, work / name)
    bias_json = work / "data" / "bias" / "basic_biases.json"
    bias_json.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(seeds_json or peer_dir / PEER_SEED_LIBRARY, bias_json)
    return {
        "bias_json": bias_json,
        "target": write_peer_parquet(subsets.target, work / "data" / "target" / "rewardbench_subset.parquet"),
        "test": write_peer_parquet(subsets.test, work / "data" / "test" / "judgebench_subset.parquet"),
    }


def peer_seed_check_layout(work: Path, paths: dict[str, Path], model_dir: Path) -> Path:
    """Inputs that make the peer's stage 2 verify the 7 seed biases, through the files it reads
    (no code changed): stage 2 verifies the biases of `temporary_extended_biases.json` that are
    not in its per-model library; here that library is empty and the extended one holds the
    seeds. Returns the `--bias-json` to pass."""
    bias_json = work / "data" / "seedcheck" / "seeds_as_candidates.json"
    slug = bias_json.parent / model_dir.name / paths["target"].stem / bias_json.stem
    slug.mkdir(parents=True, exist_ok=True)
    empty = json.dumps({})
    bias_json.write_text(empty, encoding="utf-8")
    (slug / bias_json.name).write_text(empty, encoding="utf-8")
    shutil.copy2(paths["bias_json"], slug / "temporary_extended_biases.json")
    return bias_json


# ------------------------------------------------------------------------------------------
# What each side cost: the same stages, the same counts
# ------------------------------------------------------------------------------------------

STAGES = (
    "perturb",
    "evaluate",
    "deeper_explain",
    "identify",
    "merge",
    "baseline",
    "placebo",
    "validate",
    "validate_seeds",
)
"""One vocabulary for both sides: the peer's calls are named by their prompt, ours by the loop's
stage events."""

PEER_PROMPTS: tuple[tuple[str, str], ...] = (
    ("You will be given a instruction", "rewrite"),
    ("Below is a question followed by two candidate answers", "judge"),
    ("Here is a question and two answers.", "deeper_explain"),
    ("Your task is to analyze the chosen answer", "identify"),
    ("You are an expert in cognitive bias classification", "merge"),
)
"""The opening words of each of the peer's prompts (prompts.py) and what the call does."""

PeerPhase = Literal["discover", "verify", "seeds"]


class StageCost(BaseModel):
    wall_s: float = 0.0
    """Seconds from the stage's first call to its last answer, engine loads in between taken out.
    Our streamed front half runs its stages at once: a stage's span there also holds work of the
    stages after it (compare `SideRun.front_half`)."""
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class Span(BaseModel):
    """One stretch of one stage: when, and what it asked the models."""

    stage: str
    start: float
    end: float
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class SideRun(BaseModel):
    """One run of one side: a repetition of the peer or of ours."""

    rep: int
    position: int
    """1 when this side ran first in its repetition, 2 when second."""
    wall_s: float
    """Wall time of the side's processes, start to exit."""
    engine_loads: int
    """vllm.LLM instances created."""
    engine_load_s: float
    """Seconds spent creating them, and importing vLLM."""
    other_s: float
    """Wall time outside every stage and engine load: start-up, imports, data, files, exit."""
    stages: dict[str, StageCost]
    front_half: StageCost = Field(default_factory=StageCost)
    """perturb, evaluate, deeper_explain and identify together (`FRONT_HALF`)."""

    @property
    def calls(self) -> int:
        return sum(s.calls for s in self.stages.values())

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.stages.values())


def classify_peer_calls(events: Sequence[dict[str, Any]], phase: PeerPhase, n_test: int) -> list[Span]:
    """The peer's metered calls of one process as spans of our stages. Its stage 2 judges the
    unperturbed test pairs first (`n_test` requests: the baseline), then each bias; its
    rewrites there are validation's (`validate`, or `validate_seeds` for the seed check)."""
    spans: list[Span] = []
    judged = 0
    for e in sorted((e for e in events if e.get("event") in ("generate", "chat")), key=lambda e: e["start"]):
        head = str(e.get("prompt_head", ""))
        kind = next((k for words, k in PEER_PROMPTS if words in head), "unknown")
        later = "validate_seeds" if phase == "seeds" else "validate"
        if phase == "discover":
            stage = {"rewrite": "perturb", "judge": "evaluate"}.get(kind, kind)
        elif kind == "judge":
            stage = "baseline" if judged < n_test else later
            judged += int(e.get("requests", 0))
        else:
            stage = later if kind == "rewrite" else kind
        spans.append(
            Span(
                stage=stage,
                start=e["start"],
                end=e["end"],
                calls=int(e.get("requests", 0)),
                prompt_tokens=int(e.get("prompt_tokens", 0)),
                completion_tokens=int(e.get("completion_tokens", 0)),
            )
        )
    return merge_adjacent(spans)


def merge_adjacent(spans: Sequence[Span]) -> list[Span]:
    """Consecutive spans of one stage as one (the peer's batches of 64 and its one-call merge
    questions: the time between them is the stage's own)."""
    merged: list[Span] = []
    for span in spans:
        last = merged[-1] if merged else None
        if last is not None and last.stage == span.stage:
            merged[-1] = last.model_copy(
                update={
                    "end": max(last.end, span.end),
                    "calls": last.calls + span.calls,
                    "prompt_tokens": last.prompt_tokens + span.prompt_tokens,
                    "completion_tokens": last.completion_tokens + span.completion_tokens,
                }
            )
        else:
            merged.append(span)
    return merged


def our_spans(events: Iterable[dict[str, Any]]) -> list[Span]:
    """Our loop's stage events (events.jsonl) as spans: calls, prompt and generated tokens of
    every role, summed (cached answers are counted too: a fresh run has none)."""
    spans = []
    for e in events:
        if e.get("event") != "stage_end":
            continue
        usage = list((e.get("usage") or {}).values())
        spans.append(
            Span(
                stage=str(e["stage"]),
                start=float(e["time"]) - float(e.get("seconds") or 0.0),
                end=float(e["time"]),
                calls=sum(int(u.get("requests", 0)) for u in usage),
                prompt_tokens=sum(int(u.get("prompt_tokens", 0)) for u in usage),
                completion_tokens=sum(int(u.get("completion_tokens", 0)) for u in usage),
            )
        )
    return spans


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> float:
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


def _union_length(intervals: Iterable[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


FRONT_HALF = ("perturb", "evaluate", "deeper_explain", "identify")
"""The stages our streamed pipeline runs at once (each rewrite is judged as it arrives, each
misjudged pair explained and identified as its verdict arrives), so that a stage's own span also
holds the work of the stages after it: compared together, as `SideRun.front_half`."""


def stage_cost(spans: Sequence[Span], loads: Sequence[tuple[float, float]]) -> StageCost:
    """The wall time the spans cover (once where they overlap), engine loads and imports inside
    them taken out, and their calls and tokens."""
    covered = [(s.start, s.end) for s in spans]
    loaded = [(max(a, s), min(b, e)) for s, e in loads for a, b in covered if _overlap((a, b), (s, e))]
    return StageCost(
        wall_s=round(max(0.0, _union_length(covered) - _union_length(loaded)), 2),
        calls=sum(s.calls for s in spans),
        prompt_tokens=sum(s.prompt_tokens for s in spans),
        completion_tokens=sum(s.completion_tokens for s in spans),
    )


def side_run(
    rep: int, position: int, wall_s: float, spans: Sequence[Span], loads: Sequence[tuple[float, float]], n_loads: int
) -> SideRun:
    """Per stage: the wall time of its spans (engine loads and vLLM's import inside them taken
    out), its calls and tokens; the front half together; the `n_loads` loads (and imports) on
    their own; `other_s` what is left of `wall_s`."""
    names = list(dict.fromkeys(s.stage for s in spans))
    stages = {name: stage_cost([s for s in spans if s.stage == name], loads) for name in names}
    busy = _union_length([*((s.start, s.end) for s in spans), *loads])
    return SideRun(
        rep=rep,
        position=position,
        wall_s=round(wall_s, 2),
        engine_loads=n_loads,
        engine_load_s=round(_union_length(loads), 2),
        other_s=round(max(0.0, wall_s - busy), 2),
        stages={k: v for k, v in stages.items() if v.calls or v.wall_s >= 0.01},
        front_half=stage_cost([s for s in spans if s.stage in FRONT_HALF], loads),
    )


def count_loads(events: Iterable[dict[str, Any]]) -> int:
    return sum(1 for e in events if e.get("event") == "load")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def loads_of(events: Iterable[dict[str, Any]]) -> list[tuple[float, float]]:
    """The engine loads, and the import of vLLM (the engine's code) before the first one."""
    return [(float(e["start"]), float(e["end"])) for e in events if e.get("event") in ("load", "import")]


# ------------------------------------------------------------------------------------------
# What each side found and kept
# ------------------------------------------------------------------------------------------


class ErrorRate(BaseModel):
    error: float | None
    """The judge's error rate with the bias's rewrites on the test items."""
    control_error: float | None = None
    """Ours: the error on the same items unperturbed (the paired control). The peer compares
    with its own baseline pass (`Findings.baseline_error`), on every item it could parse."""
    n: int | None = None
    """Ours: items valid in both arms. The peer does not record how many it could parse."""


class Findings(BaseModel):
    judge_valid_rate: float | None = None
    """Share of the target judge's verdicts on the perturbed target pairs that could be read."""
    misjudged: int | None = None
    """Perturbed target pairs the judge got wrong (those explained and analysed)."""
    found: list[str] = Field(default_factory=list)
    """Bias names the teacher gave for the misjudged pairs (with a definition), in order, once each."""
    after_merge: list[str] = Field(default_factory=list)
    """Candidates left after merging them with the library and each other."""
    kept: list[str] = Field(default_factory=list)
    """Candidates the validation accepted."""
    kept_definitions: dict[str, str] = Field(default_factory=dict)
    """Their definitions, as the side wrote them."""
    baseline_error: float | None = None
    """The judge's error on the unperturbed test pairs."""
    error_rates: dict[str, ErrorRate] = Field(default_factory=dict)
    """Per validated candidate."""
    seed_error_rates: dict[str, ErrorRate] = Field(default_factory=dict)
    """Per seed bias, on the test pairs (the seed check), with `seed_baseline_error`."""
    seed_baseline_error: float | None = None


def _unique(names: Iterable[Any]) -> list[str]:
    return list(dict.fromkeys(str(n).strip() for n in names if n is not None and str(n).strip()))


PEER_VALID_LINE = "Valid predictions: "


def peer_valid_line(log_text: str) -> tuple[float | None, int | None]:
    """The peer's own count of readable verdicts and misjudged pairs (its stage-1 log line
    "Valid predictions: 12.5%; misaligned with gold label: 3 rows.")."""
    import re

    match = re.search(r"Valid predictions: ([0-9.]+)%; misaligned with gold label: (\d+) rows", log_text)
    if match is None:
        return None, None
    return float(match.group(1)) / 100.0, int(match.group(2))


def _peer_error_rates(path: Path) -> tuple[float | None, dict[str, ErrorRate]]:
    """The last entry of the peer's avg_error_rate.json: its baseline ("origin") and per bias."""
    if not path.exists():
        return None, {}
    history = json.loads(path.read_text(encoding="utf-8"))
    if not history:
        return None, {}
    last = history[-1]
    rates = {**last.get("effective biases and origin", {}), **last.get("ineffective biases", {})}

    def overall(value: Any) -> float | None:
        return value.get("overall") if isinstance(value, dict) else value

    origin = overall(rates.pop("origin", None))
    return origin, {name.strip(): ErrorRate(error=overall(v)) for name, v in rates.items()}


def peer_findings(
    work: Path, paths: dict[str, Path], model_dir: Path, stage1_log: str, seeds_json: Path | None
) -> Findings:
    """What the peer wrote: its detections, its merged library, what stage 2 kept and the error
    rates it reported (and, for the seed check, its stage-2 results over the seed library)."""
    import pandas as pd

    seeds = json.loads(paths["bias_json"].read_text(encoding="utf-8"))
    seed_names = {k.strip() for k in seeds}
    slug = paths["bias_json"].parent / model_dir.name / paths["target"].stem / paths["bias_json"].stem
    analysis = slug / "analysis_results" / "wrong_with_reason_and_bias.parquet"
    found: list[str] = []
    if analysis.exists():
        frame = pd.read_parquet(analysis)
        if len(frame) and {"bias_name", "bias_def"} <= set(frame.columns):
            found = _unique(frame.loc[frame["bias_def"].notna(), "bias_name"])
    extended = slug / "temporary_extended_biases.json"
    merged = [k.strip() for k in json.loads(extended.read_text(encoding="utf-8"))] if extended.exists() else []
    library = slug / f"{paths['bias_json'].stem}.json"
    kept_entries = json.loads(library.read_text(encoding="utf-8")) if library.exists() else {}
    kept = {
        k.strip(): str((v or {}).get("Definition") or "")
        for k, v in kept_entries.items()
        if k.strip() not in seed_names
    }
    results = work / "results" / model_dir.name / paths["target"].stem
    baseline, rates = _peer_error_rates(results / paths["bias_json"].stem / "avg_error_rate.json")
    valid, misjudged = peer_valid_line(stage1_log)
    out = Findings(
        judge_valid_rate=valid,
        misjudged=misjudged,
        found=found,
        after_merge=[n for n in merged if n not in seed_names],
        kept=list(kept),
        kept_definitions=kept,
        baseline_error=baseline,
        error_rates=rates,
    )
    if seeds_json is not None:
        out.seed_baseline_error, out.seed_error_rates = _peer_error_rates(
            results / seeds_json.stem / "avg_error_rate.json"
        )
    return out


def our_findings(run_dir: Path) -> Findings:
    """What our run wrote: iteration 1's judgments, identified biases, candidates and
    validation; iteration 0's validation when the seed library was validated."""
    from bias_discovery.run import RunDir

    run = RunDir(run_dir)
    record = run.iteration(1)
    judgments = record.judgments.read() if record.judgments.exists() else []
    identified = record.identified.read() if record.identified.exists() else []
    candidates = record.candidates.read() if record.candidates.exists() else []
    report = record.validation.read_if_exists()
    out = Findings(
        judge_valid_rate=(sum(j.verdict is not None for j in judgments) / len(judgments)) if judgments else None,
        misjudged=len(record.misjudged.read()) if record.misjudged.exists() else None,
        found=_unique(r.name for r in identified if r.status == "bias"),
        after_merge=[b.name for b in candidates],
    )
    if report is not None:
        accepted = [b for b in report.validated if b.id in set(report.accepted)]
        out.kept = [b.name for b in accepted]
        out.kept_definitions = {b.name: b.definition for b in accepted}
        out.baseline_error = report.baseline_error
        out.error_rates = {c.name: _ours_rate(c) for c in report.candidates}
    seeds = run.iteration(0).validation.read_if_exists()
    if seeds is not None:
        out.seed_baseline_error = seeds.baseline_error
        out.seed_error_rates = {c.name: _ours_rate(c) for c in seeds.candidates}
    if out.baseline_error is None and run.baseline.result.exists():
        out.baseline_error = run.baseline.result.read().error_rate()
    return out


def _ours_rate(candidate: Any) -> ErrorRate:
    vs = candidate.vs_baseline
    return ErrorRate(error=vs.arm_error, control_error=vs.control_error, n=vs.n)


# ------------------------------------------------------------------------------------------
# Running each side
# ------------------------------------------------------------------------------------------


class Setting(BaseModel):
    """What both sides share in one benchmark."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    peer_dir: Path
    model_dir: Path
    work: Path
    subsets: Subsets
    max_tokens: int
    eager: bool
    python: str = sys.executable


def child_env(setting: Setting, meter_log: Path, *, ours: bool) -> dict[str, str]:
    """The environment of a measured process: the shim first on PYTHONPATH (and our package
    for ours), offline, vLLM's CPU KV cache of 1 GiB, the meter's log."""
    env = dict(os.environ)
    env.update(
        {
            "PYTHONPATH": os.pathsep.join([str(SHIM_DIR), *([str(REPO)] if ours else [])]),
            "VS_BIASSCOPE_LOG": str(meter_log),
            "VS_BIASSCOPE_ENFORCE_EAGER": "1" if setting.eager else "0",
            "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
    )
    return env


def run_measured(cmd: Sequence[str], *, cwd: Path, env: dict[str, str], log: Path) -> float:
    """Run `cmd` to its end; its wall time. A failure stops the benchmark with the log's tail."""
    start = time.time()
    with log.open("w", encoding="utf-8") as out:
        code = subprocess.call(
            list(cmd), cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    wall = time.time() - start
    if code != 0:
        tail = "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-30:])
        raise SystemExit(f"{' '.join(cmd[:3])} ... failed with exit code {code} (log: {log}):\n{tail}")
    return wall


def run_peer(setting: Setting, rep: int, position: int, *, seed_check: bool) -> tuple[SideRun, Findings]:
    """One run of the official code: stage 1, stage 2 (and the seed check), each its own
    process, from a fresh working copy."""
    work = setting.work / f"rep{rep}" / "peer"
    paths = peer_layout(work, setting.subsets, setting.peer_dir)
    model = str(setting.model_dir)
    common = [
        "--model-path",
        model,
        "--teacher-model-path",
        model,
        "--self-defined-tp-size",
        "1",
        "--max_new_tokens",
        str(setting.max_tokens),
        "--dtype",
        "bfloat16",
        "--seed",
        str(SEED),
    ]
    phases: list[tuple[PeerPhase, list[str]]] = [
        (
            "discover",
            [PEER_STAGE1, "--bias-json", str(paths["bias_json"]), "--analysis-data-path", str(paths["target"])],
        ),
        (
            "verify",
            [
                PEER_STAGE2,
                "--bias-json",
                str(paths["bias_json"]),
                "--analysis-data-path",
                str(paths["target"]),
                "--test-data-path",
                str(paths["test"]),
            ],
        ),
    ]
    seeds_json = None
    if seed_check:
        seeds_json = peer_seed_check_layout(work, paths, setting.model_dir)
        phases.append(
            (
                "seeds",
                [
                    PEER_STAGE2,
                    "--bias-json",
                    str(seeds_json),
                    "--analysis-data-path",
                    str(paths["target"]),
                    "--test-data-path",
                    str(paths["test"]),
                ],
            )
        )
    wall = 0.0
    spans: list[Span] = []
    loads: list[tuple[float, float]] = []
    n_loads = 0
    for phase, args in phases:
        meter = work / f"meter_{phase}.jsonl"
        wall += run_measured(
            [setting.python, *args, *common],
            cwd=work,
            env=child_env(setting, meter, ours=False),
            log=work / f"{phase}.log",
        )
        events = read_jsonl(meter)
        spans += classify_peer_calls(events, phase, len(setting.subsets.test))
        loads += loads_of(events)
        n_loads += count_loads(events)
    findings = peer_findings(
        work,
        paths,
        setting.model_dir,
        (work / "discover.log").read_text(encoding="utf-8", errors="replace"),
        seeds_json,
    )
    return side_run(rep, position, wall, spans, loads, n_loads), findings


def our_config(
    setting: Setting, kind: Literal["paper", "defaults"], *, seeds: bool, files: dict[str, Path]
) -> dict[str, Any]:
    """Our run config: the shared model, data, seed library and budget; `paper`: the peer's
    rule and shape (see the module docstring); `defaults`: everything else at our defaults
    (one iteration)."""
    from bias_discovery.config import RunConfig

    model = {"provider": "vllm", "model": str(setting.model_dir), "dtype": "bfloat16"}
    budget = setting.max_tokens
    judge = RunConfig.model_fields["judge"].get_default(call_default_factory=True).model_dump()  # our default judge
    config: dict[str, Any] = {
        "name": f"vs-biasscope-{kind}",
        "seed": SEED,
        "target": model,
        "teacher": model,
        "seed_library": str(files["library"]),
        "max_iterations": 1,
        "data": {"target": str(files["target"]), "test": str(files["test"])},
        "perturb": {"max_tokens": budget, "temperature": 0.0},
        "deeper_explain": {"enabled": True, "max_tokens": budget},
        "identify": {"max_tokens": budget},
        "judge": {**judge, "max_tokens": budget, "temperature": 0.0},
    }
    if kind == "paper":
        config["judge"].update({"positions": "fixed", "reasoning": True, "reasoning_chars": None})
        config["identify"]["retries"] = 0
        config["validate"] = {
            "acceptance": "paper",
            "control": "baseline",
            "answer_check": False,
            "sequential": {"enabled": False},
            "seeds": seeds,
        }
    elif seeds:
        config["validate"] = {"seeds": True}
    return config


def run_ours(
    setting: Setting, rep: int, position: int, kind: Literal["paper", "defaults"], *, seeds: bool
) -> tuple[SideRun, Findings]:
    """One run of our loop (`bias-discovery run`) in a fresh run directory (its own call cache:
    nothing is answered from an earlier run)."""
    import yaml

    work = setting.work / f"rep{rep}" / f"ours-{kind}"
    work.mkdir(parents=True, exist_ok=True)
    files = our_files(setting)
    config_path = work / "config.yaml"
    config_path.write_text(yaml.safe_dump(our_config(setting, kind, seeds=seeds, files=files), sort_keys=False))
    meter = work / "meter.jsonl"
    run_dir = work / "run"
    wall = run_measured(
        [setting.python, "-m", "bias_discovery.cli", "run", str(config_path), "--run-dir", str(run_dir), "--quiet"],
        cwd=work,
        env=child_env(setting, meter, ours=True),
        log=work / "run.log",
    )
    spans = our_spans(read_jsonl(run_dir / "events.jsonl"))
    metered = read_jsonl(meter)
    return side_run(rep, position, wall, spans, loads_of(metered), count_loads(metered)), our_findings(run_dir)


def our_files(setting: Setting) -> dict[str, Path]:
    """The pairs for our loader and the peer's seed library in our format (written once)."""
    root = setting.work / "ours-data"
    files = {
        "target": root / "target.jsonl",
        "test": root / "test.jsonl",
        "fresh": root / "fresh_test.jsonl",
        "library": root / "seed_library.json",
    }
    if not files["library"].exists():
        write_our_jsonl(setting.subsets.target, files["target"])
        write_our_jsonl(setting.subsets.test, files["test"])
        write_our_jsonl(setting.subsets.fresh_test, files["fresh"])
        library = peer_seed_library(setting.peer_dir / PEER_SEED_LIBRARY)
        files["library"].write_text(library.model_dump_json(indent=1), encoding="utf-8")
    return files


# ------------------------------------------------------------------------------------------
# Our test of the peer's kept biases
# ------------------------------------------------------------------------------------------


class TestedBias(BaseModel):
    name: str
    accepted: bool
    control: str
    """What the decision compared with (the placebo, by default)."""
    delta: float
    """Δerror against the control (the reported effect)."""
    ci_low: float | None
    ci_high: float | None
    n: int
    p_adjusted: float | None


class KeptSurvival(BaseModel):
    tested: int
    survived: int
    rule: str
    data: str
    biases: list[TestedBias] = Field(default_factory=list)
    note: str = ""


def kept_as_biases(definitions: dict[str, str]) -> list[Bias]:
    """The peer's kept biases (name -> definition, as its library holds them) as our candidates."""
    out = []
    taken: set[str] = set()
    for name, definition in definitions.items():
        bias_id = f"peer-{slugify(name, 50)}"
        while bias_id in taken:
            bias_id += "-x"
        taken.add(bias_id)
        out.append(
            Bias(
                id=bias_id,
                name=name.strip(),
                definition=definition.strip() or name.strip(),
                origin=BiasOrigin(kind="discovered", iteration=1),
            )
        )
    return out


def our_test(
    biases: Sequence[Bias],
    pairs: Sequence[PreferencePair],
    config: Any,
    *,
    data: str,
    cache_path: Path | None = None,
    engines: dict[str, Any] | None = None,
) -> KeptSurvival:
    """Validate `biases` as one family with `config`'s rule (our defaults: the placebo control,
    the answer check, Holm's correction at alpha, sequential looks) on `pairs`, as the loop
    validates its own candidates. `engines` replaces the models (tests)."""
    from bias_discovery.judging import judge_pairs, measure_of
    from bias_discovery.llm.roles import ModelRoles
    from bias_discovery.stages.family import FamilySettings
    from bias_discovery.stages.validate import ValidationModels, ValidationSetup, run_placebo, validate_biases

    settings = config.validate_
    rule = f"{settings.acceptance} rule vs {settings.decision_control}, {settings.correction} at alpha {settings.alpha}"
    if not biases:
        return KeptSurvival(tested=0, survived=0, rule=rule, data=data, note="the peer kept no bias: nothing to test")
    roles = ModelRoles(
        {"target": config.target, "teacher": config.teacher, "checker": config.answer_checker()},
        cache_path=cache_path,
        engines=engines,
    )
    try:
        checker = roles["checker"] if settings.answer_check else None
        baseline = judge_pairs(roles["target"], pairs, config.judge, seed=config.seed)
        placebo = None
        if settings.control == "placebo":
            placebo = run_placebo(
                roles["teacher"],
                roles["target"],
                checker,
                pairs,
                baseline,
                perturb_settings=config.perturb,
                judge_settings=config.judge,
                settings=settings,
                seed=config.seed,
                pipeline=config.pipeline,
            )
        family = FamilySettings.planned(
            settings, 1, seed=config.seed, scope="test of the peer's kept biases", measure=measure_of(config.judge)
        )
        setup = ValidationSetup(
            family=family, perturb=config.perturb, judge=config.judge, test_data=data, pipeline=config.pipeline
        )
        models = ValidationModels(teacher=roles["teacher"], target=roles["target"], checker=checker)
        out = validate_biases(models, list(biases), list(pairs), baseline, setup, placebo=placebo)
    finally:
        roles.close()
    tested = []
    for bias, record in zip(out.candidates, out.records):
        v = bias.validation
        assert v is not None
        decisive = record.decisive_comparison
        tested.append(
            TestedBias(
                name=bias.name,
                accepted=v.accepted,
                control=v.decisive,
                delta=v.effect.delta,
                ci_low=v.effect.ci_low,
                ci_high=v.effect.ci_high,
                n=decisive.n,
                p_adjusted=decisive.p_adjusted,
            )
        )
    return KeptSurvival(
        tested=len(tested),
        survived=sum(t.accepted for t in tested),
        rule=rule,
        data=data,
        biases=tested,
        note=out.error_statement,
    )


def run_our_test(setting: Setting, kept: dict[str, str]) -> KeptSurvival:
    """`our_test` of the peer's kept biases in a process of its own (it loads vLLM), with our
    default rule on the fresh test pairs."""
    files = our_files(setting)
    work = setting.work / "our-test"
    work.mkdir(parents=True, exist_ok=True)
    spec = work / "spec.json"
    config = our_config(setting, "defaults", seeds=False, files={**files, "test": files["fresh"]})
    spec.write_text(
        json.dumps({"config": config, "kept": kept, "pairs": str(files["fresh"]), "out": str(work / "result.json")})
    )
    run_measured(
        [setting.python, str(Path(__file__).resolve()), "--our-test-child", str(spec)],
        cwd=work,
        env=child_env(setting, work / "meter.jsonl", ours=True),
        log=work / "run.log",
    )
    return KeptSurvival.model_validate_json((work / "result.json").read_text(encoding="utf-8"))


def our_test_child(spec_path: Path) -> None:
    from bias_discovery.config import RunConfig, validate_settings

    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    config = validate_settings(spec["config"], RunConfig, source=str(spec_path))
    pairs = load_pairs(spec["pairs"])
    out = Path(spec["out"])
    result = our_test(
        kept_as_biases(spec["kept"]),
        pairs,
        config,
        data=f"{len(pairs)} fresh JudgeBench pairs ({Path(spec['pairs']).name})",
        cache_path=out.parent / "calls.sqlite",
    )
    out.write_text(result.model_dump_json(indent=1), encoding="utf-8")


# ------------------------------------------------------------------------------------------
# The result
# ------------------------------------------------------------------------------------------


class SideSummary(BaseModel):
    """One side over its repetitions: medians per stage, and what it found (first repetition)."""

    wall_s: float
    engine_loads: float
    engine_load_s: float
    other_s: float
    stages: dict[str, StageCost]
    """Per stage: the median over the repetitions that have the stage."""
    front_half: StageCost
    """perturb -> identify together (`FRONT_HALF`), the median over the repetitions."""
    calls: float
    prompt_tokens: float
    completion_tokens: float
    found: list[str]
    n_found: int
    after_merge: list[str]
    kept: list[str]
    findings: Findings
    same_findings_every_rep: bool
    """Greedy decoding: every repetition read as many verdicts, misjudged, found, merged and kept
    the same (False: the side's own outputs vary from run to run on this machine)."""
    findings_per_rep: list[dict[str, Any]]
    """Per repetition: readable verdicts, misjudged pairs, biases found, after merge, kept."""
    runs: list[SideRun]


def _median(values: Iterable[float]) -> float:
    values = list(values)
    return round(statistics.median(values), 2) if values else 0.0


def median_cost(costs: Sequence[StageCost]) -> StageCost:
    return StageCost(
        wall_s=_median(c.wall_s for c in costs),
        calls=int(_median(c.calls for c in costs)),
        prompt_tokens=int(_median(c.prompt_tokens for c in costs)),
        completion_tokens=int(_median(c.completion_tokens for c in costs)),
    )


def summarize_side(runs: Sequence[tuple[SideRun, Findings]]) -> SideSummary:
    records = [r for r, _ in runs]
    stages: dict[str, StageCost] = {}
    for name in [*STAGES, *sorted({k for r in records for k in r.stages} - set(STAGES))]:
        having = [r.stages[name] for r in records if name in r.stages]
        if having:
            stages[name] = median_cost(having)
    first = runs[0][1]
    per_rep = [
        {
            "rep": r.rep,
            "judge_valid_rate": f.judge_valid_rate,
            "misjudged": f.misjudged,
            "found": f.found,
            "after_merge": f.after_merge,
            "kept": f.kept,
        }
        for r, f in runs
    ]
    keys = [{k: v for k, v in row.items() if k != "rep"} for row in per_rep]
    return SideSummary(
        wall_s=_median(r.wall_s for r in records),
        engine_loads=_median(r.engine_loads for r in records),
        engine_load_s=_median(r.engine_load_s for r in records),
        other_s=_median(r.other_s for r in records),
        stages=stages,
        front_half=median_cost([r.front_half for r in records]),
        calls=_median(r.calls for r in records),
        prompt_tokens=_median(sum(s.prompt_tokens for s in r.stages.values()) for r in records),
        completion_tokens=_median(sum(s.completion_tokens for s in r.stages.values()) for r in records),
        found=first.found,
        n_found=len(first.found),
        after_merge=first.after_merge,
        kept=first.kept,
        findings=first,
        same_findings_every_rep=all(k == keys[0] for k in keys),
        findings_per_rep=per_rep,
        runs=records,
    )


class Ratio(BaseModel):
    wall: float | None
    calls: float | None
    tokens: float | None


def _ratio(ours: float, peer: float) -> float | None:
    return round(ours / peer, 3) if peer else None


def rep_ratios(peer: Sequence[SideRun], ours: Sequence[SideRun]) -> list[Ratio]:
    """Ours ÷ peer within each repetition (both ran the same work in it)."""
    return [
        Ratio(wall=_ratio(o.wall_s, p.wall_s), calls=_ratio(o.calls, p.calls), tokens=_ratio(o.tokens, p.tokens))
        for p, o in zip(peer, ours)
    ]


def stage_ratios(peer: Sequence[SideRun], ours: Sequence[SideRun]) -> dict[str, Ratio]:
    """Per stage, ours ÷ peer within each repetition where both sides made calls in it, the
    median over those repetitions; and the engine loads (with vLLM's import)."""
    per_stage: dict[str, list[Ratio]] = defaultdict(list)
    for p, o in zip(peer, ours):
        for name in (*STAGES, "perturb_to_identify"):
            ps = p.front_half if name == "perturb_to_identify" else p.stages.get(name)
            os_ = o.front_half if name == "perturb_to_identify" else o.stages.get(name)
            if ps is not None and os_ is not None and ps.calls and os_.calls:
                per_stage[name].append(
                    Ratio(
                        wall=_ratio(os_.wall_s, ps.wall_s),
                        calls=_ratio(os_.calls, ps.calls),
                        tokens=_ratio(os_.tokens, ps.tokens),
                    )
                )
        per_stage["engine_load"].append(
            Ratio(
                wall=_ratio(o.engine_load_s, p.engine_load_s), calls=_ratio(o.engine_loads, p.engine_loads), tokens=None
            )
        )
    return {name: median_ratio(ratios) for name, ratios in per_stage.items()}


def median_ratio(ratios: Sequence[Ratio]) -> Ratio:
    def med(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return round(statistics.median(known), 3) if known else None

    return Ratio(
        wall=med([r.wall for r in ratios]), calls=med([r.calls for r in ratios]), tokens=med([r.tokens for r in ratios])
    )


def seed_check(peer: Findings, ours: Findings) -> dict[str, Any]:
    """The seed library's error rates side by side (`Result.seed_check`)."""
    names = list(dict.fromkeys([*ours.seed_error_rates, *peer.seed_error_rates]))  # ours: the library's order
    return {
        "peer_baseline_error": peer.seed_baseline_error,
        "ours_baseline_error": ours.seed_baseline_error,
        "rates": {
            name: {
                "peer": peer.seed_error_rates[name].error if name in peer.seed_error_rates else None,
                "ours": ours.seed_error_rates[name].error if name in ours.seed_error_rates else None,
                "ours_control": ours.seed_error_rates[name].control_error if name in ours.seed_error_rates else None,
                "ours_n": ours.seed_error_rates[name].n if name in ours.seed_error_rates else None,
            }
            for name in names
        },
    }


class Difference(BaseModel):
    cause: Literal["procedure", "sampling"]
    what: str


class Result(BaseModel):
    """benchmarks/results/vs_biasscope.json."""

    benchmark: str = "vs_biasscope"
    date: str
    command: str
    our_commit: str
    peer_repo: str = PEER_REPO
    peer_commit: str
    model: str
    vllm: str
    machine: dict[str, Any]
    load_before: str
    load_after: str
    n_target: int
    n_test: int
    n_fresh_test: int
    sizes: str
    """What the pairs are and why these sizes."""
    max_tokens: int
    reps: int
    order: list[list[str]]
    seed_library: str
    shims: list[dict[str, str]]
    peer: SideSummary
    ours: SideSummary
    """Ours with the paper's rule (the same work)."""
    defaults: SideSummary
    """Ours with our default rule, once."""
    wall_ratio: float | None
    """Ours (paper rule) ÷ peer, wall time of the whole run, median over the repetitions."""
    calls_ratio: float | None
    tokens_ratio: float | None
    ratios_per_rep: list[Ratio]
    ratios_per_stage: dict[str, Ratio]
    seed_check: dict[str, Any]
    """Per seed bias, the error rate each side reports on the same test pairs (first repetition):
    the peer's over the verdicts it could parse of its shuffled rewrites, ours (paper rule) over
    the items valid in both arms, next to the same items unperturbed."""
    peer_kept_surviving_our_test: KeptSurvival
    differences: list[Difference]
    total_s: float
    """The whole benchmark, data preparation to this file."""


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f} %"


def differences(peer: SideSummary, ours: SideSummary, defaults: SideSummary) -> list[Difference]:
    """Where the outputs differ, and why: the procedure (different requests, parsing, rules) or
    the model's sampling (the same request answered differently)."""
    pf, of = peer.findings, ours.findings
    out = [
        Difference(
            cause="procedure",
            what=(
                f"Reading the verdict: the peer searches the judge's free text for 'Decision: <digit>' and drops what "
                f"does not match; ours constrains the output to 'Reasoning: ... Verdict: A|B' while it is generated. "
                f"Readable verdicts on the perturbed target pairs: peer {_pct(pf.judge_valid_rate)}, ours {_pct(of.judge_valid_rate)}. "
                "Every later difference in what is found follows from this one where the peer reads none."
            ),
        ),
        Difference(
            cause="procedure",
            what=(
                "Prompts: each side uses its own wording for the rewrite, the judge, the explanation, the detection and "
                "the merge (ours are not copies), so even greedy decoding of the same model gives different texts: "
                "the rewrites, verdicts and named biases differ because the requests differ, not because of sampling."
            ),
        ),
        Difference(
            cause="procedure",
            what=(
                "Invalid rewrites: the peer judges every rewrite, also one cut off by the token budget or identical to "
                "the original; ours judges only valid rewrites (the rest are counted, not judged): evaluate calls "
                f"peer {peer.stages.get('evaluate', StageCost()).calls}, ours {ours.stages.get('evaluate', StageCost()).calls} "
                f"for {peer.stages.get('perturb', StageCost()).calls} rewrites each."
            ),
        ),
        Difference(
            cause="procedure",
            what=(
                "Order shown to the judge: the peer's target file has the chosen response first on every row (its "
                "RewardBench parquet has label 1 throughout) and its stage 1 never swaps, so a judge that always picks "
                "the first answer is never wrong there; ours with the paper's rule keeps that order (judge.positions: fixed), "
                "our defaults swap it with a seeded coin per pair. The peer's stage 2 shuffles A/B for each bias but not "
                "for its baseline; ours compares the same items in the same order."
            ),
        ),
        Difference(
            cause="procedure",
            what=(
                "Detection: the peer asks for a ```json block in free text and takes a bias only when it parses with a "
                "definition; ours constrains the answer to a JSON schema (name, definition, manifestations) or 'none'."
            ),
        ),
        Difference(
            cause="procedure",
            what=(
                "Merge: the peer asks the teacher about each new name against each library entry, one call at a time, "
                "until one says 'Decision: 0'; ours shortlists the nearest library entries and candidates by embedding "
                "similarity and asks a constrained same/new only about those, in one batch."
            ),
        ),
        Difference(
            cause="procedure",
            what=(
                "Validation: the peer keeps a bias when its error on its rewrites of the test pairs exceeds the error on "
                "the originals, each over the verdicts it could parse (1.0 when it can parse none); ours with the "
                "paper's rule applies the same rule to the items valid in both arms; our defaults test against a neutral "
                "rewrite of the same items (placebo) with McNemar's exact test, Holm's correction, sequential looks and "
                "an answer check. The peer recomputes its baseline in every stage-2 process; ours once per run."
            ),
        ),
        Difference(
            cause="procedure",
            what=(
                f"Engine loads: the peer loads a vllm.LLM for each role in each step (teacher, judge, teacher; teacher, "
                f"judge in stage 2): {peer.engine_loads:g} per run here; ours loads one engine for both roles: "
                f"{ours.engine_loads:g}."
            ),
        ),
    ]
    for name, side in (("peer", peer), ("ours (paper rule)", ours), ("ours (defaults)", defaults)):
        if len(side.runs) > 1:
            out.append(
                Difference(
                    cause="sampling",
                    what=(
                        f"{name}: its repetitions found, merged and kept "
                        + (
                            "the same (greedy decoding repeated itself on this machine)"
                            if side.same_findings_every_rep
                            else "different things (greedy decoding did not repeat itself: batch composition changes the floating-point sums)"
                        )
                    ),
                )
            )
    out.append(
        Difference(
            cause="sampling",
            what=(
                "Both sides decode greedily (temperature 0, no top-k/top-p, repetition penalty 1) on the same weights and "
                "engine with the same budget, so no difference above comes from random sampling; what remains is numerical: "
                "the same prompt in a batch of another size can give another greedy text on a CPU."
            ),
        )
    )
    return out


# ------------------------------------------------------------------------------------------
# Main
# ------------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    cpu = cpu_model()
    memory = None
    try:
        memory = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": memory,
        "python": platform.python_version(),
        "os": platform.platform(),
    }


def load_average() -> str:
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return "unknown"


def vllm_version() -> str:
    from importlib import metadata

    for name in ("vllm-cpu", "vllm"):
        try:
            return f"{name} {metadata.version(name)}"
        except metadata.PackageNotFoundError:
            continue
    return "not installed"


def check_peer(peer_dir: Path) -> None:
    missing = [name for name in (*PEER_FILES, str(PEER_SEED_LIBRARY)) if not (peer_dir / name).is_file()]
    if missing:
        raise SystemExit(f"--peer {peer_dir}: not a BiasScope checkout ({PEER_REPO}); missing {', '.join(missing)}")


def default_model() -> Path:
    from bias_discovery.smollm2_hf import build_hf_smollm2

    cache = os.environ.get("BIAS_DISCOVERY_TEST_MODEL_CACHE")
    return build_hf_smollm2(Path(cache) if cache else None)


def on_cpu() -> bool:
    import torch

    return not torch.cuda.is_available()


SIZES_WHY = (
    "{n_target} RewardBench pairs (target) drawn with seed 42 among the {n_rb} of at most {t} characters, {n_test} "
    "JudgeBench pairs (test) drawn among the {n_jb} of at most {s} characters, and {n_fresh} other JudgeBench pairs of "
    "that length for our test of the peer's kept biases. Short pairs and these sizes keep the whole benchmark (the "
    "peer {reps} times, ours with the paper's rule {reps} times, ours with defaults once, our test once) under 30 "
    "minutes on 2 CPU cores: SmolLM2-135M on vLLM's CPU build reads ~1,100 prompt tokens and writes ~500 tokens a "
    "second in a full batch, and each vllm.LLM load costs ~30 s."
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--peer", type=Path, help=f"A checkout of {PEER_REPO}.")
    parser.add_argument("--json", type=Path, help="Where to write the result (benchmarks/results/vs_biasscope.json).")
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="The shared data copy (default: $BIAS_DISCOVERY_DATA_DIR)."
    )
    parser.add_argument(
        "--model",
        type=Path,
        default=None,
        help="A Hugging Face-format model directory for both roles (default: SmolLM2-135M-Instruct, built once).",
    )
    parser.add_argument("--n-target", type=int, default=16)
    parser.add_argument("--n-test", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=160, help="Completion budget of every call, both sides.")
    parser.add_argument("--reps", type=int, default=2, help="Repetitions of peer and ours (order alternates).")
    parser.add_argument(
        "--seed-check",
        choices=("first", "all", "none"),
        default="first",
        help="Which repetitions also validate the seed library on the test pairs (both sides).",
    )
    parser.add_argument(
        "--work", type=Path, default=None, help="Working directory (default: a temporary one, removed at the end)."
    )
    parser.add_argument("--our-test-child", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.our_test_child is not None:
        our_test_child(args.our_test_child)
        return 0
    if args.peer is None or args.json is None:
        parser.error("--peer and --json are required")
    started = time.time()
    peer_dir = args.peer.expanduser().resolve()
    check_peer(peer_dir)
    data_dir = args.data_dir or (
        Path(os.environ["BIAS_DISCOVERY_DATA_DIR"]) if os.environ.get("BIAS_DISCOVERY_DATA_DIR") else None
    )
    if data_dir is None:
        raise SystemExit(
            "no data: pass --data-dir or set BIAS_DISCOVERY_DATA_DIR (the shared copy of JudgeBench and RewardBench)"
        )
    model_dir = (args.model or default_model()).expanduser().resolve()
    subsets = make_subsets(data_dir, args.n_target, args.n_test, args.n_test)
    temporary = args.work is None
    work = Path(tempfile.mkdtemp(prefix="vs-biasscope-")) if temporary else args.work.expanduser().resolve()
    setting = Setting(
        peer_dir=peer_dir, model_dir=model_dir, work=work, subsets=subsets, max_tokens=args.max_tokens, eager=on_cpu()
    )
    load_before = load_average()
    print(f"vs_biasscope: work in {work}; load average before: {load_before}", flush=True)
    peer_runs: list[tuple[SideRun, Findings]] = []
    our_runs: list[tuple[SideRun, Findings]] = []
    order = []
    try:
        for rep in range(1, args.reps + 1):
            seeds = args.seed_check == "all" or (args.seed_check == "first" and rep == 1)
            sides = ["peer", "ours"] if rep % 2 else ["ours", "peer"]
            order.append(sides)
            for position, side in enumerate(sides, start=1):
                print(f"rep {rep}: {side} ...", flush=True)
                if side == "peer":
                    peer_runs.append(run_peer(setting, rep, position, seed_check=seeds))
                else:
                    our_runs.append(run_ours(setting, rep, position, "paper", seeds=seeds))
                print(
                    f"rep {rep}: {side} took {(peer_runs if side == 'peer' else our_runs)[-1][0].wall_s:.0f} s",
                    flush=True,
                )
        print("ours with defaults ...", flush=True)
        default_runs = [run_ours(setting, 1, 3, "defaults", seeds=False)]
        kept = peer_runs[0][1].kept_definitions
        print(f"our test of the peer's {len(kept)} kept biases ...", flush=True)
        survival = run_our_test(setting, kept) if kept else our_test([], [], _defaults_config(setting), data="-")
        load_after = load_average()
        peer, ours, defaults = summarize_side(peer_runs), summarize_side(our_runs), summarize_side(default_runs)
        per_rep = rep_ratios(peer.runs, ours.runs)
        overall = median_ratio(per_rep)
        rb = load_pairs("rewardbench", data_dir=data_dir)
        jb = load_pairs("judgebench", data_dir=data_dir, bad_rows=[])
        result = Result(
            date=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            command="python benchmarks/vs_biasscope.py " + " ".join(sys.argv[1:] if argv is None else argv),
            our_commit=git_commit(REPO),
            peer_commit=git_commit(peer_dir),
            model=f"{model_dir.name} (Hugging Face format, bfloat16)",
            vllm=vllm_version(),
            machine=machine(),
            load_before=load_before,
            load_after=load_after,
            n_target=len(subsets.target),
            n_test=len(subsets.test),
            n_fresh_test=len(subsets.fresh_test),
            sizes=SIZES_WHY.format(
                n_target=len(subsets.target),
                n_test=len(subsets.test),
                n_fresh=len(subsets.fresh_test),
                reps=args.reps,
                n_rb=sum(pair_chars(p) <= TARGET_MAX_CHARS for p in rb),
                n_jb=sum(pair_chars(p) <= TEST_MAX_CHARS for p in jb),
                t=TARGET_MAX_CHARS,
                s=TEST_MAX_CHARS,
            ),
            max_tokens=args.max_tokens,
            reps=args.reps,
            order=order,
            seed_library=(
                "the peer's data/bias/basic_biases.json (7 biases), converted to our library format for ours: the same "
                "names and definitions, its manifestations paragraph as one manifestation (our shipped biasscope7 has the "
                "same 7 concepts in our own words, so it is not used here)"
            ),
            shims=SHIMS,
            peer=peer,
            ours=ours,
            defaults=defaults,
            wall_ratio=overall.wall,
            calls_ratio=overall.calls,
            tokens_ratio=overall.tokens,
            ratios_per_rep=per_rep,
            ratios_per_stage=stage_ratios(peer.runs, ours.runs),
            seed_check=seed_check(peer.findings, ours.findings),
            peer_kept_surviving_our_test=survival,
            differences=differences(peer, ours, defaults),
            total_s=round(time.time() - started, 1),
        )
    finally:
        if temporary:
            shutil.rmtree(work, ignore_errors=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(result.model_dump_json(indent=1) + "\n", encoding="utf-8")
    print(table(result))
    return 0


def _defaults_config(setting: Setting) -> Any:
    from bias_discovery.config import RunConfig, validate_settings

    return validate_settings(
        our_config(setting, "defaults", seeds=False, files=our_files(setting)), RunConfig, source="defaults"
    )


def table(result: Result) -> str:
    """The per-stage table (medians) as markdown: wall s / calls / tokens, peer and ours."""
    sides = (("peer", result.peer), ("ours, paper rule", result.ours), ("ours, defaults", result.defaults))
    lines = [
        "| stage | "
        + " | ".join(f"{n}: wall s / calls / tokens" for n, _ in sides)
        + " | ratio wall / calls / tokens |",
        "|---|" + "---|" * (len(sides) + 1),
    ]

    def cell(cost: StageCost | None) -> str:
        return "-" if cost is None else f"{cost.wall_s:.1f} / {cost.calls} / {cost.tokens:,}"

    def ratio(r: Ratio | None) -> str:
        if r is None:
            return "-"
        return " / ".join("-" if v is None else f"{v:.2f}" for v in (r.wall, r.calls, r.tokens))

    for name in STAGES:
        costs = [s.stages.get(name) for _, s in sides]
        if any(c is not None for c in costs):
            lines.append(
                f"| {name} | " + " | ".join(cell(c) for c in costs) + f" | {ratio(result.ratios_per_stage.get(name))} |"
            )
    lines.append(
        "| perturb → identify, together | "
        + " | ".join(cell(s.front_half) for _, s in sides)
        + f" | {ratio(result.ratios_per_stage.get('perturb_to_identify'))} |"
    )
    lines.append(
        "| engine loads | "
        + " | ".join(f"{s.engine_load_s:.1f} s / {s.engine_loads:g} loads / -" for _, s in sides)
        + f" | {ratio(result.ratios_per_stage.get('engine_load'))} |"
    )
    lines.append(
        "| other (start-up, imports, files, exit) | "
        + " | ".join(f"{s.other_s:.1f} / - / -" for _, s in sides)
        + " | - |"
    )
    lines.append(
        "| **whole run** | "
        + " | ".join(
            f"**{s.wall_s:.1f} / {s.calls:g} / {s.prompt_tokens + s.completion_tokens:,.0f}**" for _, s in sides
        )
        + f" | **{ratio(Ratio(wall=result.wall_ratio, calls=result.calls_ratio, tokens=result.tokens_ratio))}** |"
    )
    lines.append("")
    lines.append("| | " + " | ".join(n for n, _ in sides) + " |")
    lines.append("|---|" + "---|" * len(sides))
    for label, get in (
        ("readable verdicts (target)", lambda s: _pct(s.findings.judge_valid_rate)),
        ("misjudged target pairs", lambda s: str(s.findings.misjudged)),
        ("biases named (found)", lambda s: str(s.n_found)),
        ("after merge", lambda s: str(len(s.after_merge))),
        ("kept", lambda s: str(len(s.kept))),
    ):
        lines.append(f"| {label} | " + " | ".join(get(s) for _, s in sides) + " |")
    rates = result.seed_check.get("rates", {})
    if rates:
        lines.append("")
        lines.append("| seed bias (test pairs) | peer: error | ours (paper rule): error / unperturbed, n |")
        lines.append("|---|---|---|")

        def fmt(v: Any) -> str:
            return "-" if v is None else f"{v:.2f}"

        lines.append(
            f"| (unperturbed) | {fmt(result.seed_check.get('peer_baseline_error'))} | {fmt(result.seed_check.get('ours_baseline_error'))} |"
        )
        for name, r in rates.items():
            lines.append(
                f"| {name} | {fmt(r['peer'])} | {fmt(r['ours'])} / {fmt(r['ours_control'])}, {r['ours_n'] if r['ours_n'] is not None else '-'} |"
            )
    k = result.peer_kept_surviving_our_test
    lines.append("")
    lines.append(f"peer's kept biases surviving our test: {k.survived} of {k.tested} ({k.rule}; {k.data}) {k.note}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
