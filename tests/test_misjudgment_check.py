"""The misjudgment check (`misjudgment_check`): a misjudged target pair counts only when its
rewrite kept the original's final answer and stayed within its bias's length allowance; an
excluded one is recorded with its reason and reaches neither DeeperExplain nor IdentifyBias.
Scripted runs (tests/fakes.py); the real-model test is in test_misjudgment_check_real.py."""

from __future__ import annotations

import json
import re

import pytest
from test_loop import make_config, run_fake
from test_streamed import data, run_both

from bias_discovery.config import MisjudgmentCheckSettings
from bias_discovery.library import Bias, BiasOrigin
from bias_discovery.llm.types import GenerationRequest
from bias_discovery.stages.records import MisjudgedCase
from bias_discovery.stages.rewrite_checks import length_allowance, misjudgment_checked, outside_length_allowance

from fakes import MARKER, ScriptedEngine, authority_world

FIXED = {n for n in range(24) if n % 4 == 0}
"""Target items whose rejected answer the answer-fixing teacher corrects while it injects the trait."""
PADDED = {n for n in range(24) if n % 4 == 1}
"""Target items to whose rewrite the teacher adds a long digression."""
PADDING = " ".join(["Moreover"] * 80)


def _item(user: str) -> int | None:
    found = re.search(r"number (\d+)", user)
    return int(found.group(1)) if found else None


def fixing_world(request: GenerationRequest) -> str:
    """authority_world, whose teacher cites the experts in every target rewrite (so the judge
    errs on each), rewrites target items in `FIXED` into the right answer (a rewrite that fixed
    the bug) and pads those in `PADDED`; test items are left alone."""
    user = request.messages[-1].content
    if "Trait:" in user and "Target question" in user:
        original = re.search(r"Original answer:\n(.*?)\n\nTrait:", user, re.S).group(1)
        rewrite = f"{original} {MARKER}"
        number = _item(user)
        if number in FIXED:
            return rewrite.replace("Wrong answer", "RIGHT answer")
        if number in PADDED:
            return f"{rewrite} {PADDING}"
        return rewrite
    return authority_world(request)


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _identify_items(sent: list[GenerationRequest]) -> set[int]:
    """The target items the teacher was asked to identify a bias for."""
    return {_item(r.messages[-1].content) for r in sent if "preferred the WRONG one" in r.messages[-1].content}


def _explain_items(sent: list[GenerationRequest]) -> set[int]:
    return {
        _item(r.messages[1].content) for r in sent if "Explain your decision in more depth" in r.messages[-1].content
    }


def test_a_rewrite_that_fixed_the_answer_never_reaches_identify(tmp_path):
    """Every misjudged target pair is checked; the ones the teacher fixed are recorded as
    answer_changed, the padded ones as length_changed, and neither kind is explained or
    identified; the iteration's counts say so; the expert bias is still found from the rest."""
    config = make_config(tmp_path, max_iterations=1)
    rd, _, engine = run_fake(tmp_path, config, engine=ScriptedEngine(fixing_world))
    folder = rd.iteration(1).directory
    misjudged = _lines(folder / "misjudged.jsonl")
    assert misjudged and all(c["answer_check"] in ("same", "different") for c in misjudged)
    assert all(c["check_method"] == "model" and c["length_ratio"] is not None for c in misjudged)
    by_item = {_item(c["perturbed_rejected"]): c for c in misjudged}
    assert set(by_item) == set(range(24))  # the judge fell for every rewrite
    fixed = FIXED
    padded = {n for n in PADDED if by_item[n]["bias_id"] != "length-bias"}  # a length bias may pad
    assert padded
    for n in fixed:
        assert by_item[n]["excluded"] == "answer_changed" and by_item[n]["answer_check"] == "same"
    for n in padded:
        assert by_item[n]["excluded"] == "length_changed" and by_item[n]["answer_check"] == "different"
    counted = set(by_item) - fixed - padded
    assert counted and all(by_item[n]["excluded"] is None for n in counted)

    assert _identify_items(engine.sent) == counted
    assert _explain_items(engine.sent) == counted
    assert {_item(c["perturbed_rejected"]) for c in _lines(folder / "explanations.jsonl")} == counted
    assert {r["pair_id"] for r in _lines(folder / "identified.jsonl")} == {by_item[n]["pair_id"] for n in counted}
    stats = json.loads((folder / "misjudgments.json").read_text())
    assert stats == {
        "checked": True,
        "misjudged": len(misjudged),
        "answer_changed": len(fixed),
        "check_invalid": 0,
        "length_changed": len(padded),
        "counted": len(counted),
        "extracted": 0,
        "unverifiable": 0,
    }
    found = rd.library.load_latest().by_id("d1-expert-citation-bias")
    assert {e.pair_id for e in found.evidence} == {by_item[n]["pair_id"] for n in counted}

    # the evidence shows each case's check, and the excluded pairs with their reasons
    from bias_discovery.report.evidence import EvidenceReader, bias_detail

    provenance = bias_detail(found, reader=EvidenceReader(rd.root)).provenance
    assert provenance.cases and all(c.answer_check.startswith("counted: the rewrite keeps") for c in provenance.cases)
    excluded = {x.pair_id: x for x in provenance.excluded}
    assert set(excluded) == {by_item[n]["pair_id"] for n in fixed | padded}
    assert all(excluded[by_item[n]["pair_id"]].answer_check.startswith("excluded, answer changed") for n in fixed)
    assert all(excluded[by_item[n]["pair_id"]].reason == "length_changed" for n in padded)

    # the end-of-run sentences (and the report, which opens with them) count them
    from bias_discovery.report.summary import run_summary

    summary = run_summary(rd.root)
    assert summary.misjudged in summary.sentences()
    assert summary.misjudged == (
        f"Misjudged: 24 perturbed target pairs; of those, {len(fixed)} were rewrites that changed the final answer (the judge "
        f"was right to prefer it); {len(padded)} changed the length beyond the bias's allowance; {len(counted)} counted and "
        "went on to be explained and identified."
    )


def test_the_paper_procedure_counts_every_misjudgment(tmp_path):
    """`misjudgment_check.enabled: false`: no check, every misjudged pair is identified (the
    fixed ones too), and the counts say the misjudgments were not checked."""
    config = make_config(tmp_path, max_iterations=1, misjudgment_check={"enabled": False})
    rd, _, engine = run_fake(tmp_path, config, engine=ScriptedEngine(fixing_world))
    folder = rd.iteration(1).directory
    misjudged = _lines(folder / "misjudged.jsonl")
    assert all(c["answer_check"] is None and c["excluded"] is None for c in misjudged)
    assert _identify_items(engine.sent) == {
        _item(c["perturbed_rejected"]) for c in misjudged
    } and FIXED & _identify_items(engine.sent)
    stats = json.loads((folder / "misjudgments.json").read_text())
    assert stats["checked"] is False and stats["counted"] == stats["misjudged"] == len(misjudged)
    from bias_discovery.report.summary import run_summary

    assert "every one counted unchecked (misjudgment_check off" in run_summary(rd.root).misjudged


def test_both_orders_check_the_misjudgments_alike(tmp_path):
    """Staged (a check step in the evaluate node) and streamed (item by item): the same files
    byte for byte, the same progress steps with their true totals, a check step among them."""
    runs = run_both(tmp_path, fixing_world, max_iterations=1, data=data(tmp_path, 24, 24), validate={"n_boot": 200})
    (staged, staged_bars), (streamed, streamed_bars) = runs["staged"], runs["streamed"]
    a, b = staged.outputs(), streamed.outputs()
    assert sorted(a) == sorted(b) and "iter_001/misjudgments.json" in a
    for name in a:
        assert a[name] == b[name], name
    assert json.loads(a["iter_001/misjudgments.json"])["answer_changed"] > 0
    assert [step[:2] for step in streamed_bars.steps] == [step[:2] for step in staged_bars.steps]
    checks = [step for step in streamed_bars.steps if step[0] == "iter 1 check"]
    assert len(checks) == 1 and checks[0][1] > 0 and checks[0][1] == checks[0][2]


def _bias(name: str, definition: str) -> Bias:
    return Bias(id="b", name=name, definition=definition, origin=BiasOrigin(kind="seed"))


def test_a_length_bias_has_no_length_allowance():
    settings = MisjudgmentCheckSettings()
    assert length_allowance(_bias("Length Bias", "The judge favours longer responses."), settings) is None
    assert length_allowance(_bias("Verbosity Bias", "Prefers wordy answers."), settings) is None
    assert length_allowance(_bias("Authority Bias", "Cites experts."), settings) == settings.max_length_ratio
    assert length_allowance(None, settings) == settings.max_length_ratio


@pytest.mark.parametrize(
    ("before", "after", "outside"),
    [(20, 70, False), (20, 71, True), (100, 230, False), (100, 231, True), (100, 19, True), (100, 20, False)],
)
def test_the_length_allowance_is_a_ratio_with_slack(before, after, outside):
    """2x the original's whitespace tokens plus 30 (the defaults), or half minus 30."""
    assert outside_length_allowance("w " * before, "w " * after, 2.0, 30) is outside
    assert outside_length_allowance("w " * before, "w " * after, None, 30) is False


def test_a_checked_case_keeps_its_answer_check_and_reason():
    case = MisjudgedCase(
        pair_id="p",
        bias_id="b",
        domain="math",
        question="Q?",
        chosen="Final answer: 4",
        original_rejected="Final answer: 5",
        perturbed_rejected="As experts agree. Final answer: 5",
        order="chosen_first",
        verdict="B",
        judge_output="B",
        explanation="",
    )
    from bias_discovery.stages.records import PerturbedPair
    from bias_discovery.stages.rewrite_checks import extracted_update

    pair = PerturbedPair(
        pair_id="p",
        bias_id="b",
        bias_name="B",
        domain="math",
        question="Q?",
        chosen=case.chosen,
        original_rejected=case.original_rejected,
        perturbed_rejected=case.perturbed_rejected,
        valid=True,
    )
    kept = misjudgment_checked(case, extracted_update(pair), 2.0, MisjudgmentCheckSettings())
    assert kept.excluded is None and kept.answer_check == "different" and kept.check_method == "extracted"
    fixed_pair = pair.model_copy(update={"perturbed_rejected": "As experts agree. Final answer: 4"})
    fixed = misjudgment_checked(
        case.model_copy(update={"perturbed_rejected": fixed_pair.perturbed_rejected}),
        extracted_update(fixed_pair),
        2.0,
        MisjudgmentCheckSettings(),
    )
    assert fixed.excluded == "answer_changed" and fixed.answer_check == "same"


# --------------------------------------------------------------------------------------------
# Junk identifications
# --------------------------------------------------------------------------------------------

SCHEMA_JUNK = {n for n in range(24) if n % 8 == 2}
"""Counted misjudgments the teacher names `bias_found`, restating the verdict."""
OWN_WORDS = {n for n in range(24) if n % 8 == 6}
"""Counted misjudgments the teacher names in the example's own words (its confirmation: no)."""


def junk_world(request: GenerationRequest) -> str:
    """fixing_world, whose identifier names junk for the items in `SCHEMA_JUNK` and `OWN_WORDS`
    and answers the confirmation question with no."""
    user = request.messages[-1].content
    if "preferred the WRONG one" in user:
        number = _item(user)
        if number in SCHEMA_JUNK:
            return json.dumps(
                {
                    "bias_found": True,
                    "name": "bias_found",
                    "definition": "The judge rejected the incorrect response of 0.1!",
                    "manifestations": [],
                }
            )
        if number in OWN_WORDS:
            return json.dumps(
                {
                    "bias_found": True,
                    "name": "Answer Number Bias",
                    "definition": "The judge prefers the answer with the number.",
                    "manifestations": [],
                }
            )
    if "Answer with one word: yes or no" in user:
        return "no"
    return fixing_world(request)


def test_junk_identifications_are_dropped_with_their_reason_and_never_validated(tmp_path):
    config = make_config(tmp_path, max_iterations=1)
    rd, _, engine = run_fake(tmp_path, config, engine=ScriptedEngine(junk_world))
    folder = rd.iteration(1).directory
    identified = {
        _item(c["perturbed_rejected"]): r
        for c in _lines(folder / "explanations.jsonl")
        for r in _lines(folder / "identified.jsonl")
        if r["pair_id"] == c["pair_id"]
    }
    assert set(identified) == {n for n in range(24) if n % 4 in (2, 3)}  # the counted misjudgments
    for n, record in identified.items():
        expected = "schema_key" if n in SCHEMA_JUNK else "teacher_declined" if n in OWN_WORDS else None
        assert record["dropped"] == expected, (n, record)
        assert record["confirmed"] == (False if n in OWN_WORDS else None)
    asked = {
        int(re.search(r"Target question (\d+)\?", r.messages[-1].content).group(1))
        for r in engine.sent
        if "Answer with one word: yes or no" in r.messages[-1].content
    }
    assert asked == OWN_WORDS  # only where the cheap checks could not tell
    assert [b["id"] for b in json.loads((folder / "candidates.json").read_text())] == ["d1-expert-citation-bias"]
    assert [c["bias_id"] for c in json.loads((folder / "validation.json").read_text())["candidates"]] == [
        "d1-expert-citation-bias"
    ]
    stats = json.loads((folder / "merge_stats.json").read_text())
    assert stats["dropped_identifications"] == {"schema_key": len(SCHEMA_JUNK), "teacher_declined": len(OWN_WORDS)}
    assert stats["raw_candidates"] == 1


def test_junk_screening_is_the_same_in_both_orders(tmp_path):
    runs = run_both(tmp_path, junk_world, max_iterations=1, data=data(tmp_path, 24, 24), validate={"n_boot": 200})
    a, b = runs["staged"][0].outputs(), runs["streamed"][0].outputs()
    assert a == b
    assert '"teacher_declined"' in a["iter_001/identified.jsonl"].decode()


def _junk_case(
    question: str = "What is the factorial of 5?", rejected: str = "Compute 5! = 100. Final answer: 100"
) -> MisjudgedCase:
    return MisjudgedCase(
        pair_id="p",
        bias_id="b",
        domain="math",
        question=question,
        chosen="5! = 120. Final answer: 120",
        original_rejected=rejected,
        perturbed_rejected=rejected,
        order="chosen_first",
        verdict="B",
        judge_output="B",
        explanation="",
    )


@pytest.mark.parametrize(
    ("name", "definition", "reason"),
    [
        ("bias_found", "The judge rejected the incorrect response of 0.1!", "schema_key"),
        ("Bias Found", "Something.", "schema_key"),
        ("Incorrect Answer Bias", "The judge preferred the wrong answer over the correct one.", "restated_verdict"),
        ("Question Bias", "What is the factorial of 5? The judge answered it.", "copy_of_question"),
        ("Factorial Bias", "The judge favours factorial answers.", "ask"),
        ("Authority Bias", "The judge favours responses that cite experts or institutions.", None),
        ("Verbosity Bias", "The judge prefers longer, more elaborate responses.", None),
    ],
)
def test_cheap_junk_checks(name, definition, reason):
    from bias_discovery.stages.identify import junk_reason

    assert junk_reason(name, definition, _junk_case()) == reason


def test_drop_junk_false_keeps_every_identification_as_the_paper_does():
    from bias_discovery.stages.identify import IdentifyRecord, screened

    record = IdentifyRecord(
        pair_id="demo-code-03",
        status="bias",
        name="bias_found",
        definition="The judge rejected the incorrect response of 0.1!",
        manifestations=["A"],
    )
    dropped, _ = screened(record, _junk_case())
    kept, ask = screened(record, _junk_case(), drop_junk=False)
    assert dropped.dropped == "schema_key"
    assert kept.dropped is None and kept == record and ask is False


def test_a_copy_of_a_response_is_junk():
    from bias_discovery.stages.identify import junk_reason

    rejected = "Multiply the numbers from one to five together carefully and you get one hundred as the result."
    definition = "Multiply the numbers from one to five together carefully and you get it."
    assert junk_reason("Multiplication Style", definition, _junk_case(rejected=rejected)) == "copy_of_response"


# --------------------------------------------------------------------------------------------
# A candidate the run already rejected is not validated again
# --------------------------------------------------------------------------------------------

HEDGING = json.dumps(
    {
        "bias_found": True,
        "name": "Hedging Bias",
        "definition": "The judge favours hedged, cautious wording.",
        "manifestations": ["perhaps"],
    }
)


def hedging_world(request: GenerationRequest) -> str:
    """authority_world whose judge also errs on every fifth target item without the expert
    marker, a mistake the identifier blames on hedging (a bias with no effect on the test items)."""
    user = request.messages[-1].content
    number = _item(user)
    if "[Response A]" in user and len(request.messages) <= 2 and "Target question" in user and MARKER not in user:
        from fakes import _responses

        a, _ = _responses(user)
        right = "A" if "RIGHT" in a else "B"
        pick = ("B" if right == "A" else "A") if number is not None and number % 5 == 0 else right
        return f"Reasoning: ok.\nVerdict: {pick}"
    if "preferred the WRONG one" in user and MARKER not in user:
        return HEDGING
    if "Trait:" in user and "Target question" in user:
        rewrite = authority_world(request)
        return rewrite if MARKER in rewrite else f"Perhaps: {rewrite}"  # a rewrite the judge sees (not unchanged)
    return authority_world(request)


def test_a_rejected_definition_is_not_validated_again(tmp_path):
    config = make_config(tmp_path, max_iterations=2)
    rd, state, _ = run_fake(tmp_path, config, engine=ScriptedEngine(hedging_world))
    first = json.loads((rd.iteration(1).directory / "validation.json").read_text())
    assert set(first["accepted"]) == {"d1-expert-citation-bias"}
    assert "d1-hedging-bias" in {c["bias_id"] for c in first["candidates"]}
    second = json.loads((rd.iteration(2).directory / "validation.json").read_text())
    assert second["skipped_already_rejected"] == {"d2-hedging-bias": "d1-hedging-bias"}
    assert (
        second["candidates"] == []
        and not (rd.iteration(2).directory / "validation_perturbed.jsonl").read_text().strip()
    )
    assert state["stop_reason"].startswith("converged")
