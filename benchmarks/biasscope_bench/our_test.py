"""Our test of the peer's kept biases: validated by our default rule (placebo control, Holm's
correction, sequential looks, answer check) on JudgeBench pairs disjoint from those the peer
selected them on, because a selection is tested on fresh items."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from bias_discovery.api import Bias, BiasOrigin, PreferencePair, RunConfig, run_config_of, slugify, validate_family

from .inputs import Setting, our_files
from .metering import BENCHMARKS, child_env, run_measured
from .ours import our_config

ENTRY = BENCHMARKS / "vs_biasscope.py"
"""The benchmark's entry script: the child process of `run_our_test` runs it."""


class TestedBias(BaseModel):
    """One of the peer's kept biases, through our test."""

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
    """How many of the peer's kept biases our test accepts, under which rule, on which data."""

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
    config: RunConfig,
    *,
    data: str,
    cache_path: Path | None = None,
    engines: Mapping[str, Any] | None = None,
) -> KeptSurvival:
    """Validate `biases` as one family with `config`'s rule (our defaults: the placebo control,
    the answer check, Holm's correction at alpha, sequential looks) on `pairs`, as the loop
    validates its own candidates (`api.validate_family`). `engines` replaces the models (tests)."""
    settings = config.validate_
    rule = f"{settings.acceptance} rule vs {settings.decision_control}, {settings.correction} at alpha {settings.alpha}"
    if not biases:
        return KeptSurvival(tested=0, survived=0, rule=rule, data=data, note="the peer kept no bias: nothing to test")
    out = validate_family(
        biases,
        pairs,
        config,
        scope="test of the peer's kept biases",
        data=data,
        cache=cache_path if cache_path is not None else False,
        engines=engines,
    )
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


def defaults_config(setting: Setting) -> RunConfig:
    """Our default settings on the benchmark's model and data (what `our_test` decides with)."""
    return run_config_of(our_config(setting, "defaults", seeds=False, files=our_files(setting)))


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
        [setting.python, str(ENTRY), "--our-test-child", str(spec)],
        cwd=work,
        env=child_env(setting, work / "meter.jsonl", ours=True),
        log=work / "run.log",
    )
    return KeptSurvival.model_validate_json((work / "result.json").read_text(encoding="utf-8"))


def our_test_child(spec_path: Path) -> None:
    """The child of `run_our_test`: read its spec, test, write the result."""
    from bias_discovery.api import load_data

    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    config = run_config_of(spec["config"])
    pairs, _ = load_data(spec["pairs"], data_dir=None, limit=None, skip_bad_rows=False, warn=lambda message: None)
    out = Path(spec["out"])
    result = our_test(
        kept_as_biases(spec["kept"]),
        pairs,
        config,
        data=f"{len(pairs)} fresh JudgeBench pairs ({Path(spec['pairs']).name})",
        cache_path=out.parent / "calls.sqlite",
    )
    out.write_text(result.model_dump_json(indent=1), encoding="utf-8")
