"""Streamed stages with the real embedded model: SmolLM2 as a target and a teacher of their own
(two llama.cpp engines, so the streamed order really runs them at once) gives the same records
as the staged order, for an iteration's front half and for a look of validation. The whole
loop streamed on the real model is `small_real_run` (test_loop_real.py), SIGKILLed and resumed
by its kill test."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from bias_discovery.config import ExplainSettings, IdentifySettings, PerturbSettings
from bias_discovery.data.loaders import load_pairs
from bias_discovery.judging import JudgeSettings
from bias_discovery.library import load_seed_library
from bias_discovery.llm.config import ModelConfig
from bias_discovery.llm.llamacpp import LlamaCppEngine
from bias_discovery.progress import ProgressCallback
from bias_discovery.stages import assign_biases, deeper_explain, evaluate, identify_biases, perturb
from bias_discovery.stages.streamed import FrontHalfEngines, stream_front_half
from bias_discovery.stages.validate import ValidationModels, rewrite_check_judge

pytestmark = [pytest.mark.model, pytest.mark.llamacpp]

JUDGE = JudgeSettings(positions="swap", reasoning_chars=120, max_tokens=72)
PERTURB = PerturbSettings(max_tokens=128)
EXPLAIN = ExplainSettings(max_tokens=48)
IDENTIFY = IdentifySettings(max_tokens=160)
SEED = 42


class Timed:
    """A llama.cpp engine that records the order in which its calls started and ended: each
    gets a number from `ORDER`, shared by the engines (an order, not times)."""

    ORDER = itertools.count()

    def __init__(self, engine: LlamaCppEngine) -> None:
        self.engine = engine
        self.engine_id = engine.engine_id
        self.spans: list[tuple[int, int]] = []

    def generate(self, requests, progress=None, on_response=None):  # type: ignore[no-untyped-def]
        return self.engine.generate(requests, progress, on_response)

    def submit(self, request):  # type: ignore[no-untyped-def]
        start = next(Timed.ORDER)
        future = self.engine.submit(request)
        future.add_done_callback(lambda _: self.spans.append((start, next(Timed.ORDER))))
        return future

    def close(self) -> None:
        self.engine.close()


@pytest.fixture(scope="module")
def two_smollm2(smollm2_gguf_path: Path) -> Iterator[tuple[LlamaCppEngine, LlamaCppEngine]]:
    """SmolLM2 loaded twice: a target and a teacher engine that can run at the same time."""
    config = ModelConfig.from_spec("llamacpp/smollm2", n_ctx=2048, n_threads=1)
    target, teacher = LlamaCppEngine(config), LlamaCppEngine(config)
    yield target, teacher
    target.close()
    teacher.close()


@contextmanager
def quiet(total: int) -> Iterator[ProgressCallback]:
    yield lambda n: None


def test_the_streamed_front_half_equals_the_staged_stages_on_smollm2(two_smollm2) -> None:  # type: ignore[no-untyped-def]
    target, teacher = two_smollm2
    pairs = load_pairs("demo:target", limit=4)
    items = assign_biases(pairs, load_seed_library("biasscope7").biases, seed=SEED, iteration=1)

    rewrites = perturb(teacher, items, PERTURB, seed=SEED)
    result, cases = evaluate(target, rewrites, JUDGE, seed=SEED)
    explained = deeper_explain(target, cases, JUDGE, EXPLAIN, seed=SEED)
    identified = identify_biases(teacher, explained, IDENTIFY, seed=SEED)

    timed = Timed(target), Timed(teacher)
    steps = {name: quiet for name in ("perturb", "evaluate", "deeper_explain", "identify")}
    engines = FrontHalfEngines(perturb=timed[1], evaluate=timed[0], explain=timed[0], identify=timed[1])  # type: ignore[arg-type]
    out = stream_front_half(
        engines, items, perturb=PERTURB, judge=JUDGE, explain=EXPLAIN, identify=IDENTIFY, seed=SEED, steps=steps
    )

    assert [p.model_dump_json() for p in out.perturbed] == [p.model_dump_json() for p in rewrites]
    assert out.result.model_dump_json() == result.model_dump_json()
    assert [c.model_dump_json() for c in out.cases] == [c.model_dump_json() for c in cases]
    assert [c.model_dump_json() for c in out.explained] == [c.model_dump_json() for c in explained]
    assert [r.model_dump_json() for r in out.identified] == [r.model_dump_json() for r in identified]
    assert sum(p.valid for p in rewrites) >= 2 and result.judgments  # the stages had work to stream
    # the judge started before the teacher's last rewrite was back
    first_judged = min(start for start, _ in timed[0].spans)
    assert first_judged < max(end for _, end in timed[1].spans[: len(items)])


def test_a_streamed_validation_look_equals_the_staged_one_on_smollm2(two_smollm2) -> None:  # type: ignore[no-untyped-def]
    """Rewrite -> answer check (the target checks: it did not write them) -> judge."""
    target, teacher = two_smollm2
    bias = load_seed_library("biasscope7").by_id("length-bias")  # SmolLM2 keeps two of these rewrites within budget
    items = [(pair, bias) for pair in load_pairs("demo:test", limit=4)]
    models = ValidationModels(teacher=teacher, target=target, checker=target)
    bar = lambda name, total: quiet(total)  # noqa: E731
    run = functools.partial(
        rewrite_check_judge,
        models,
        items,
        perturb_settings=PERTURB,
        judge_settings=JUDGE,
        seed=SEED,
        bar=bar,
        labels=("perturb", "check", "judge"),
    )
    staged, streamed = run(pipeline="staged"), run(pipeline="streamed")
    records, judgments, outcomes = staged
    assert [r.model_dump_json() for r in streamed[0]] == [r.model_dump_json() for r in records]
    assert [j.model_dump_json() for j in streamed[1]] == [j.model_dump_json() for j in judgments]
    assert [o.model_dump_json() if o else None for o in streamed[2]] == [
        o.model_dump_json() if o else None for o in outcomes
    ]
    assert any(r.check_method is not None for r in records) and judgments  # the answers were checked, then judged
