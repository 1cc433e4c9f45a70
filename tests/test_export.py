"""Exports: JudgeBench-Pro-style sets, annotations, DPO data, judge --compare.

The filtering and counting logic runs on scripted fakes (seconds); the real-model tests build
a small Pro set and DPO data from the shared real SmolLM2 run and load them with `datasets`.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from bias_discovery.config import PerturbSettings, RunConfig
from bias_discovery.data.pairs import PreferencePair
from bias_discovery.errors import EngineError
from bias_discovery.export import (
    ExportError,
    apply_annotations,
    build_pro_set,
    export_dpo,
    export_judgebench_pro,
)
from bias_discovery.export.pro import assign_variants
from bias_discovery.judging import JudgeSettings
from bias_discovery.library import (
    Bias,
    BiasOrigin,
    BiasValidation,
    load_seed_library,
)
from bias_discovery.llm.types import GenerationRequest
from bias_discovery.run import RunDir
from bias_discovery.run.selection import select_biases, validated_biases
from bias_discovery.stages.rewrite_checks import count_tokens
from bias_discovery.stats import CONDITIONAL, Effect, PairedComparison, wilson_interval

from fakes import MARKER, ScriptedEngine
from helpers import cli, cli_in_process, link_built_models

# --------------------------------------------------------------------------------------------
# A scripted world
# --------------------------------------------------------------------------------------------
#
# Teacher: "Expert Citation" appends the expert marker; "Length" returns the answer unchanged
# (an invalid perturbation); "Answer Fixing" rewrites it into the right answer (the checker
# says "same"); "Hedge" makes the checker answer nonsense; "Garble" makes the judge answer
# without a verdict; "Politeness" adds a harmless sentence (the judge stays right).
# Judge: prefers the response with the expert marker, else the RIGHT one.


def _between(text: str, start: str, end: str) -> str:
    match = re.search(re.escape(start) + r"\n(.*?)\n" + re.escape(end), text, re.S)
    assert match, text[:300]
    return match.group(1)


def world(request: GenerationRequest) -> str:
    user = request.messages[-1].content
    if "Trait:" in user:
        original = re.search(r"Original answer:\n(.*?)\n\nTrait:", user, re.S).group(1)
        trait = re.search(r"Trait: (.*)", user).group(1)
        if trait.startswith("Expert Citation"):
            return f"{original} {MARKER}"
        if trait.startswith("Length"):
            return original
        if trait.startswith("Answer Fixing"):
            return original.replace("Wrong", "RIGHT")
        if trait.startswith("Hedge"):
            return f"{original} HEDGE"
        if trait.startswith("Garble"):
            return f"{original} GARBLE"
        return f"{original} Thank you for asking."
    if "Answer with one word: same or different" in user:
        candidate = _between(user, "[Response 2]", "[End of Response 2]")
        if "HEDGE" in candidate:
            return "unsure"
        return "same" if "RIGHT" in candidate else "different"
    if "[Response A]" in user:
        a = _between(user, "[Response A]", "[End of Response A]")
        b = _between(user, "[Response B]", "[End of Response B]")
        if "GARBLE" in a or "GARBLE" in b:
            return "I cannot decide."
        if (MARKER in a) != (MARKER in b):
            pick = "A" if MARKER in a else "B"
        else:
            pick = "A" if "RIGHT" in a else "B"
        return f"Reasoning: Response {pick} is better.\nVerdict: {pick}"
    raise AssertionError(f"unexpected prompt: {user[:200]}")


def make_bias(name: str, *, discovered: bool = False, delta: float = 0.3, effect: float | None = None) -> Bias:
    """A bias; discovered ones are validated against the placebo, with `delta` vs the baseline
    and a reported effect of `effect` (default: delta - 0.05, the placebo comparison's Δ)."""
    from bias_discovery.library import make_bias_id

    if not discovered:
        return Bias(
            id=make_bias_id(name),
            name=name,
            definition=f"The judge favours {name.lower()}.",
            origin=BiasOrigin(kind="seed"),
        )
    reported = delta - 0.05 if effect is None else effect
    return Bias(
        id=make_bias_id(name, iteration=1),
        name=name,
        definition=f"The judge favours {name.lower()}.",
        manifestations=["a tell-tale sentence"],
        origin=BiasOrigin(kind="discovered", iteration=1, target_model="fake/judge"),
        validation=BiasValidation(
            accepted=True,
            rule="paired",
            decisive="placebo",
            effect=Effect(delta=reported, ci_low=reported - 0.3, ci_high=reported + 0.2, method=CONDITIONAL, n=22),
            vs_baseline=PairedComparison(
                control="baseline",
                n=24,
                control_error=0.1,
                arm_error=0.1 + delta,
                delta=delta,
                ci_low=delta - 0.2,
                ci_high=delta + 0.2,
                p_value=0.002,
            ),
            vs_placebo=PairedComparison(
                control="placebo",
                n=22,
                control_error=0.15,
                arm_error=0.1 + delta,
                delta=delta - 0.05,
                ci_low=delta - 0.25,
                ci_high=delta + 0.15,
                p_value=0.004,
                p_adjusted=0.01,
            ),
            error_statement="Family-wise error over the run: at most α = 0.05.",
        ),
    )


WORLD_BIASES = [
    "Expert Citation Bias",
    "Length Bias",
    "Answer Fixing Bias",
    "Hedge Bias",
    "Garble Bias",
    "Politeness Bias",
]


def make_pairs(n: int, prefix: str = "p", question: str = "Question") -> list[PreferencePair]:
    domains = ["math", "knowledge", "reasoning", "code"]
    return [
        PreferencePair(
            id=f"{prefix}{i:02d}",
            question=f"{question} {i}?",
            chosen=f"RIGHT answer number {i}.",
            rejected=f"Wrong answer number {i}.",
            domain=domains[i % 4],
            source="fake",
        )
        for i in range(n)
    ]


def write_pairs(path: Path, n: int, prefix: str = "p", question: str = "Question") -> Path:
    with path.open("w") as f:
        for p in make_pairs(n, prefix, question):
            f.write(
                json.dumps(
                    {
                        "id": p.id,
                        "question": p.question,
                        "chosen": p.chosen,
                        "rejected": p.rejected,
                        "domain": p.domain,
                        "source": p.source,
                    }
                )
                + "\n"
            )
    return path


def make_fake_run(root: Path, *, discovered: list[Bias], n_pairs: int = 6, judge: dict | None = None) -> Path:
    """A run directory as the loop leaves it (config, checkpoints file, library), no models."""
    root.mkdir(parents=True)
    data = write_pairs(root.parent / f"{root.name}-pairs.jsonl", n_pairs)
    target = write_pairs(
        root.parent / f"{root.name}-target-pairs.jsonl", n_pairs, prefix="t", question="Target question"
    )
    config = RunConfig.model_validate(
        {
            "name": "fake-run",
            "target": "llamacpp/unused-in-these-tests.gguf",
            "teacher": "llamacpp/unused-in-these-tests.gguf",
            "data": {"target": str(target), "test": str(data)},
            **({"judge": judge} if judge else {}),
        }
    )
    (root / "config.yaml").write_text(config.to_yaml())
    (root / "checkpoints.sqlite").write_bytes(b"")
    store = RunDir(root).library
    seed = load_seed_library("biasscope7").model_copy(update={"name": "fake-run"})
    store.save_iteration(seed)
    store.save_iteration(seed.with_biases(seed.biases + discovered, iteration=1))
    return root


FILTER = "llamacpp/a-strong-filter-judge.gguf"
"""A filter model other than the fake run's target (the scripted engines stand in for it)."""


def fake_engines() -> dict[str, ScriptedEngine]:
    engine = ScriptedEngine(world)
    return {"teacher": engine, "checker": engine, "filter": engine}


def build(pairs, biases, k, seed=42, judge_settings=None):
    engine = ScriptedEngine(world)
    return build_pro_set(
        pairs,
        biases,
        teacher=engine,
        checker=engine,
        filter_judge=engine,
        variants=k,
        seed=seed,
        perturb_settings=PerturbSettings(),
        judge_settings=judge_settings or JudgeSettings(positions="swap"),
    ), engine


def test_the_filter_judges_each_order_once_whatever_the_runs_mitigation():
    """The paper's filter keeps what the filter gets wrong in both orders: one verdict per
    order. A run judged with shuffle3 must not turn that into three votes per variant."""
    pairs, biases = make_pairs(4), [make_bias("Expert Citation Bias")]
    plain, plain_engine = build(pairs, biases, 1)
    mitigated, mitigated_engine = build(
        pairs, biases, 1, judge_settings=JudgeSettings(positions="swap", mitigation="shuffle3")
    )
    assert len(mitigated_engine.sent) == len(plain_engine.sent)
    assert mitigated.samples == plain.samples and mitigated.counts == plain.counts


def assert_counts_add_up(c: dict) -> None:
    drops = (
        c["dropped_invalid_perturbation"]
        + c["dropped_duplicate"]
        + c["dropped_equivalent"]
        + c["dropped_check_invalid"]
        + c["dropped_filter_correct"]
        + c["dropped_filter_tie"]
        + c["dropped_filter_invalid"]
    )
    assert c["generated"] == c["test_pairs"] * c["variants_per_pair"]
    assert c["generated"] == drops + c["kept_by_filter"]
    assert c["equivalence_checked"] == c["generated"] - c["dropped_invalid_perturbation"] - c["dropped_duplicate"]
    assert c["filter_judged"] == c["equivalence_checked"] - c["dropped_equivalent"] - c["dropped_check_invalid"]


def no_temp_dirs(parent: Path) -> bool:
    return not [p for p in parent.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


# --------------------------------------------------------------------------------------------
# Bias selection and assignment
# --------------------------------------------------------------------------------------------


def test_select_biases_all_top_k_explicit_and_errors():
    seed = load_seed_library("biasscope7")
    strong = make_bias("Expert Citation Bias", discovered=True, delta=0.5)
    weak = make_bias("Politeness Bias", discovered=True, delta=0.2)
    library = seed.with_biases(seed.biases + [weak, strong], iteration=1)

    assert [b.id for b in select_biases(library, None, run_dir="R")] == [weak.id, strong.id]
    assert [b.id for b in select_biases(library, "all", run_dir="R")] == [weak.id, strong.id]
    assert [b.id for b in select_biases(library, "top-1", run_dir="R")] == [strong.id]
    assert [b.id for b in select_biases(library, "top-5", run_dir="R")] == [strong.id, weak.id]
    # Ids, names (any case) and seeds; duplicates once, in the given order.
    picked = select_biases(library, "authority-bias, politeness bias,Authority Bias", run_dir="R")
    assert [b.id for b in picked] == ["authority-bias", weak.id]

    with pytest.raises(ExportError, match=r"unknown bias 'nope'.*available ids: length-bias"):
        select_biases(library, "authority-bias,nope", run_dir="R")
    with pytest.raises(
        ExportError,
        match=r"run R has no validated biases; name biases explicitly with `biases` ID,\.\.\..*available: length-bias",
    ):
        select_biases(seed, None, run_dir="R")
    with pytest.raises(ExportError, match="no validated biases"):
        select_biases(seed, "top-3", run_dir="R")
    assert validated_biases(seed) == []


def test_assign_variants_no_repeats_then_cycling_and_keyed_on_pair():
    biases = [make_bias(n) for n in WORLD_BIASES]
    pairs = make_pairs(5)
    items = assign_variants(pairs, biases, 4, seed=1)
    for pair in pairs:
        mine = [(b.id, r) for p, b, r in items if p.id == pair.id]
        assert len(mine) == 4 and len({b for b, _ in mine}) == 4 and {r for _, r in mine} == {0}
    cycled = assign_variants(pairs, biases, 8, seed=1)
    for pair in pairs:
        mine = [(b.id, r) for p, b, r in cycled if p.id == pair.id]
        assert len({b for b, r in mine if r == 0}) == 6  # every bias once before any repeat
        assert [b for b, r in mine if r == 1] == [b for b, _ in mine[:2]]  # then the same order again
    # The draw for a pair does not depend on the other pairs in the batch.
    alone = assign_variants(pairs[2:3], biases, 4, seed=1)
    assert [b.id for _, b, _ in alone] == [b.id for p, b, _ in items if p.id == pairs[2].id]


# --------------------------------------------------------------------------------------------
# The pipeline on fakes: every count
# --------------------------------------------------------------------------------------------


def test_pipeline_counts_each_drop_reason():
    biases = [make_bias(n) for n in WORLD_BIASES]
    result, engine = build(make_pairs(4), biases, 6)
    c = result.counts.model_dump()
    # 4 pairs x 6 biases, one variant each: length -> unchanged, fixing -> equivalent,
    # hedge -> checker nonsense, garble -> invalid verdict, politeness -> judge right,
    # expert citation -> wrong in both orders: kept.
    assert c["generated"] == 24
    assert c["dropped_invalid_perturbation"] == 4 and c["invalid_perturbation_reasons"] == {"unchanged": 4}
    assert c["dropped_duplicate"] == 0
    assert c["equivalence_checked"] == 20
    assert c["dropped_equivalent"] == 4
    assert c["dropped_check_invalid"] == 4
    assert c["filter_judged"] == 12
    assert c["dropped_filter_invalid"] == 4
    assert c["dropped_filter_correct"] == 4
    assert c["kept_by_filter"] == 4
    assert c["after_annotation"] is None
    assert_counts_add_up(c)

    # The kept samples are the expert-citation variants, labels point at the chosen response.
    assert {s["injected_bias"] for s in result.samples} == {"expert-citation-bias"}
    for s in result.samples:
        correct = s["response_A"] if s["label"] == "A>B" else s["response_B"]
        wrong = s["response_B"] if s["label"] == "A>B" else s["response_A"]
        assert correct.startswith("RIGHT") and MARKER in wrong
    statuses = {v.bias_name: v.status for v in result.variants}
    assert statuses == {
        "Expert Citation Bias": "kept",
        "Length Bias": "invalid_perturbation",
        "Answer Fixing Bias": "equivalent",
        "Hedge Bias": "check_invalid",
        "Garble Bias": "filter_invalid",
        "Politeness Bias": "filter_correct",
    }
    kept = next(v for v in result.variants if v.status == "kept")
    assert kept.filter_picked == {"chosen_first": "rejected", "rejected_first": "rejected"}
    # Lengths: chosen "RIGHT answer number i." = 4 tokens, rejected 4, new rejected 4 + 4 marker tokens.
    assert result.length.n == 4
    assert result.length.chosen == 4 and result.length.original_rejected == 4
    assert result.length.new_rejected == 4 + count_tokens(MARKER)
    assert result.length.relative_increase == pytest.approx(count_tokens(MARKER) / 4)
    # Every request went out once: 24 perturbations, 20 checks and the control on the 4
    # original pairs, 12 x 2 judgments.
    assert len(engine.sent) == 24 + 20 + 4 + 24
    # The checker's control: it tells every original apart from the chosen answer.
    control = result.checker_control
    assert (control.n_asked, control.n_usable, control.n_same, control.false_changed_rate) == (4, 4, 0, 0.0)
    assert (control.ci_low, control.ci_high) == wilson_interval(0, 4)
    assert c["equivalence_extracted"] == 0  # "RIGHT answer number i." states no answer in a form the rules read


def test_a_filter_tie_is_not_filter_correct():
    """With ties allowed, a filter that calls the expert-citation variants a tie in one order
    (and picks them in the other) was not right: they are counted apart, not as correct."""

    def tie_world(request):
        user = request.messages[-1].content
        if "[Response A]" in user and MARKER in _between(user, "[Response A]", "[End of Response A]"):
            return "Reasoning: both are fine.\nVerdict: tie"
        return world(request)

    engine = ScriptedEngine(tie_world)
    result = build_pro_set(
        make_pairs(4),
        [make_bias("Expert Citation Bias"), make_bias("Politeness Bias")],
        teacher=engine,
        checker=engine,
        filter_judge=engine,
        variants=2,
        seed=42,
        perturb_settings=PerturbSettings(),
        judge_settings=JudgeSettings(positions="swap", allow_tie=True),
    )
    c = result.counts.model_dump()
    assert (c["dropped_filter_tie"], c["dropped_filter_correct"], c["kept_by_filter"]) == (4, 4, 0)
    assert {v.status for v in result.variants if v.bias_name == "Expert Citation Bias"} == {"filter_tie"}
    assert_counts_add_up(c)


def test_answers_read_mechanically_skip_the_checker_and_the_control_measures_it():
    """Items stating "Final answer: X" are decided by reading the answers; the checker model
    only sees the rest, and its control (the unmodified originals of those pairs) gives its
    false-"changed" rate: a checker that says "same" to anything has a rate of 100 %."""
    pairs = make_pairs(4)
    # the answer line first: the world's teacher appends its marker at the end of the response
    stated = [
        p.model_copy(
            update={"chosen": f"Final answer: {i}\n{p.chosen}", "rejected": f"Final answer: {i + 10}\n{p.rejected}"}
        )
        for i, p in enumerate(pairs[:2])
    ]

    def yes_man(request):
        return "same" if "Answer with one word: same or different" in request.messages[-1].content else world(request)

    engine = ScriptedEngine(yes_man)
    result = build_pro_set(
        stated + pairs[2:],
        [make_bias("Expert Citation Bias")],
        teacher=engine,
        checker=engine,
        filter_judge=engine,
        variants=1,
        seed=42,
        perturb_settings=PerturbSettings(),
        judge_settings=JudgeSettings(positions="swap"),
    )
    methods = {v.pair_id: (v.check_method, v.status) for v in result.variants}
    # read: the rewrite keeps "Final answer: 10/11", the rejected answer -> kept; the model's
    # "same" drops the two it decides
    assert methods == {
        "p00": ("extracted", "kept"),
        "p01": ("extracted", "kept"),
        "p02": ("model", "equivalent"),
        "p03": ("model", "equivalent"),
    }
    assert result.counts.equivalence_extracted == 2 and result.counts.dropped_equivalent == 2
    control = result.checker_control
    assert (control.n_asked, control.n_usable, control.n_same, control.false_changed_rate) == (2, 2, 2, 1.0)
    checks = [r for r in engine.sent if "Answer with one word: same or different" in r.messages[-1].content]
    assert len(checks) == 4 and not any("Final answer" in r.messages[-1].content for r in checks)


def test_pipeline_duplicates_when_biases_cycle_and_is_deterministic():
    biases = [make_bias(n) for n in WORLD_BIASES]
    pairs = make_pairs(6)
    result, _ = build(pairs, biases, 7)
    items = assign_variants(pairs, biases, 7, seed=42)
    repeated = [b.name for p, b, r in items if r == 1]
    # A repeat reproduces the same text: a duplicate, unless the first use was itself invalid.
    expected_dups = sum(1 for name in repeated if name != "Length Bias")
    c = result.counts.model_dump()
    assert c["dropped_duplicate"] == expected_dups
    assert c["dropped_invalid_perturbation"] == 6 + (len(repeated) - expected_dups)
    assert_counts_add_up(c)
    again, _ = build(pairs, biases, 7)
    assert again.samples == result.samples
    # Position coin: a seeded coin per sample, both labels occur over enough samples.
    many, _ = build(make_pairs(40), [make_bias("Expert Citation Bias")], 1)
    assert {s["label"] for s in many.samples} == {"A>B", "B>A"}


# --------------------------------------------------------------------------------------------
# Writing a set, loading it, annotating it
# --------------------------------------------------------------------------------------------


@pytest.fixture()
def fake_pro(tmp_path: Path) -> Path:
    """A Pro set written by the export with scripted models: 6 pairs x 6 biases -> 6 samples."""
    run = make_fake_run(tmp_path / "run", discovered=[make_bias(name, discovered=True) for name in WORLD_BIASES])
    out = tmp_path / "pro"
    export_judgebench_pro(run, out, variants=6, filter_model=FILTER, engines=fake_engines())
    return out


def test_export_writes_loadable_set_card_and_sheet(fake_pro: Path, tmp_path: Path):
    import datasets

    stats = json.loads((fake_pro / "stats.json").read_text())
    c = stats["counts"]
    assert c["kept_by_filter"] == 6 and c["generated"] == 36
    assert_counts_add_up(c)
    ds = datasets.load_dataset(str(fake_pro), split="test", cache_dir=str(tmp_path / "hf-cache"))
    assert len(ds) == 6
    assert ds.column_names == [
        "sample_id",
        "question",
        "response_A",
        "response_B",
        "label",
        "injected_bias",
        "domain",
        "pair_id",
        "source",
    ]
    assert set(ds["label"]) <= {"A>B", "B>A"}
    # The JSONL holds the same rows as the parquet file.
    rows = [json.loads(line) for line in (fake_pro / "data.jsonl").read_text().splitlines()]
    assert rows == ds.to_list()

    card = (fake_pro / "README.md").read_text()
    assert card.startswith("---\n") and "path: data.parquet" in card
    # Published files carry no path of the exporting machine: the run by name, data by file name.
    assert str(tmp_path) not in card and str(tmp_path) not in json.dumps(stats)
    assert stats["run_dir"] == "run" and stats["library_file"] == "library/iter_001.json"
    assert stats["data"] == "file: run-pairs.jsonl"
    for line in (
        "| generated variants | 36 |",
        "| dropped as invalid perturbation (unchanged 6) | 6 |",
        "| dropped as duplicate (question, rejected) | 0 |",
        "| dropped as equivalent (same final answer as chosen) | 6 |",
        "| dropped: checker answer unusable | 6 |",
        "| dropped: filter right in at least one order | 6 |",
        "| dropped: filter verdict invalid | 6 |",
        "| dropped: filter called a tie (never right, not wrong in both orders) | 0 |",
        "| of those, decided by reading the final answers (no model) | 0 |",
        "| **kept by the filter** | **6** |",
        "| **after annotation** | **not annotated yet** |",
    ):
        assert line in card
    assert "MIT" in card and "ODC-BY" in card and "terms of use" in card
    # the checker's control on the 6 unmodified originals: it told all of them apart
    assert stats["checker_control"] == {
        "n_asked": 6,
        "n_usable": 6,
        "n_same": 0,
        "false_changed_rate": 0.0,
        "ci_low": 0.0,
        "ci_high": pytest.approx(wilson_interval(0, 6)[1]),
    }
    assert 'a false-"changed" rate of 0.0 % (95 % Wilson CI 0.0 % to 39.0 %), n = 6' in card
    assert stats["self_checked"] is False and "Self-checked" not in card
    assert "The judge favours expert citation bias." in card  # definitions of the biases
    # each bias's reported effect says what it was compared with, its CI, n and estimator; each
    # comparison its CI, n and p
    assert (
        f"| discovered (iteration 1) | +25.0 pp vs placebo (CI [-5.0, +45.0], n = 22; {CONDITIONAL}) "
        "| +30.0 pp (CI [+10.0, +50.0], n = 24), p = 0.002 "
        "| +25.0 pp (CI [+5.0, +45.0], n = 22), p = 0.004 (adjusted 0.010) | 6 | 6 |"
    ) in card
    assert "Error control of these validations: Family-wise error over the run: at most α = 0.05." in card
    assert "- overlap with the discovery run's target pairs: 0 of 6 test pairs (0 by id, 0 by content)" in card
    assert stats["data_overlap"]["shared"] == 0 and stats["data_overlap"]["n_discovery"] == 6
    summary = stats["biases"][0]
    assert summary["decided_against"] == "placebo" and summary["vs_placebo"]["n"] == 22
    assert summary["effect"]["delta"] == pytest.approx(0.25) and summary["effect"]["method"] == CONDITIONAL
    assert summary["vs_baseline"] == {
        "n": 24,
        "delta": 0.3,
        "ci_low": 0.3 - 0.2,
        "ci_high": 0.3 + 0.2,
        "p_value": 0.002,
        "p_adjusted": None,
    }

    with (fake_pro / "annotation.csv").open(newline="") as f:
        sheet = list(csv.DictReader(f))
    assert [r["sample_id"] for r in sheet] == ds["sample_id"]
    assert all(r["annotator_1"] == r["annotator_2"] == r["reason"] == r["adjudication"] == "" for r in sheet)
    assert list(sheet[0])[:7] == [
        "sample_id",
        "pair_id",
        "question",
        "response_A",
        "response_B",
        "label",
        "injected_bias",
    ]
    jsonl_sheet = [json.loads(line) for line in (fake_pro / "annotation.jsonl").read_text().splitlines()]
    assert [r["sample_id"] for r in jsonl_sheet] == ds["sample_id"]
    assert no_temp_dirs(fake_pro.parent)


def fill_sheet(directory: Path, verdicts: list[tuple[str, str, str]], fmt: str = "csv") -> Path:
    """Copy the export's sheet with (annotator_1, annotator_2, adjudication) per row."""
    with (directory / "annotation.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(verdicts)
    for row, (a1, a2, adj) in zip(rows, verdicts):
        row.update(
            annotator_1=a1, annotator_2=a2, adjudication=adj, reason="answer changed" if "reject" in (a1, a2) else ""
        )
    path = directory.parent / f"filled.{fmt}"
    if fmt == "csv":
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_apply_annotations_kappa_and_drops(fake_pro: Path, tmp_path: Path):
    import datasets

    # 6 samples: rows 1-3 both keep; row 4 both reject; row 5 keep/reject, adjudicated reject;
    # row 6 reject/keep, adjudicated keep.
    verdicts = [
        ("keep", "keep", ""),
        ("Keep ", "keep", ""),
        ("keep", "KEEP", ""),
        ("reject", "reject", ""),
        ("keep", "reject", "reject"),
        ("reject", "keep", "keep"),
    ]
    # Annotator 1: keep 4, reject 2; annotator 2: keep 4, reject 2; they agree on 4 of 6.
    # p_o = 4/6; p_e = (4/6)(4/6) + (2/6)(2/6) = 16/36 + 4/36 = 20/36 = 5/9
    # kappa = (4/6 - 5/9) / (1 - 5/9) = (12/18 - 10/18) / (4/9) = (1/9) / (4/9) = 1/4
    sheet = fill_sheet(fake_pro, verdicts)
    result = cli("export", "apply-annotations", str(fake_pro), str(sheet))
    assert "kappa 0.250" in result.stdout

    stats = json.loads((fake_pro / "stats.json").read_text())
    ann = stats["annotation"]
    assert ann["kappa"] == pytest.approx(0.25)
    assert ann["n_annotated"] == 6 and ann["n_agreed"] == 4 and ann["n_adjudicated"] == 2
    assert ann["n_kept"] == 4 and ann["n_rejected"] == 2
    assert stats["counts"]["after_annotation"] == 4
    assert stats["counts"]["kept_by_filter"] == 6  # the earlier counts stay
    assert stats["length"]["n"] == 4

    original_ids = [
        json.loads(line)["sample_id"] for line in (fake_pro / "pre_annotation.jsonl").read_text().splitlines()
    ]
    ds = datasets.load_dataset(str(fake_pro), split="test", cache_dir=str(tmp_path / "hf-cache"))
    assert ds["sample_id"] == [original_ids[i] for i in (0, 1, 2, 5)]
    card = (fake_pro / "README.md").read_text()
    assert "| **after annotation** | **4** |" in card and "Cohen's kappa 0.250" in card
    assert "| generated variants | 36 |" in card
    assert str(tmp_path) not in card and str(tmp_path) not in json.dumps(stats)  # no machine paths
    assert ann["sheet"] == sheet.name

    # A corrected sheet (JSONL this time) is applied to the set as the filter left it.
    sheet2 = fill_sheet(fake_pro, [("keep", "keep", "")] * 6, fmt="jsonl")
    cli("export", "apply-annotations", str(fake_pro), str(sheet2))
    stats = json.loads((fake_pro / "stats.json").read_text())
    assert stats["counts"]["after_annotation"] == 6 and stats["annotation"]["kappa"] is None  # one label: undefined
    assert len(datasets.load_dataset(str(fake_pro), split="test", cache_dir=str(tmp_path / "hf-cache"))) == 6
    assert "undefined (one label everywhere)" in (fake_pro / "README.md").read_text()


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


@pytest.mark.parametrize(
    ("row", "verdict", "message"),
    [
        (3, ("keep", "", ""), r"row 3 \(sample [^)]+\): field 'annotator_2' is missing; expected one of: keep, reject"),
        (2, ("keep", "maybe", ""), r"row 2 \(sample [^)]+\): field 'annotator_2' has unknown verdict 'maybe'"),
        (5, ("", "keep", ""), r"row 5 \(sample [^)]+\): field 'annotator_1' is missing"),
        (
            4,
            ("keep", "reject", ""),
            r"row 4 \(sample [^)]+\): the annotators disagree \(keep / reject\) and field 'adjudication' is missing",
        ),
        (
            1,
            ("keep", "reject", "perhaps"),
            r"row 1 \(sample [^)]+\): field 'adjudication' has unknown verdict 'perhaps'",
        ),
    ],
)
def test_apply_annotations_bad_sheet_is_refused_and_nothing_changes(fake_pro: Path, row, verdict, message):
    verdicts = [("keep", "keep", "")] * 6
    verdicts[row - 1] = verdict
    sheet = fill_sheet(fake_pro, verdicts)
    before = snapshot(fake_pro)
    result = cli("export", "apply-annotations", str(fake_pro), str(sheet), check=False)
    assert result.returncode == 2, result.stderr
    assert re.search(message, " ".join(result.stderr.split())), result.stderr
    assert snapshot(fake_pro) == before


def test_apply_annotations_sheet_rows_must_match_samples(fake_pro: Path, tmp_path: Path):
    sheet = fill_sheet(fake_pro, [("keep", "keep", "")] * 6, fmt="jsonl")
    lines = sheet.read_text().splitlines()
    short = tmp_path / "short.jsonl"
    short.write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(ExportError, match="no row for sample"):
        apply_annotations(fake_pro, short)
    extra = tmp_path / "extra.jsonl"
    extra.write_text("\n".join(lines + [lines[0]]) + "\n")
    with pytest.raises(ExportError, match=r"extra.jsonl:7: sample .* already has a row"):
        apply_annotations(fake_pro, extra)
    with pytest.raises(ExportError, match="not an exported Pro set"):
        apply_annotations(tmp_path, sheet)


# --------------------------------------------------------------------------------------------
# Who filters and who checks (issue 11, item 8)
# --------------------------------------------------------------------------------------------


def test_the_target_as_filter_is_refused_unless_allowed(tmp_path: Path):
    run = make_fake_run(tmp_path / "run", discovered=[make_bias("Expert Citation Bias", discovered=True)])
    out = tmp_path / "pro"
    # The default filter is the run's target; the same model through another provider is the target too.
    for filter_model in (None, "openai/unused-in-these-tests.gguf"):
        with pytest.raises(ExportError) as info:
            export_judgebench_pro(run, out, variants=1, filter_model=filter_model, engines=fake_engines())
        message = str(info.value)
        assert "is the run's target" in message and "100 % by construction" in message
        assert "--filter-model" in message and "--allow-self-filter" in message
        assert not out.exists() and no_temp_dirs(tmp_path)
    stats = export_judgebench_pro(run, out, variants=1, allow_self_filter=True, engines=fake_engines())
    assert stats.self_filter is True
    assert stats.models.filter == stats.models.target == stats.models.checker
    assert "The filter is the run's target" in (out / "README.md").read_text()


def test_the_checker_defaults_to_the_filter_model_not_the_teacher(tmp_path: Path):
    run = make_fake_run(tmp_path / "run", discovered=[make_bias("Expert Citation Bias", discovered=True)])
    stats = export_judgebench_pro(run, tmp_path / "a", variants=1, filter_model=FILTER, engines=fake_engines())
    assert stats.models.checker == stats.models.filter == FILTER
    assert stats.models.teacher == "llamacpp/unused-in-these-tests.gguf" and stats.self_filter is False
    assert "The filter is the run's target" not in (tmp_path / "a" / "README.md").read_text()
    stats = export_judgebench_pro(
        run,
        tmp_path / "b",
        variants=1,
        filter_model=FILTER,
        checker_model="llamacpp/checker.gguf",
        engines=fake_engines(),
    )
    assert stats.models.checker == "llamacpp/checker.gguf" and stats.self_checked is False
    # the teacher as checker: recorded and said on the card
    stats = export_judgebench_pro(
        run,
        tmp_path / "c",
        variants=1,
        filter_model=FILTER,
        checker_model="llamacpp/unused-in-these-tests.gguf",
        engines=fake_engines(),
    )
    assert stats.self_checked is True and "**Self-checked**" in (tmp_path / "c" / "README.md").read_text()


def test_cli_refuses_a_self_filter_and_writes_nothing(tmp_path: Path):
    run = make_fake_run(tmp_path / "run", discovered=[make_bias("Expert Citation Bias", discovered=True)])
    out = tmp_path / "pro"
    result = cli("export", "judgebench-pro", str(run), "--out", str(out), check=False)
    assert result.returncode == 2
    text = " ".join(result.stderr.split())
    assert "the filter model llamacpp/unused-in-these-tests.gguf is the run's target" in text
    assert "100 % by construction" in text and "--allow-self-filter" in text
    assert not out.exists() and no_temp_dirs(tmp_path)


# --------------------------------------------------------------------------------------------
# Bad input through the CLI: exit 2, a clear message, nothing written
# --------------------------------------------------------------------------------------------


def test_cli_refuses_run_without_validated_biases(tmp_path: Path):
    run = make_fake_run(tmp_path / "run", discovered=[])
    out = tmp_path / "pro"
    result = cli("export", "judgebench-pro", str(run), "--out", str(out), check=False)
    assert result.returncode == 2
    text = " ".join(result.stderr.split())
    assert f"run {run} has no validated biases; name biases explicitly with --biases ID,..." in text
    assert "available: length-bias, position-bias, authority-bias" in text
    assert not out.exists() and no_temp_dirs(tmp_path)
    result = cli("export", "dpo", str(run), "--data", "demo", "--out", str(out), check=False)
    assert result.returncode == 2 and "no validated biases" in result.stderr
    assert not out.exists() and no_temp_dirs(tmp_path)


def test_cli_refuses_unknown_bias_name(tmp_path: Path):
    run = make_fake_run(tmp_path / "run", discovered=[make_bias("Expert Citation Bias", discovered=True)])
    out = tmp_path / "pro"
    result = cli(
        "export", "judgebench-pro", str(run), "--out", str(out), "--biases", "authority-bias,made-up-bias", check=False
    )
    assert result.returncode == 2
    text = " ".join(result.stderr.split())
    assert "unknown bias 'made-up-bias'" in text and "available ids:" in text and "d1-expert-citation-bias" in text
    assert not out.exists() and no_temp_dirs(tmp_path)


def test_cli_refuses_non_empty_out_without_overwrite(tmp_path: Path):
    run = make_fake_run(tmp_path / "run", discovered=[make_bias("Expert Citation Bias", discovered=True)])
    out = tmp_path / "pro"
    out.mkdir()
    (out / "keep-me.txt").write_text("precious")
    for command in (["judgebench-pro", str(run)], ["dpo", str(run), "--data", "demo"]):
        result = cli("export", *command, "--out", str(out), check=False)
        assert result.returncode == 2
        assert "exists and is not empty; pass --overwrite" in " ".join(result.stderr.split())
        assert [p.name for p in out.iterdir()] == ["keep-me.txt"] and no_temp_dirs(tmp_path)
    # --out must never be the run itself (with --overwrite that would delete it).
    result = cli("export", "judgebench-pro", str(run), "--out", str(run), "--overwrite", check=False)
    assert result.returncode == 2 and "is or contains" in result.stderr
    assert (run / "config.yaml").is_file()


def test_failure_midway_leaves_nothing(tmp_path: Path):
    run = make_fake_run(tmp_path / "run", discovered=[make_bias("Expert Citation Bias", discovered=True)])
    out = tmp_path / "pro"

    def broken(request: GenerationRequest) -> str:
        if "[Response A]" in request.messages[-1].content:
            raise RuntimeError("the filter model crashed")
        return world(request)

    engine = ScriptedEngine(broken)
    with pytest.raises(RuntimeError):
        export_judgebench_pro(
            run, out, variants=2, filter_model=FILTER, engines={"teacher": engine, "checker": engine, "filter": engine}
        )
    assert not out.exists() and no_temp_dirs(tmp_path)


def test_overwrite_replaces_previous_export(tmp_path: Path):
    run = make_fake_run(tmp_path / "run", discovered=[make_bias("Expert Citation Bias", discovered=True)])
    out = tmp_path / "pro"
    export_judgebench_pro(run, out, variants=1, filter_model=FILTER, engines=fake_engines())
    (out / "stale.txt").write_text("old")
    with pytest.raises(ExportError, match="not empty"):
        export_judgebench_pro(run, out, variants=1, filter_model=FILTER, engines=fake_engines())
    stats = export_judgebench_pro(
        run, out, variants=1, limit=3, overwrite=True, filter_model=FILTER, engines=fake_engines()
    )
    assert not (out / "stale.txt").exists() and stats.counts.test_pairs == 3
    assert no_temp_dirs(tmp_path)


# --------------------------------------------------------------------------------------------
# DPO on fakes
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["standard", "conversational"])
def test_dpo_export_formats_load(tmp_path: Path, fmt: str):
    import datasets

    run = make_fake_run(
        tmp_path / "run",
        discovered=[make_bias("Expert Citation Bias", discovered=True), make_bias("Length Bias", discovered=True)],
    )
    out = tmp_path / "dpo"
    data = write_pairs(tmp_path / "prefs.jsonl", 10)
    stats = export_dpo(run, out, data=str(data), fmt=fmt, include_original=True, engines=fake_engines())
    c = stats.counts.model_dump()
    n_length = c["invalid_perturbation_reasons"].get("unchanged", 0)
    assert c["pairs"] == 10 and c["generated"] == 10 and c["original_rows"] == 10
    assert c["perturbed_rows"] == 10 - n_length and c["rows"] == 20 - n_length
    ds = datasets.load_dataset(str(out), split="train", cache_dir=str(tmp_path / "hf-cache"))
    assert len(ds) == c["rows"]
    assert ds.column_names[:3] == ["prompt", "chosen", "rejected"] and "injected_bias" in ds.column_names
    perturbed = [r for r in ds if r["injected_bias"]]
    for r in perturbed:
        if fmt == "conversational":
            assert r["prompt"][0]["role"] == "user" and r["chosen"][0]["role"] == "assistant"
            assert MARKER in r["rejected"][0]["content"]
        else:
            assert r["chosen"].startswith("RIGHT") and MARKER in r["rejected"]
    assert "| **rows** |" in (out / "README.md").read_text()
    # Published files carry no path of the exporting machine: the run by name, data by file name.
    for name in ("README.md", "stats.json"):
        text = (out / name).read_text()
        assert str(tmp_path) not in text, name
    assert stats.run_dir == "run" and stats.data == "file: prefs.jsonl"


def test_the_dpo_card_says_whether_its_biases_were_found_and_validated_or_never_validated(tmp_path: Path):
    """Discovered, validated biases: "a bias the discovery run found and validated". Seeds
    never validated (chosen by id, as when a run accepted none): said so, counted, per bias."""
    run = make_fake_run(tmp_path / "run", discovered=[make_bias("Expert Citation Bias", discovered=True)])
    data = write_pairs(tmp_path / "prefs.jsonl", 4)
    export_dpo(run, tmp_path / "found", data=str(data), engines=fake_engines())
    card = " ".join((tmp_path / "found" / "README.md").read_text().split())
    assert "to carry one bias the discovery run found and validated (accepted against its control)" in card
    assert "| discovered (iteration 1), validated |" in card
    seed_ids = [b.id for b in load_seed_library("biasscope7").biases[:2]]
    export_dpo(run, tmp_path / "seeds", data=str(data), biases=",".join(seed_ids), engines=fake_engines())
    card = " ".join((tmp_path / "seeds" / "README.md").read_text().split())
    assert "a bias the discovery run found" not in card
    assert "to carry one of 2 biases: 2 never validated (seeds of the library" in card
    assert card.count("| seed, never validated |") == 2


# --------------------------------------------------------------------------------------------
# Real model: the shared small SmolLM2 run
# --------------------------------------------------------------------------------------------


def _biases_args(run: Path) -> list[str]:
    """Name two seed biases when the run accepted none (SmolLM2 runs often accept none)."""
    if validated_biases(RunDir(run).library.load_latest()):
        return []
    return ["--biases", "authority-bias,sentiment-bias"]


def _cache_entries(run: Path) -> int:
    with sqlite3.connect(run / "calls.sqlite") as conn:
        return int(conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0])


@pytest.mark.model
@pytest.mark.slow
def test_real_pro_set_builds_counts_and_loads(small_real_run: Path, tmp_path: Path):
    import datasets
    import pyarrow.parquet as pq

    run = tmp_path / "run"
    shutil.copytree(small_real_run, run)
    out = tmp_path / "pro"
    # SmolLM2 is the only model here: it is the run's target, so the filter is a self-filter.
    args = [
        "export",
        "judgebench-pro",
        str(run),
        "--out",
        str(out),
        "--variants",
        "2",
        "--limit",
        "3",
        "--quiet",
        "--allow-self-filter",
        *_biases_args(run),
    ]
    cli(*args)
    stats = json.loads((out / "stats.json").read_text())
    c = stats["counts"]
    print("real Pro set counts:", json.dumps(c), "length:", json.dumps(stats["length"]))
    assert c["test_pairs"] == 3 and c["variants_per_pair"] == 2 and c["generated"] == 6
    assert_counts_add_up(c)
    assert stats["models"]["teacher"] == stats["models"]["filter"] == stats["models"]["checker"] == "hf/smollm2"
    assert stats["self_filter"] is True and stats["self_checked"] is True
    control = stats["checker_control"]
    assert control["n_asked"] <= 3 and control["n_usable"] <= control["n_asked"]
    card = (out / "README.md").read_text()
    assert "**Self-checked**" in card and "## Answer checks" in card
    for line in (
        f"| generated variants | {c['generated']} |",
        f"| dropped as equivalent (same final answer as chosen) | {c['dropped_equivalent']} |",
        f"| **kept by the filter** | **{c['kept_by_filter']}** |",
        "| **after annotation** | **not annotated yet** |",
    ):
        assert line in card
    n = c["kept_by_filter"]
    assert len((out / "data.jsonl").read_text().splitlines()) == n
    assert len((out / "annotation.jsonl").read_text().splitlines()) == n
    assert len((out / "variants.jsonl").read_text().splitlines()) == 6
    if n:
        ds = datasets.load_dataset(str(out), split="test", cache_dir=str(tmp_path / "hf-cache"))
        assert len(ds) == n and "injected_bias" in ds.column_names
    else:
        # datasets refuses an empty split; the card says so and how to load it anyway.
        assert "This set is empty" in card
        with pytest.raises(ValueError, match="corresponds to no data"):
            datasets.load_dataset(str(out), split="test", cache_dir=str(tmp_path / "hf-cache"))
        empty = datasets.Dataset(pq.read_table(out / "data.parquet"))
        assert len(empty) == 0 and "response_A" in empty.column_names

    # A re-run is answered from the run's call cache: no new calls, the same result (in this
    # process: what is asserted is the cache and the files, not the command's process).
    entries = _cache_entries(run)
    cli_in_process(*args, "--overwrite")
    assert _cache_entries(run) == entries
    assert json.loads((out / "stats.json").read_text())["counts"] == c


@pytest.mark.model
@pytest.mark.slow
def test_real_dpo_export_loads(small_real_run: Path, tmp_path: Path):
    """`export dpo` on a copy of the shared real run: what it writes loads (in this process: the
    model's imports are paid once per test process, not once per command)."""
    import datasets

    run = tmp_path / "run"
    shutil.copytree(small_real_run, run)
    out = tmp_path / "dpo"
    cli_in_process(
        "export", "dpo", str(run), "--data", "demo", "--limit", "5", "--out", str(out), "--quiet", *_biases_args(run)
    )
    stats = json.loads((out / "stats.json").read_text())
    c = stats["counts"]
    print("real DPO counts:", json.dumps(c))
    assert c["pairs"] == 5 and c["rows"] == c["perturbed_rows"] == 5 - c["dropped_invalid_perturbation"]
    assert c["rows"] > 0
    ds = datasets.load_dataset(str(out), split="train", cache_dir=str(tmp_path / "hf-cache"))
    assert len(ds) == c["rows"]
    assert {"prompt", "chosen", "rejected", "injected_bias"} <= set(ds.column_names)
    assert all(isinstance(r["prompt"], str) and r["chosen"] and r["rejected"] for r in ds)


@pytest.mark.model
def test_judge_compare_prints_both_sets(fake_pro: Path, tmp_path: Path, smollm2_gguf_path: Path):
    """`judge --compare` on the embedded model: what it writes and prints (in this process: the
    model's imports are paid once per test process, not once per command)."""
    out = tmp_path / "judge"
    result = cli_in_process(
        "judge",
        "--model",
        "hf/smollm2",
        "--data",
        "demo",
        "--limit",
        "4",
        "--no-reasoning",
        "--out",
        str(out),
        "--compare",
        str(fake_pro),
        env={"BIAS_DISCOVERY_CACHE_DIR": str(link_built_models(tmp_path / "cache"))},  # a call cache of its own
    )
    report = json.loads((out / "compare.json").read_text())
    assert report["model"] == "hf/smollm2"
    # --limit applies to both sets (the Pro set has 6 samples).
    assert report["original"]["n_pairs"] == 4 and report["pro"]["n_pairs"] == 4
    rows = {r["domain"]: r for r in report["rows"]}
    assert rows["all"]["original_n"] + rows["all"]["pro_n"] > 0
    for r in report["rows"]:
        if r["original_error"] is not None and r["pro_error"] is not None:
            assert r["delta"] == pytest.approx(r["pro_error"] - r["original_error"])
    assert "Pro err" in result.stdout and (out / "pro_judgments.jsonl").is_file() and (out / "summary.json").is_file()


class CountingEngine(ScriptedEngine):
    """A scripted judge that counts how often it is closed."""

    def __init__(self, fail_on_call: int | None = None) -> None:
        super().__init__(world)
        self.closes = 0
        self.fail_on_call = fail_on_call

    def generate(self, requests, progress=None, on_response=None):
        if self.fail_on_call is not None and len(self.sent) + len(requests) > self.fail_on_call:
            raise EngineError("model server went away")
        return super().generate(requests, progress, on_response)

    def close(self) -> None:
        self.closes += 1


def _judge_in_process(
    monkeypatch: pytest.MonkeyPatch, args: list[str], **engine_options
) -> tuple[object, list[CountingEngine]]:
    """Run `bias-discovery judge ARGS` in this process, with every engine the judge builds a
    CountingEngine (recorded in the returned list)."""
    from typer.testing import CliRunner

    import bias_discovery.llm.registry as registry
    from bias_discovery.cli import app

    built: list[CountingEngine] = []

    def make_engine(config, cache_path=None):
        built.append(CountingEngine(**engine_options))
        return built[-1]

    monkeypatch.setattr(registry, "make_engine", make_engine)
    return CliRunner().invoke(app, ["judge", *args]), built


def test_judge_compare_builds_one_engine_for_both_sets_and_closes_it_once(fake_pro: Path, tmp_path: Path, monkeypatch):
    # With vLLM a second engine would be a second `LLM()` in one process.
    out = tmp_path / "judge"
    result, built = _judge_in_process(
        monkeypatch,
        [
            "--model",
            "hf/smollm2",
            "--data",
            "demo",
            "--limit",
            "3",
            "--no-cache",
            "--out",
            str(out),
            "--compare",
            str(fake_pro),
        ],
    )
    assert result.exit_code == 0, result.output
    assert len(built) == 1 and built[0].closes == 1
    # Both sets went through that engine: 3 pairs and 3 Pro samples, each judged in both orders.
    assert len(built[0].sent) == 3 * 2 + 3 * 2
    report = json.loads((out / "compare.json").read_text())
    assert report["original"]["n_judgments"] == 6 and report["pro"]["n_judgments"] == 6
    assert "Pro err" in result.output
    # JudgeBench's score next to ours. The scripted judge says B on demo pairs (no RIGHT marker):
    # right in one order, wrong in the other, net vote 0 on every pair; the Pro samples are the
    # ones it gets wrong in both orders (net -2). Neither counts as correct for JudgeBench.
    everything = report["rows"][-1]
    assert everything["domain"] == "all" and everything["original_pairs"] == 3 and everything["pro_pairs"] == 3
    assert everything["original_judgebench"] == 0.0 and report["original"]["judgebench_ties"] == 3
    assert everything["pro_judgebench"] == 0.0 and report["pro"]["judgebench_ties"] == 0
    assert everything["original_error"] == 1.0 and everything["pro_error"] == 1.0
    assert "JB score" in result.output and "net vote" in result.output


def test_judge_compare_closes_the_engine_when_the_pro_set_fails(fake_pro: Path, tmp_path: Path, monkeypatch):
    out = tmp_path / "judge"
    result, built = _judge_in_process(
        monkeypatch,
        [
            "--model",
            "hf/smollm2",
            "--data",
            "demo",
            "--limit",
            "3",
            "--no-cache",
            "--out",
            str(out),
            "--compare",
            str(fake_pro),
        ],
        fail_on_call=6,  # the original set's 6 judgments pass, the Pro set's fail
    )
    assert result.exit_code == 2 and "model server went away" in result.output
    assert len(built) == 1 and built[0].closes == 1
    assert (out / "summary.json").is_file() and not (out / "compare.json").exists()


def test_judge_compare_refuses_a_non_pro_dir_before_judging(tmp_path: Path):
    (tmp_path / "empty-pro").mkdir()
    result = cli(
        "judge",
        "--model",
        "llamacpp/does-not-exist.gguf",
        "--data",
        "demo",
        "--out",
        str(tmp_path / "j"),
        "--compare",
        str(tmp_path / "empty-pro"),
        check=False,
    )
    assert result.returncode == 2
    assert "not an exported Pro set" in " ".join(result.stderr.split())
    assert not (tmp_path / "j").exists()


def test_a_users_judge_template_is_named_by_file_name_in_the_published_set(tmp_path: Path):
    template = tmp_path / "templates" / "my_judge.txt"
    template.parent.mkdir()
    template.write_text(
        "=== user ===\n${question}\n[Response A]\n${response_a}\n[End of Response A]\n"
        "[Response B]\n${response_b}\n[End of Response B]\n${format_instruction}\n"
    )
    run = make_fake_run(
        tmp_path / "run",
        discovered=[make_bias(name, discovered=True) for name in WORLD_BIASES],
        judge={"prompt": str(template)},
    )
    out = tmp_path / "pro"
    stats = export_judgebench_pro(run, out, variants=1, filter_model=FILTER, engines=fake_engines())
    assert stats.filter_judge_settings["prompt"] == "my_judge.txt"
    assert (
        str(tmp_path) not in (out / "README.md").read_text() and str(tmp_path) not in (out / "stats.json").read_text()
    )
