"""`correct` with trait flags from the checker model: for each validated bias of a library that
no flag column gives, a constrained yes/no call per response, cached and counted, within
`checker_max_calls`; the flags feed ppi++_covariates, the gap regression and the bound.
Fast: a scripted checker through a real call cache, in process."""

from __future__ import annotations

import csv
import json
import random
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bias_discovery.api import BudgetReached, correct
from bias_discovery.auditing.correction_flags import parse_trait
from bias_discovery.cli import app
from bias_discovery.errors import DataError
from bias_discovery.library import Bias, BiasLibrary, BiasOrigin, BiasValidation, ScoreShift, save_library
from bias_discovery.llm.cache import CachedEngine
from bias_discovery.llm.types import GenerationRequest

from fakes import ScriptedEngine

MARK = "As experts agree,"
ESSAYS = dict(mode="pointwise", scale="1-6", columns="id=id,score=score,label=label,text=text")
"""How `correct` reads the essays `_essays` writes."""


def _bias(bias_id: str, accepted: bool, definition: str, shows: str) -> Bias:
    validation = BiasValidation(
        n=40, baseline_error=0.2, perturbed_error=0.5, delta=0.3, accepted=accepted, rule="paired"
    )
    # validated on a pointwise judge of the essays' scale: the shift a mean score's bound takes
    validation.score_shift = ScoreShift(control="placebo", scale="1-6", n=40, points=0.8, ci_low=0.5, ci_high=1.1)
    return Bias(
        id=bias_id,
        name=bias_id.removeprefix("d1-").title(),
        definition=definition,
        manifestations=[shows],
        origin=BiasOrigin(kind="discovered", iteration=1),
        validation=validation,
    )


def _library(path: Path) -> Path:
    biases = [
        _bias("d1-authority", True, "The judge favours responses that appeal to authority.", "cites unnamed experts"),
        _bias("d1-emoji", True, "The judge favours responses with emoji.", "ends with a smiley"),
        _bias("d1-rejected", False, "The judge favours long words.", "uses long words"),
    ]
    return save_library(BiasLibrary(name="lib", biases=biases), path)


def _checker(request: GenerationRequest) -> str:
    """Yes when the response shows the authority trait (the emoji trait never shows)."""
    user = request.messages[-1].content
    response = re.search(r"\[Response\]\n(.*?)\n\[End of Response\]", user, re.S)
    assert response is not None
    return "yes" if "unnamed experts" in user and MARK in response.group(1) else "no"


def _essays(path: Path, n: int = 60) -> None:
    """Scores on 1-6; essays carrying MARK are scored one point too high by the judge."""
    rng = random.Random(3)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "score", "label", "text"])
        for i in range(n):
            y = rng.randint(1, 5)
            marked = i % 3 == 0
            score = min(6, y + int(marked) + rng.choice([0, 0, 1, -1]))
            label = y if i % 2 == 0 else ""
            w.writerow([f"e{i}", max(1, score), label, f"{MARK if marked else 'Plainly,'} essay {i} says {y}."])


def _engine(tmp_path: Path) -> tuple[ScriptedEngine, CachedEngine]:
    fake = ScriptedEngine(_checker, engine_id="fake/checker")
    return fake, CachedEngine(fake, tmp_path / "calls.sqlite")


def test_checker_flags_feed_the_covariates_the_gap_and_the_bound_and_are_cached(tmp_path: Path) -> None:
    table, library = tmp_path / "essays.csv", _library(tmp_path / "lib.json")
    _essays(table)
    fake, cached = _engine(tmp_path)
    options = dict(
        **ESSAYS,
        bias_library=library,
        checker_model="hf/smollm2",
    )
    warnings: list[str] = []
    report = correct(table, engines={"checker": cached}, on_warning=warnings.append, **options).report
    # one constrained yes/no call per essay and validated bias (the rejected one is not asked about)
    assert len(fake.sent) == 60 * 2
    assert {r.constraint.choices for r in fake.sent if r.constraint} == {("yes", "no")}
    assert all(r.max_tokens <= 4 for r in fake.sent)
    assert "appeal to authority" in fake.sent[0].messages[-1].content
    records = {f.bias: f for f in report.trait_flags}
    assert set(records) == {"d1-authority", "d1-emoji"}
    authority, emoji = records["d1-authority"], records["d1-emoji"]
    assert (authority.n_responses, authority.n_carrying, authority.n_invalid, authority.used) == (60, 20, 0, True)
    assert (emoji.n_carrying, emoji.used) == (0, False) and "constant" in emoji.note
    assert any("d1-emoji" in w and "constant" in w for w in warnings)
    # the usable flag is a covariate and a regressor of the gap; the judge's one-point excess shows
    assert report.flags == ["d1-authority"] and report.covariates == ["d1-authority"]
    assert [e.method for e in report.estimates][-1] == "ppi++_covariates"
    gap = {g.name: g for g in report.gap}
    assert gap["d1-authority"].ci_low > 0.3 and gap["d1-authority"].n == 30
    # the bound: each validated bias's score shift (points on this scale) times the share flagged
    bound = {b.bias: b for b in report.bias_bound}
    assert bound["d1-authority"].share == pytest.approx(20 / 60) and bound["d1-emoji"].n_flagged == 0
    assert bound["d1-authority"].bound == pytest.approx(0.8 * 20 / 60)
    assert report.checker_calls is not None
    assert (report.checker_calls.requests, report.checker_calls.cached, report.checker_calls.paid.calls) == (
        120,
        0,
        120,
    )
    # a second run asks nothing: every reply comes from the call cache
    again = correct(table, engines={"checker": cached}, on_warning=warnings.append, **options).report
    assert len(fake.sent) == 120
    assert again.checker_calls is not None and (again.checker_calls.cached, again.checker_calls.paid.calls) == (120, 0)
    assert again.gap == report.gap


def test_a_flag_column_wins_over_the_checker(tmp_path: Path) -> None:
    table, library = tmp_path / "essays.csv", _library(tmp_path / "lib.json")
    _essays(table)
    with table.open() as f:
        rows = list(csv.reader(f))
    with table.open("w", newline="") as f:
        csv.writer(f).writerows([[*r, "d1-emoji" if k == 0 else (k // 2) % 2] for k, r in enumerate(rows)])
    fake, cached = _engine(tmp_path)
    report = correct(
        table,
        **ESSAYS,
        flags=["d1-emoji"],
        bias_library=library,
        checker_model="hf/smollm2",
        engines={"checker": cached},
    ).report
    assert [f.bias for f in report.trait_flags] == ["d1-authority"] and len(fake.sent) == 60
    assert report.flags == ["d1-emoji", "d1-authority"]


def _pair_log(path: Path, n: int = 40) -> None:
    """Pairs with both responses' texts; the judge picks the response carrying MARK."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["pair_id", "verdict", "a", "b", "human"])
        for i in range(n):
            a_marked, b_marked = i % 4 == 0, i % 4 == 1
            text_a = f"{MARK if a_marked else ''} answer a{i}".strip()
            text_b = f"{MARK if b_marked else ''} answer b{i}".strip()
            verdict = "A" if a_marked or (not b_marked and i % 2 == 0) else "B"
            w.writerow([f"p{i}", verdict, text_a, text_b, ("A" if i % 3 else "B") if i % 2 == 0 else ""])


def test_pairwise_flags_are_a_minus_b_and_the_bound_takes_their_mean(tmp_path: Path) -> None:
    log, library = tmp_path / "log.csv", _library(tmp_path / "lib.json")
    _pair_log(log)
    fake, cached = _engine(tmp_path)
    report = correct(
        log,
        columns="pair_id=pair_id,verdict=verdict,response_a=a,response_b=b",
        label_column="human",
        bias_library=library,
        checker_model="hf/smollm2",
        engines={"checker": cached},
        on_warning=lambda message: None,
    ).report
    assert len(fake.sent) == 40 * 2 * 2  # two responses per pair, two biases
    authority = next(f for f in report.trait_flags if f.bias == "d1-authority")
    assert (authority.n_responses, authority.n_carrying) == (80, 20)
    bound = next(b for b in report.bias_bound if b.bias == "d1-authority")
    assert bound.share == pytest.approx(0.0) and bound.n_flagged == 20  # 10 pairs A only, 10 B only
    assert bound.share_ci[0] < 0 < bound.share_ci[1]
    assert "d1-authority" in report.flags


def test_the_checker_stops_at_its_budget_and_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table, library = tmp_path / "essays.csv", _library(tmp_path / "lib.json")
    _essays(table, n=10)
    fake, cached = _engine(tmp_path)
    options = dict(
        **ESSAYS,
        bias_library=library,
        checker_model="hf/smollm2",
        out=tmp_path / "out",
    )
    with pytest.raises(BudgetReached, match="max calls = 5"):
        correct(table, engines={"checker": cached}, checker_max_calls=5, **options)
    assert not (tmp_path / "out").exists() and len(fake.sent) == 5
    # the command line: exit 4 at the budget; with room, the flags are printed (cached calls are free)
    from bias_discovery.llm import registry

    monkeypatch.setattr(registry, "make_engine", lambda config, cache_path=None: _engine(tmp_path)[1])
    args = ["correct", str(table), "--mode", "pointwise", "--scale", "1-6", "--columns", options["columns"]]
    args += ["--bias-library", str(library), "--checker-model", "hf/smollm2", "--quiet"]
    stopped = CliRunner().invoke(app, [*args, "--checker-max-calls", "9"])
    assert stopped.exit_code == 4, stopped.output
    assert "nothing written" in stopped.output
    done = CliRunner().invoke(app, [*args, "--checker-max-calls", "10", "--out", str(tmp_path / "out")])
    assert done.exit_code == 0, done.output
    # 5 + 9 replies are in the cache now: 6 calls are paid
    assert "flag d1-authority" in done.output and "20 requests, 14 from the call cache" in " ".join(done.output.split())
    record = json.loads((tmp_path / "out" / "correct.json").read_text())
    assert record["checker_calls"]["paid"]["calls"] == 6 and len(record["trait_flags"]) == 2
    page = (tmp_path / "out" / "correct.html").read_text()
    assert "Trait flags from the checker model" in page and "14 answered by the call cache" in page


def test_bad_checker_input_is_named(tmp_path: Path) -> None:
    table, library = tmp_path / "essays.csv", _library(tmp_path / "lib.json")
    _essays(table, n=10)
    with pytest.raises(DataError, match="`checker_model` flags the validated biases of `bias_library`"):
        correct(table, mode="pointwise", scale="1-6", checker_model="hf/smollm2")
    _, cached = _engine(tmp_path)
    with pytest.raises(DataError, match="item 'e0' has no response text for the checker"):
        correct(
            table,
            mode="pointwise",
            scale="1-6",
            columns="id=id,score=score,label=label",
            bias_library=library,
            checker_model="hf/smollm2",
            engines={"checker": cached},
        )


@pytest.mark.parametrize(
    ("text", "finish", "expected"),
    [("yes", "stop", True), (" No.", "stop", False), ("maybe", "stop", None), ("yes", "length", None)],
)
def test_parse_trait(text: str, finish: str, expected: bool | None) -> None:
    assert parse_trait(text, finish) is expected


def test_the_runs_report_shows_its_corrections_as_a_section(tmp_path: Path) -> None:
    from bias_discovery.api import report
    from bias_discovery.library import save_library as save

    run = tmp_path / "run"
    (run / "library").mkdir(parents=True)
    (run / "config.yaml").write_text("name: r\n")
    save(BiasLibrary.model_validate_json(_library(tmp_path / "lib.json").read_text()), run / "library" / "latest.json")
    table = tmp_path / "essays.csv"
    _essays(table)
    _, cached = _engine(tmp_path)
    correct(
        table,
        **ESSAYS,
        bias_library=run,  # the run directory: its newest library
        checker_model="hf/smollm2",
        engines={"checker": cached},
        on_warning=lambda message: None,
        out=run / "corrections" / "essays",
    )
    (run / "corrections" / "broken").mkdir()
    (run / "corrections" / "broken" / "correct.json").write_text("{")
    page = report(run).read_text()
    section = page[page.index('<section id="corrections">') :]
    assert "Corrected scores (1)" in section and "essays: mean score" in section
    assert "data:image/svg+xml;base64," in section and "PPI++ with covariates" in section
    assert "d1-authority" in section and "20/60" in section
    assert "broken/correct.json" in page  # named among what could not be read


def test_the_bound_takes_only_an_effect_in_the_aggregates_units(tmp_path: Path) -> None:
    """A mean score is bounded by a score shift on its own scale; a bias validated on a pairwise
    judge (a Δ pair error) or on another scale gets no bound, and a warning says why."""
    table = tmp_path / "essays.csv"
    _essays(table)
    pairwise = _bias("d1-authority", True, "The judge favours responses that appeal to authority.", "cites experts")
    pairwise.validation.score_shift = None  # type: ignore[union-attr]
    other_scale = _bias("d1-emoji", True, "The judge favours responses with emoji.", "ends with a smiley")
    assert other_scale.validation is not None and other_scale.validation.score_shift is not None
    other_scale.validation.score_shift = other_scale.validation.score_shift.model_copy(update={"scale": "1-10"})
    library = save_library(BiasLibrary(name="lib", biases=[pairwise, other_scale]), tmp_path / "lib.json")
    rng = random.Random(3)
    flags = tmp_path / "flagged.csv"
    with table.open() as src, flags.open("w", newline="") as dst:
        rows = list(csv.DictReader(src))
        writer = csv.DictWriter(dst, [*rows[0], "d1-authority", "d1-emoji"])
        writer.writeheader()
        for row in rows:
            writer.writerow({**row, "d1-authority": rng.randint(0, 1), "d1-emoji": rng.randint(0, 1)})
    warnings: list[str] = []
    report = correct(
        flags,
        **ESSAYS,
        flags=["d1-authority", "d1-emoji"],
        bias_library=library,
        on_warning=warnings.append,
    ).report
    assert report.bias_bound == []
    assert any("d1-authority" in w and "no score shift" in w for w in warnings), warnings
    assert any("d1-emoji" in w and "a score shift on 1-10" in w for w in warnings), warnings
