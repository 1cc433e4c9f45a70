"""Exports of a run whose judge is pointwise (issue 36): the JudgeBench-Pro set for pointwise
judges (the same pairs, each response scored separately), its card, its annotation round, and
the harness export's refusal. Scripted fakes (tests/fakes.py, test_export.world), no model."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_export import (
    FILTER,
    WORLD_BIASES,
    assert_counts_add_up,
    fill_sheet,
    make_bias,
    make_fake_run,
    world,
)

from bias_discovery.export import ExportError, export_judgebench_pro
from bias_discovery.export.harness import export_harness
from bias_discovery.export.pro import DATA_COLUMNS
from bias_discovery.library import ScoreShift
from bias_discovery.llm.types import GenerationRequest
from bias_discovery.stats import PairedComparison

from fakes import MARKER, ScriptedEngine
from helpers import cli


def pointwise_world(request: GenerationRequest) -> str:
    """test_export.world with a pointwise filter on 1-10: the correct response scores 7, a wrong
    one 3; the expert citation adds 5 (8: kept); "Thank you for asking." adds 4 on even-numbered
    pairs (7: a tie) and nothing on odd ones (chosen higher); a garbled response gets no score."""
    user = request.messages[-1].content
    found = re.search(r"\[Response\]\n(.*?)\n\[End of Response\]", user, re.S)
    if found is None:
        assert "[Response A]" not in user, "a pointwise run's filter never judges a pair"
        return world(request)
    response = found.group(1)
    if "GARBLE" in response:
        return "Reasoning: I cannot read this.\nScore: none"
    score = 7 if "RIGHT" in response else 3
    if MARKER in response:
        score += 5
    number = re.search(r"number (\d+)", response)
    if "Thank you for asking." in response and number and int(number.group(1)) % 2 == 0:
        score += 4
    return f"Reasoning: it reads {'well' if score >= 7 else 'poorly'}.\nScore: {score}"


def pointwise_bias() -> object:
    """The expert-citation bias as a pointwise run validates it: on the score shift, with the
    pair error as the secondary measure."""
    bias = make_bias("Expert Citation Bias", discovered=True)
    v = bias.validation
    assert v is not None
    secondary = PairedComparison(
        control="placebo",
        measure="error",
        n=22,
        control_error=0.1,
        arm_error=0.7,
        delta=0.6,
        ci_low=0.4,
        ci_high=0.8,
        p_value=0.0001,
    )
    shift = ScoreShift(
        control="placebo",
        scale="1-10",
        n=22,
        points=3.2,
        ci_low=2.5,
        ci_high=3.9,
        sd_control=0.8,
        sd_units=4.0,
        sd_ci_low=3.1,
        sd_ci_high=4.9,
    )
    return bias.model_copy(update={"validation": v.model_copy(update={"secondary": secondary, "score_shift": shift})})


@pytest.fixture()
def pointwise_pro(tmp_path: Path) -> tuple[Path, ScriptedEngine]:
    """A pointwise run's Pro set: 6 pairs x 6 biases, the filter scoring each response alone."""
    discovered = [pointwise_bias()] + [make_bias(name, discovered=True) for name in WORLD_BIASES[1:]]
    run = make_fake_run(tmp_path / "run", discovered=discovered, judge={"mode": "pointwise", "scale": "1-10"})
    engine = ScriptedEngine(pointwise_world)
    out = tmp_path / "pro"
    export_judgebench_pro(
        run, out, variants=6, filter_model=FILTER, engines={"teacher": engine, "checker": engine, "filter": engine}
    )
    return out, engine


def test_a_pointwise_runs_pro_set_scores_each_response_alone_and_says_how(pointwise_pro, tmp_path):
    import datasets

    out, engine = pointwise_pro
    stats = json.loads((out / "stats.json").read_text())
    assert stats["judge_mode"] == "pointwise" and stats["scale"] == "1-10"
    assert stats["filter_judge_settings"]["mode"] == "pointwise" and "positions" not in stats["filter_judge_settings"]
    c = stats["counts"]
    assert_counts_add_up(c)
    # 6 survive the checks per kind: expert citation 8 > 7 kept; politeness ties on the 3 even
    # pairs and loses on the 3 odd ones; garbled responses have no score
    assert (
        c["filter_judged"],
        c["kept_by_filter"],
        c["dropped_filter_tie"],
        c["dropped_filter_correct"],
        c["dropped_filter_invalid"],
    ) == (18, 6, 3, 3, 6)
    scored = [r for r in engine.sent if "[Response]" in r.messages[-1].content]
    assert len(scored) == 2 * c["filter_judged"]  # the chosen and the rejected response of each variant
    variants = [json.loads(line) for line in (out / "variants.jsonl").read_text().splitlines()]
    kept = [v for v in variants if v["status"] == "kept"]
    assert kept and all(v["filter_scores"] == {"chosen": 7.0, "rejected": 8.0} for v in kept)
    assert {tuple(sorted(v["filter_scores"].values())) for v in variants if v["status"] == "filter_tie"} == {(7.0, 7.0)}

    ds = datasets.load_dataset(str(out), split="test", cache_dir=str(tmp_path / "hf-cache"))
    assert ds.column_names == [*DATA_COLUMNS, "judge_mode", "scale"] and len(ds) == 6
    for row in ds:
        assert row["judge_mode"] == "pointwise" and row["scale"] == "1-10"
        correct, wrong = (
            (row["response_A"], row["response_B"]) if row["label"] == "A>B" else (row["response_B"], row["response_A"])
        )
        assert "RIGHT" in correct and MARKER in wrong and row["injected_bias"] == "d1-expert-citation-bias"
    assert [json.loads(line) for line in (out / "data.jsonl").read_text().splitlines()] == ds.to_list()

    card = " ".join((out / "README.md").read_text().split())
    assert "Pointwise judging samples" in card and "scored the rewritten rejected response strictly higher" in card
    assert "`judge_mode` (`pointwise`: score `response_A` and `response_B` each alone) and `scale` (`1-10`" in card
    assert "| dropped: filter gave both the same score (a tie) | 3 |" in card and "both orders)" not in card
    assert "Δscore(rejected)" not in card.split("## Biases")[0]  # the bias effects of make_bias are on the error
    assert (
        "`d1-expert-citation-bias`: score shift +3.20 points of 1-10 (CI +2.50 to +3.90), +4.00 SD vs placebo, "
        "n = 22; secondary (reported, not decisive): Δerror +60.0 pp (CI [+40.0, +80.0], n = 22), p < 0.001 vs placebo"
    ) in card
    summary = stats["biases"][0]
    assert summary["secondary"]["measure"] == "error" and summary["score_shift"]["points"] == 3.2
    assert stats["biases"][1]["secondary"] is None  # a bias without pointwise numbers says so


def test_a_pointwise_pro_set_keeps_its_columns_through_annotation_and_is_refused_by_the_harness(
    pointwise_pro, tmp_path
):
    out, _ = pointwise_pro
    sheet = fill_sheet(out, [("keep", "keep", "")] * 5 + [("reject", "reject", "")])
    cli("export", "apply-annotations", str(out), str(sheet))
    rows = [json.loads(line) for line in (out / "data.jsonl").read_text().splitlines()]
    assert len(rows) == 5 and all(r["judge_mode"] == "pointwise" and r["scale"] == "1-10" for r in rows)
    assert json.loads((out / "stats.json").read_text())["judge_mode"] == "pointwise"
    for kind in ("lm-eval", "inspect"):
        with pytest.raises(
            ExportError, match=r"a Pro set for pointwise judges \(stats.json judge_mode: pointwise, scale 1-10\)"
        ):
            export_harness(kind, out, tmp_path / kind)  # type: ignore[arg-type]
        assert not (tmp_path / kind).exists()
    run = tmp_path / "run"
    with pytest.raises(ExportError, match=r"the run's judge is pointwise \(judge.mode: pointwise, scale 1-10\)"):
        export_harness("inspect", run, tmp_path / "from-run")
    assert not (tmp_path / "from-run").exists()


def test_judge_compare_scores_a_pointwise_pro_set_with_a_pointwise_judge_only(pointwise_pro, tmp_path):
    """`judge --compare` on a pointwise set: the same pointwise judge scores the original pairs
    and the set's (each response alone); a judge of another mode or scale is refused before
    any call, naming the field."""
    from test_export import write_pairs

    from bias_discovery.api import judge
    from bias_discovery.judging import JudgeSettings

    out, _ = pointwise_pro
    data = write_pairs(tmp_path / "original.jsonl", 6)
    engine = ScriptedEngine(pointwise_world)
    output = judge(
        "openai/judge",
        str(data),
        settings=JudgeSettings(mode="pointwise", scale="1-10"),
        compare=out,
        out=tmp_path / "judged",
        engine=engine,
    )
    report = output.compare
    assert report is not None and report.pro.mode == "pointwise" and report.pro.n_pairs == 6
    assert not any("[Response A]" in r.messages[-1].content for r in engine.sent)
    # originals: 7 against 3, all right; Pro samples: the expert citation's 8 against 7, all wrong
    assert report.rows[-1].original_error == 0.0 and report.rows[-1].pro_error == 1.0
    assert json.loads((tmp_path / "judged" / "compare.json").read_text())["pro"]["mode"] == "pointwise"
    for settings, field in (
        (JudgeSettings(), r"judge.mode is pairwise"),
        (JudgeSettings(mode="pointwise", scale="1-5"), r"judge.scale is 1-5"),
    ):
        refused = ScriptedEngine(pointwise_world)
        with pytest.raises(ExportError, match=field):
            judge("openai/judge", str(data), settings=settings, compare=out, engine=refused)
        assert refused.sent == []


@pytest.mark.model
def test_the_embedded_model_filters_a_pointwise_pro_set_by_its_scores(tmp_path, smollm2_gguf_path):
    """The new step on the embedded model: the filter (the quick start's target, with
    experiments/quickstart-pointwise.yaml's pointwise judge settings) scores the chosen and
    the perturbed rejected response of each variant alone. The rewrites and the answer check
    are scripted (test_export.world: the expert citation appended, the answers told apart), so
    every variant reaches the filter. Whatever SmolLM2 scores, each variant gets two scores
    on the scale or is counted invalid, and a kept one has the rejected response scored
    strictly higher."""
    import yaml
    from test_export import make_pairs

    from bias_discovery.config import PerturbSettings, RunConfig
    from bias_discovery.export import build_pro_set
    from bias_discovery.llm.registry import make_engine

    raw = yaml.safe_load(
        (Path(__file__).resolve().parents[1] / "experiments" / "quickstart-pointwise.yaml").read_text()
    )
    config = RunConfig.model_validate(raw)
    scripted = ScriptedEngine(world)
    filter_judge = make_engine(config.target)
    try:
        build = build_pro_set(
            make_pairs(3),
            [make_bias("Expert Citation Bias", discovered=True)],
            teacher=scripted,
            checker=scripted,
            filter_judge=filter_judge,
            variants=1,
            seed=config.seed,
            perturb_settings=PerturbSettings(),
            judge_settings=config.judge,
        )
    finally:
        filter_judge.close()
    c = build.counts
    print("real pointwise filter:", c.model_dump_json(), [v.filter_scores for v in build.variants])
    assert c.filter_judged == 3
    assert_counts_add_up(c.model_dump())
    assert build.judge_mode == "pointwise" and build.scale == "1-10"
    for v in build.variants:
        assert set(v.filter_scores) == {"chosen", "rejected"}
        assert all(s is None or (1 <= s <= 10 and s == int(s)) for s in v.filter_scores.values())
        chosen, rejected = v.filter_scores["chosen"], v.filter_scores["rejected"]
        expected = (
            "filter_invalid"
            if chosen is None or rejected is None
            else "kept"
            if rejected > chosen
            else "filter_tie"
            if rejected == chosen
            else "filter_correct"
        )
        assert v.status == expected
    assert all(row["judge_mode"] == "pointwise" and row["scale"] == "1-10" for row in build.samples)
    assert len(build.samples) == c.kept_by_filter
