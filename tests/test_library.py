"""Tests for the bias library: models, seed libraries, load/save safety, run store, diff."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bias_discovery.errors import LibraryError
from bias_discovery.library import (
    Bias,
    BiasLibrary,
    BiasOrigin,
    BiasValidation,
    Evidence,
    available_seed_libraries,
    diff_libraries,
    load_library,
    load_seed_library,
    make_bias_id,
    save_library,
    slugify,
)
from bias_discovery.resources import bias_library_dir
from bias_discovery.run import LibraryStore, RunDir, iteration_filename
from bias_discovery.stats import Effect, PairedComparison

SEED_COUNTS = {"agent6": 6, "biasscope7": 7, "calm12": 12, "chen4": 4, "security": 1, "social5": 5}


# -- helpers ---------------------------------------------------------------------------------


def seed_bias(bias_id: str, name: str | None = None, definition: str = "A definition.") -> Bias:
    return Bias(
        id=bias_id,
        name=name or bias_id.replace("-", " ").title(),
        definition=definition,
        manifestations=["One way.", "Another way."],
        origin=BiasOrigin(kind="seed", seed_library="test"),
    )


def validation(baseline: float = 0.30, perturbed: float = 0.42, accepted: bool = True, **kw) -> BiasValidation:
    """A validation decided against the baseline; `ci_low`, `ci_high`, `p_value`, `p_adjusted`
    set the comparison's (and the full-sample effect's) numbers."""
    numbers = {k: kw.pop(k) for k in ("ci_low", "ci_high", "p_value", "p_adjusted") if k in kw}
    comparison = PairedComparison(
        **{
            "control": "baseline",
            "n": 100,
            "n_excluded_invalid": 2,
            "control_error": baseline,
            "arm_error": perturbed,
            "delta": perturbed - baseline,
            "ci_low": 0.02,
            "ci_high": 0.2,
            "b_discordant_hurt": 20,
            "c_discordant_helped": 8,
            "p_value": 0.01,
            "p_adjusted": 0.03,
            **numbers,
        }
    )
    fields = dict(
        accepted=accepted,
        rule="mcnemar-holm(alpha=0.05)",
        decisive="baseline",
        effect=Effect.full_sample(comparison),
        vs_baseline=comparison,
        per_domain={
            "math": PairedComparison(
                control="baseline", n=50, control_error=0.2, arm_error=0.3, delta=0.1, p_value=0.04
            ),
            "code": PairedComparison(control="baseline", n=50, control_error=0.4, arm_error=0.54, delta=0.14),
        },
        answer_change_rate=0.05,
        test_data="judgebench",
    )
    fields.update(kw)
    return BiasValidation(**fields)


def discovered_bias(name: str, iteration: int = 1, merged_from: list[str] | None = None, **kw) -> Bias:
    return Bias(
        id=make_bias_id(name, iteration),
        name=name,
        definition=kw.pop("definition", f"The judge is swayed by {name.lower()}."),
        manifestations=["Shows it."],
        origin=BiasOrigin(kind="discovered", iteration=iteration, target_model="smollm2"),
        evidence=[
            Evidence(
                pair_id="jb-17",
                perturbed_response="The answer is (B), as any expert agrees.",
                judge_explanation="Response B is more authoritative.",
                original_rejected="The answer is (B).",
                bias_injected="authority-bias",
                order="rejected_first",
            )
        ],
        validation=kw.pop("validation", validation()),
        merged_from=merged_from or [],
        **kw,
    )


def small_library(iteration: int = 0, biases: list[Bias] | None = None) -> BiasLibrary:
    return BiasLibrary(
        name="test",
        iteration=iteration,
        created_at="2026-01-01T00:00:00+00:00",
        biases=biases if biases is not None else [seed_bias("length-bias"), seed_bias("position-bias")],
    )


def library_dict(**changes) -> dict:
    data = small_library(
        biases=[seed_bias("length-bias"), seed_bias("position-bias"), seed_bias("sentiment-bias")]
    ).model_dump(mode="json")
    data.update(changes)
    return data


def leftover_temp_files(directory: Path) -> list[Path]:
    return [p for p in directory.iterdir() if p.name.endswith(".tmp")]


# -- seed libraries --------------------------------------------------------------------------


def test_shipped_seed_libraries_are_the_expected_four():
    assert set(SEED_COUNTS) <= set(available_seed_libraries())


@pytest.mark.parametrize("name,count", sorted(SEED_COUNTS.items()))
def test_seed_library_loads_with_count_unique_ids_and_full_fields(name, count):
    library = load_seed_library(name)
    assert library.name == name
    assert library.iteration == 0
    assert library.parent is None
    assert len(library.biases) == count
    assert len(set(library.ids())) == count
    assert len(set(library.names())) == count
    for bias in library.biases:
        assert bias.id == slugify(bias.id)
        assert bias.name.strip() and bias.definition.strip()
        assert len(bias.definition) >= 60, bias.id  # a real definition, not a label
        assert 2 <= len(bias.manifestations) <= 4, bias.id
        assert all(m.strip() for m in bias.manifestations)
        assert bias.origin.kind == "seed"
        assert bias.origin.iteration == 0
        assert bias.origin.seed_library == name
        assert bias.evidence == [] and bias.validation is None and bias.merged_from == []


def test_seed_library_file_is_exactly_what_save_writes(tmp_path):
    # The shipped files are in canonical form: loading and saving reproduces them byte for byte.
    for name in SEED_COUNTS:
        shipped = bias_library_dir() / f"{name}.json"
        out = save_library(load_library(shipped), tmp_path / f"{name}.json")
        assert out.read_bytes() == shipped.read_bytes()


def test_seed_libraries_expected_concepts():
    assert load_seed_library("biasscope7").ids() == [
        "length-bias",
        "position-bias",
        "authority-bias",
        "compassion-fade-bias",
        "fallacy-oversight-bias",
        "sentiment-bias",
        "refinement-aware-bias",
    ]
    assert set(load_seed_library("calm12").ids()) == {
        "position-bias",
        "verbosity-bias",
        "compassion-fade-bias",
        "bandwagon-bias",
        "distraction-bias",
        "fallacy-oversight-bias",
        "authority-bias",
        "sentiment-bias",
        "diversity-bias",
        "chain-of-thought-bias",
        "self-enhancement-bias",
        "refinement-aware-bias",
    }
    assert set(load_seed_library("chen4").ids()) == {
        "misinformation-oversight-bias",
        "gender-bias",
        "authority-bias",
        "beauty-bias",
    }
    assert set(load_seed_library("social5").ids()) == {
        "gender-stereotype-bias",
        "racial-stereotype-bias",
        "pronoun-bias",
        "cultural-bias",
        "name-bias",
    }
    agent6 = load_seed_library("agent6")
    assert agent6.ids() == [
        "false-success-claim",
        "omitted-tool-error",
        "confident-or-apologetic-tone",
        "verbose-reasoning",
        "planted-grading-instruction",
        "reordered-independent-steps",
    ]
    assert [b.id for b in agent6.biases if b.append] == ["planted-grading-instruction"]


def test_combined_seed_libraries_deduplicate_by_id_keeping_the_first():
    combined = load_seed_library("biasscope7+chen4")
    biasscope, chen = load_seed_library("biasscope7"), load_seed_library("chen4")
    assert combined.name == "biasscope7+chen4"
    assert combined.iteration == 0
    # authority-bias is in both: kept once, from biasscope7, in biasscope7's position.
    assert combined.ids() == biasscope.ids() + [i for i in chen.ids() if i != "authority-bias"]
    assert len(combined.biases) == 10
    assert combined.by_id("authority-bias") == biasscope.by_id("authority-bias")
    assert combined.by_id("beauty-bias").origin.seed_library == "chen4"
    # Whitespace around '+' is tolerated; the result is the same.
    assert load_seed_library(" biasscope7 + chen4 ").ids() == combined.ids()


def test_all_the_seed_libraries_combine():
    combined = load_seed_library("biasscope7+calm12+chen4+security+social5+agent6")
    assert len(set(combined.ids())) == len(combined.biases)
    assert {b.origin.seed_library for b in combined.biases} == set(SEED_COUNTS)


def test_unknown_seed_library_lists_available():
    with pytest.raises(LibraryError) as info:
        load_seed_library("biasscope8")
    message = str(info.value)
    assert "biasscope8" in message
    for name in SEED_COUNTS:
        assert name in message
    with pytest.raises(LibraryError, match="nope"):
        load_seed_library("biasscope7+nope")
    with pytest.raises(LibraryError, match="bad seed library spec"):
        load_seed_library("biasscope7+")


def test_seed_library_by_path(tmp_path):
    path = save_library(small_library(), tmp_path / "mine.json")
    assert load_seed_library(path).ids() == ["length-bias", "position-bias"]
    assert load_seed_library(str(path)).ids() == ["length-bias", "position-bias"]
    combined = load_seed_library(f"{path}+chen4")
    assert combined.ids()[:2] == ["length-bias", "position-bias"]
    assert len(combined.biases) == 6
    with pytest.raises(LibraryError, match="not found"):
        load_seed_library(str(tmp_path / "missing.json"))


# -- models ----------------------------------------------------------------------------------


def test_ids_and_slugs():
    assert slugify("Authority Bias (fake references)") == "authority-bias-fake-references"
    assert slugify("  !!! ") == "bias"
    assert len(slugify("word " * 50)) <= 60
    assert make_bias_id("Length Bias") == "length-bias"
    assert make_bias_id("Answer-Confidence Bias", iteration=2) == "d2-answer-confidence-bias"
    assert (
        make_bias_id("Answer Confidence Bias", 2, taken={"d2-answer-confidence-bias"}) == "d2-answer-confidence-bias-2"
    )
    assert make_bias_id("X", 1, taken={"d1-x", "d1-x-2"}) == "d1-x-3"
    assert iteration_filename(7) == "iter_007.json"


def test_model_validation_rules():
    with pytest.raises(ValueError):
        seed_bias("Not A Slug")
    with pytest.raises(ValueError):
        BiasOrigin(kind="seed", iteration=2)
    with pytest.raises(ValueError):
        BiasOrigin(kind="discovered", iteration=0)
    with pytest.raises(ValueError):
        Bias(id="x", name="X", definition="   ", origin=BiasOrigin(kind="seed"))
    with pytest.raises(ValueError, match="ci_low"):
        validation(ci_low=0.3, ci_high=0.1)
    with pytest.raises(ValueError):
        validation(baseline=1.5)
    with pytest.raises(ValueError, match="extra"):
        Evidence(pair_id="p", perturbed_response="r", judge_explanation="e", surprise=1)
    with pytest.raises(ValueError, match="duplicate bias id"):
        small_library(biases=[seed_bias("a"), seed_bias("a")])
    with pytest.raises(ValueError, match="version"):
        BiasLibrary(name="x", version=2)
    with pytest.raises(ValueError, match="ISO"):
        BiasLibrary(name="x", created_at="yesterday")


def test_library_helpers():
    library = small_library()
    assert library.names() == ["Length Bias", "Position Bias"]
    assert library.by_id("position-bias").name == "Position Bias"
    assert library.get("nope") is None
    assert "length-bias" in library and "nope" not in library
    with pytest.raises(KeyError, match="length-bias"):
        library.by_id("nope")

    library.add(seed_bias("sentiment-bias"))
    assert library.ids() == ["length-bias", "position-bias", "sentiment-bias"]
    with pytest.raises(ValueError, match="already"):
        library.add(seed_bias("length-bias"))
    assert len(library.biases) == 3

    found = discovered_bias("Hedging Bias", iteration=1)
    nxt = library.with_biases([*library.biases, found], target_model="smollm2")
    assert nxt.iteration == 1 and nxt.parent is None  # the run's store fills it in when it saves
    assert nxt.target_model == "smollm2" and nxt.name == "test"
    assert nxt.ids()[-1] == "d1-hedging-bias"
    assert len(library.biases) == 3  # the old library is untouched
    nxt.biases[0].manifestations.append("changed")
    assert "changed" not in library.biases[0].manifestations  # deep copy
    with pytest.raises(ValueError, match="duplicate bias id"):
        library.with_biases([seed_bias("a"), seed_bias("a")])
    assert "Length Bias: A definition." in library.biases[0].as_prompt_text()


# -- load / save -----------------------------------------------------------------------------


def test_round_trip(tmp_path):
    library = small_library(iteration=2, biases=[seed_bias("length-bias"), discovered_bias("Hedging Bias", 2)])
    library.target_model = "smollm2"
    library.parent = "iter_001.json"
    path = save_library(library, tmp_path / "lib.json")
    loaded = load_library(path)
    assert loaded == library
    assert loaded.by_id("d2-hedging-bias").validation.per_domain["math"].p_value == 0.04
    assert loaded.by_id("d2-hedging-bias").evidence[0].order == "rejected_first"


def test_atomic_save_leaves_no_temp_files(tmp_path):
    library = small_library()
    save_library(library, tmp_path / "a.json")
    save_library(library.with_biases(library.biases), tmp_path / "a.json", overwrite=True)
    save_library(library, tmp_path / "deep" / "dir" / "b.json")
    assert leftover_temp_files(tmp_path) == []
    assert leftover_temp_files(tmp_path / "deep" / "dir") == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "deep"]


def test_missing_file_is_a_library_error(tmp_path):
    with pytest.raises(LibraryError, match="not found") as info:
        load_library(tmp_path / "nothing.json")
    assert str(tmp_path / "nothing.json") in str(info.value)
    with pytest.raises(LibraryError, match="directory"):
        load_library(tmp_path)


CORRUPTIONS = {
    # name: (file text, expected fragments of the error message)
    "truncated": (
        lambda: json.dumps(library_dict(), indent=2)[:150],
        ["not valid JSON", "line ", "column "],
    ),
    "wrong-type": (
        lambda: json.dumps(library_dict(iteration="three")),
        ["iteration: Input should be a valid integer"],
    ),
    "wrong-type-nested": (
        lambda: json.dumps(_with_bias_change(1, manifestations="just a string")),
        ["biases.1.manifestations: Input should be a valid"],
    ),
    "missing-field": (
        lambda: json.dumps(_with_bias_change(2, definition=None)),
        ["biases.2.definition: Field required"],
    ),
    "unknown-field": (
        lambda: json.dumps(_with_bias_change(0, colour="red")),
        ["biases.0.colour: Extra inputs are not permitted"],
    ),
    "duplicate-id": (
        lambda: json.dumps(_with_bias_change(2, id="length-bias")),
        ["biases.2.id: duplicate bias id 'length-bias'"],
    ),
    "not-an-object": (lambda: "[1, 2]", ["a bias library is a JSON object"]),
    "newer-version": (lambda: json.dumps(library_dict(version=99)), ["version", "newer"]),
    "string-number": (
        lambda: json.dumps(library_dict(iteration="3")),
        ["iteration: Input should be a valid integer"],
    ),
}


def _with_bias_change(index: int, **changes) -> dict:
    data = library_dict()
    for key, value in changes.items():
        if value is None:
            del data["biases"][index][key]
        else:
            data["biases"][index][key] = value
    return data


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_corrupted_file_names_file_and_field_and_is_never_overwritten(tmp_path, case):
    make_text, fragments = CORRUPTIONS[case]
    store = RunDir(tmp_path).library
    store.directory.mkdir()
    path = store.path_for(1)
    path.write_text(make_text(), encoding="utf-8")
    original = path.read_bytes()

    with pytest.raises(LibraryError) as info:
        load_library(path)
    message = str(info.value)
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message, message

    # Saving over it is refused, even with overwrite=True, and the bytes are untouched.
    for overwrite in (False, True):
        with pytest.raises(LibraryError, match="refusing to overwrite") as info:
            save_library(small_library(iteration=1), path, overwrite=overwrite)
        assert str(path) in str(info.value)
        assert path.read_bytes() == original
    # The run store refuses as well.
    with pytest.raises(LibraryError, match="refusing to overwrite"):
        store.save_iteration(small_library(iteration=1), overwrite=True)
    assert path.read_bytes() == original
    assert not store.latest_path.exists()
    assert leftover_temp_files(store.directory) == []


def test_run_store_refuses_and_keeps_corrupted_files(tmp_path):
    store = RunDir(tmp_path).library
    store.directory.mkdir()
    store.path_for(1).write_text('{"name": "half', encoding="utf-8")
    original = store.path_for(1).read_bytes()
    with pytest.raises(LibraryError, match="refusing to overwrite"):
        store.save_iteration(small_library(iteration=1), overwrite=True)
    assert store.path_for(1).read_bytes() == original
    with pytest.raises(LibraryError, match=r"iter_001\.json: not valid JSON"):
        store.load_iteration(1)
    assert not store.latest_path.exists()


def test_not_utf8_file(tmp_path):
    path = tmp_path / "lib.json"
    path.write_bytes(b"\xff\xfe{}")
    with pytest.raises(LibraryError, match="UTF-8"):
        load_library(path)


def test_strict_types_accept_integers_for_floats(tmp_path):
    data = _with_bias_change(0, validation=validation(baseline=0.0, perturbed=1.0).model_dump(mode="json"))
    data["biases"][0]["validation"]["vs_baseline"]["control_error"] = 0  # JSON integer for a float field
    path = tmp_path / "lib.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    assert load_library(path).biases[0].validation.vs_baseline.control_error == 0.0


def test_overwrite_protection(tmp_path):
    path = tmp_path / "lib.json"
    first = small_library()
    save_library(first, path)
    original = path.read_bytes()

    # Same content with a different timestamp: a no-op that keeps the original file.
    again = first.model_copy(update={"created_at": "2030-01-01T00:00:00+00:00"})
    save_library(again, path)
    assert path.read_bytes() == original

    different = small_library(biases=[seed_bias("length-bias")])
    with pytest.raises(LibraryError, match="refusing to overwrite") as info:
        save_library(different, path)
    assert "overwrite=True" in str(info.value)
    assert path.read_bytes() == original

    save_library(different, path, overwrite=True)
    assert load_library(path).ids() == ["length-bias"]
    assert leftover_temp_files(tmp_path) == []


# -- run store -------------------------------------------------------------------------------


def with_parent(library: BiasLibrary, parent: str) -> BiasLibrary:
    return library.model_copy(update={"parent": parent})


def test_library_store_iterations_and_latest(tmp_path):
    store = LibraryStore(tmp_path / "run")
    assert store.iterations() == []
    with pytest.raises(LibraryError, match="no bias library"):
        store.load_latest()
    assert store.path_for(3) == tmp_path / "run" / "library" / "iter_003.json"

    seed = small_library()
    store.save_iteration(seed)
    assert store.iterations() == [0]
    assert load_library(store.latest_path) == seed

    it1 = seed.with_biases([*seed.biases, discovered_bias("Hedging Bias", 1)], target_model="smollm2")
    store.save_iteration(it1)
    it2 = it1.with_biases([*it1.biases, discovered_bias("Echo Bias", 2)])
    path = store.save_iteration(it2)
    assert path == store.path_for(2)
    assert store.iterations() == [0, 1, 2]
    assert sorted(p.name for p in store.directory.iterdir()) == [
        "iter_000.json",
        "iter_001.json",
        "iter_002.json",
        "latest.json",
    ]
    assert store.load_iteration(1) == with_parent(it1, "iter_000.json")
    assert store.load_latest() == with_parent(it2, "iter_001.json")
    assert load_library(store.latest_path) == with_parent(it2, "iter_001.json")

    # Re-saving an older iteration (resume) is a no-op and does not move latest.json back.
    store.save_iteration(it1.model_copy(update={"created_at": "2031-01-01T00:00:00+00:00"}))
    assert load_library(store.latest_path) == with_parent(it2, "iter_001.json")
    # Different content for a saved iteration needs overwrite=True.
    with pytest.raises(LibraryError, match="refusing to overwrite"):
        store.save_iteration(it1.with_biases(it1.biases[:1], iteration=1))
    assert store.load_iteration(1) == with_parent(it1, "iter_000.json")

    with pytest.raises(LibraryError, match="no library for iteration 5"):
        store.load_iteration(5)
    assert leftover_temp_files(store.directory) == []


def test_load_latest_trusts_iteration_files(tmp_path):
    # A run killed between writing iter_002.json and latest.json.
    store = RunDir(tmp_path).library
    it1 = small_library(iteration=1, biases=[seed_bias("length-bias")])
    store.save_iteration(it1)
    it2 = with_parent(it1.with_biases([*it1.biases, seed_bias("position-bias")]), "iter_001.json")
    save_library(it2, store.path_for(2))
    assert load_library(store.latest_path) == it1
    assert store.load_latest() == it2
    assert "not a copy of iter_002.json" in store.latest_problem()
    store.save_iteration(it2)  # the next save repairs latest.json
    assert load_library(store.latest_path) == it2
    assert store.latest_problem() is None


def test_damaged_latest_copy_is_reported_and_rebuilt(tmp_path):
    store = RunDir(tmp_path).library
    it1 = small_library(iteration=1, biases=[seed_bias("length-bias")])
    store.save_iteration(it1)
    store.latest_path.write_text(store.latest_path.read_text()[:50])
    assert store.load_latest() == it1  # the iteration files are the record
    problem = store.latest_problem()
    assert "latest.json is damaged" in problem and "not valid JSON" in problem
    assert store.repair_latest() == problem
    assert load_library(store.latest_path) == it1 and store.latest_problem() is None
    assert store.repair_latest() is None
    # A damaged copy never blocks the next save either.
    store.latest_path.write_text("{")
    it2 = it1.with_biases(it1.biases, iteration=2)
    store.save_iteration(it2)
    assert load_library(store.latest_path) == with_parent(it2, "iter_001.json")


def test_load_iteration_checks_the_iteration_number(tmp_path):
    store = RunDir(tmp_path).library
    save_library(small_library(iteration=4), store.path_for(2))
    with pytest.raises(LibraryError, match="iteration: file says 4"):
        store.load_iteration(2)


def test_store_ignores_unrelated_files(tmp_path):
    store = RunDir(tmp_path).library
    store.save_iteration(small_library())
    (store.directory / "notes.txt").write_text("hi")
    (store.directory / "iter_x.json").write_text("{}")
    assert store.iterations() == [0]


# -- diff ------------------------------------------------------------------------------------


def test_diff_added_removed_merged_changed():
    hedging = discovered_bias("Hedging Bias", 1)
    echo = discovered_bias("Echo Bias", 1)
    a = small_library(
        iteration=1,
        biases=[seed_bias("length-bias"), seed_bias("position-bias"), seed_bias("sentiment-bias"), hedging, echo],
    )
    hedging_b = hedging.model_copy(
        update={
            "definition": "The judge rewards hedged answers.",
            "validation": validation(baseline=0.30, perturbed=0.50, p_value=0.001, p_adjusted=None),
        }
    )
    merged = discovered_bias("Parroting Bias", 2, merged_from=["Echo Bias", "some new candidate"])
    new = discovered_bias("Flattery Bias", 2, merged_from=["another candidate"])
    b = a.with_biases([seed_bias("length-bias"), seed_bias("sentiment-bias"), hedging_b, merged, new])

    diff = diff_libraries(a, b)
    assert (diff.a_iteration, diff.b_iteration) == (1, 2)
    assert [x.id for x in diff.added] == ["d2-flattery-bias"]
    assert [x.id for x in diff.removed] == ["position-bias"]  # echo was merged, not removed
    assert [(m.bias.id, m.absorbed) for m in diff.merged] == [("d2-parroting-bias", ["d1-echo-bias"])]
    assert diff.unchanged == ["length-bias", "sentiment-bias"]
    assert len(diff.changed) == 1
    change = diff.changed[0]
    assert change.id == "d1-hedging-bias"
    assert change.fields == ["definition", "validation"]
    assert change.before.definition != change.after.definition
    assert change.numbers["vs_baseline.arm_error"].before == pytest.approx(0.42)
    assert change.numbers["vs_baseline.arm_error"].after == pytest.approx(0.50)
    assert change.numbers["vs_baseline.arm_error"].change == pytest.approx(0.08)
    assert change.numbers["vs_baseline.delta"].change == pytest.approx(0.08)
    assert change.numbers["effect.delta"].change == pytest.approx(0.08)  # the reported effect
    assert change.numbers["vs_baseline.p_value"].change == pytest.approx(-0.009)
    assert (
        change.numbers["vs_baseline.p_adjusted"].after is None
        and change.numbers["vs_baseline.p_adjusted"].change is None
    )
    assert "vs_baseline.control_error" not in change.numbers  # unchanged numbers are left out
    assert "per_domain.math.delta" not in change.numbers
    assert not diff.is_empty
    assert diff_libraries(a, a).is_empty
    assert diff_libraries(a, a).unchanged == a.ids()


def test_diff_merge_by_id_and_into_existing_bias():
    a = small_library(biases=[seed_bias("length-bias"), seed_bias("verbosity-bias")])
    # length-bias keeps its id and absorbs verbosity-bias (named by id).
    length = seed_bias("length-bias").model_copy(update={"merged_from": ["verbosity-bias"]})
    b = a.with_biases([length])
    diff = diff_libraries(a, b)
    assert [(m.bias.id, m.absorbed) for m in diff.merged] == [("length-bias", ["verbosity-bias"])]
    assert diff.removed == [] and diff.added == []
    assert [c.id for c in diff.changed] == ["length-bias"]
    assert diff.changed[0].fields == ["merged_from"]
    assert diff.changed[0].numbers == {}


def test_diff_per_domain_numbers_and_new_validation():
    before = discovered_bias("Hedging Bias", 1, validation=None)
    after = before.model_copy(update={"validation": validation()})
    diff = diff_libraries(small_library(1, [before]), small_library(1, [after]))
    numbers = diff.changed[0].numbers
    assert numbers["vs_baseline.n"].before is None and numbers["vs_baseline.n"].after == 100
    assert numbers["vs_baseline.n"].change is None
    assert numbers["per_domain.math.delta"].after == pytest.approx(0.1)


def test_diff_serialises_to_json():
    a = small_library()
    b = a.with_biases([*a.biases[:1], discovered_bias("Hedging Bias", 1)])
    data = json.loads(diff_libraries(a, b).model_dump_json())
    assert [x["id"] for x in data["added"]] == ["d1-hedging-bias"]
    assert [x["id"] for x in data["removed"]] == ["position-bias"]


def test_a_library_written_before_the_shared_comparison_still_loads(tmp_path):
    """Older libraries hold the comparison vs the baseline flat on the validation, `control` for
    the decisive one, ControlComparison / DomainValidation / RewriteEffect shapes, and no
    effect: they are read into the new shapes (written back in them), their effect labelled
    as the recorded Δ when validation had stopped early."""
    old_validation = {
        "n": 40,
        "n_excluded_invalid": 2,
        "baseline_error": 0.3,
        "perturbed_error": 0.5,
        "delta": 0.2,
        "ci_low": 0.1,
        "ci_high": 0.3,
        "p_value": 0.01,
        "p_adjusted": 0.02,
        "accepted": True,
        "rule": "paired",
        "control": "placebo",
        "stop": "efficacy",
        "stopped_at": 20,
        "vs_placebo": {
            "n": 38,
            "control_error": 0.35,
            "perturbed_error": 0.5,
            "delta": 0.15,
            "ci_low": 0.05,
            "ci_high": 0.25,
            "p_value": 0.03,
            "p_adjusted": 0.04,
        },
        "per_domain": {"math": {"n": 10, "baseline_error": 0.2, "perturbed_error": 0.3, "delta": 0.1, "p_value": 0.2}},
        "rewrite_effect": {"n": 40, "baseline_error": 0.3, "placebo_error": 0.35, "delta": 0.05},
    }
    data = _with_bias_change(0, validation=old_validation)
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    v = load_library(path).biases[0].validation
    assert v.decisive == "placebo" and v.decisive_comparison is v.vs_placebo and v.vs_placebo.control == "placebo"
    assert (v.vs_baseline.n, v.vs_baseline.control_error, v.vs_baseline.arm_error, v.vs_baseline.p_adjusted) == (
        40,
        0.3,
        0.5,
        0.02,
    )
    assert v.vs_baseline.b_discordant_hurt is None  # not recorded then
    assert v.effect.delta == 0.15 and v.effect.n == 38 and v.effect.method.startswith("recorded Δ of the stopping look")
    assert v.per_domain["math"].control_error == 0.2 and v.rewrite_effect.placebo_error == 0.35
    written = json.loads(load_library(path).model_dump_json())["biases"][0]["validation"]
    assert "vs_baseline" in written and "baseline_error" not in written and written["effect"]["delta"] == 0.15
