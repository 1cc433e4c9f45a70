"""Running ours (`bias-discovery run`) on the same work, with the paper's rule or our defaults,
and reading its meter and run record."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from bias_discovery.api import RunConfig, load_run

from .findings import ErrorRate, Findings, unique_names
from .inputs import SEED, Setting, our_files
from .metering import SideRun, Span, child_env, count_loads, loads_of, read_events, run_measured, side_run

Kind = Literal["paper", "defaults"]


def our_config(setting: Setting, kind: Kind, *, seeds: bool, files: dict[str, Path]) -> dict[str, Any]:
    """Our run config: the shared model, data, seed library and budget; `paper`: the peer's
    rule and shape (see the package docstring); `defaults`: everything else at our defaults
    (one iteration)."""
    model = {"provider": "vllm", "model": str(setting.model_dir), "dtype": setting.dtype}
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


def _ours_rate(candidate: Any) -> ErrorRate:
    """A validated candidate's error against its paired control (`vs_baseline`)."""
    vs = candidate.vs_baseline
    return ErrorRate(error=vs.arm_error, control_error=vs.control_error, n=vs.n)


def our_findings(run_dir: Path) -> Findings:
    """What our run wrote: iteration 1's judgments, identified biases, candidates and
    validation; iteration 0's validation when the seed library was validated."""
    run = load_run(run_dir).record
    record = run.iteration(1)
    judgments = record.judgments.read() if record.judgments.exists() else []
    identified = record.identified.read() if record.identified.exists() else []
    candidates = record.candidates.read() if record.candidates.exists() else []
    report = record.validation.read_if_exists()
    out = Findings(
        judge_valid_rate=(sum(j.verdict is not None for j in judgments) / len(judgments)) if judgments else None,
        misjudged=len(record.misjudged.read()) if record.misjudged.exists() else None,
        found=unique_names(r.name for r in identified if r.status == "bias"),
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


def run_ours(setting: Setting, rep: int, position: int, kind: Kind, *, seeds: bool) -> tuple[SideRun, Findings]:
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
    spans = our_spans(read_events(run_dir / "events.jsonl"))
    metered = read_events(meter)
    return side_run(rep, position, wall, spans, loads_of(metered), count_loads(metered)), our_findings(run_dir)
