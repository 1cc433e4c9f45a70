"""Property-based tests (hypothesis) of everything that reads a user's or a run's files.

The property, for any input: a result, or a `BiasDiscoveryError` (the project's error: the CLI
turns it into a one-line message and exit code 2) with a message. Never another exception:
that would be a traceback in front of a user. Each test has a fixed example budget and is
derandomized, so CI runs the same examples every time (about 20 s in total on 2 cores).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_loop import make_config, run_fake
from typer.testing import CliRunner

from bias_discovery.api import load_run
from bias_discovery.cli import app
from bias_discovery.config import RunConfig, load_run_config
from bias_discovery.data import load_pairs
from bias_discovery.data.loaders import JUDGEBENCH_FILES, REWARDBENCH_FILE
from bias_discovery.errors import BiasDiscoveryError


def budget(n: int) -> settings:
    """`n` examples, the same ones on every run (derandomized, no example database)."""
    return settings(
        max_examples=n,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def result_or_project_error(call: Callable[[], Any]) -> Any:
    """Run `call`: its result, or None after a BiasDiscoveryError with a message; anything
    else fails the test (it propagates)."""
    try:
        return call()
    except BiasDiscoveryError as exc:
        assert str(exc).strip(), f"{type(exc).__name__} without a message"
        return None


# --------------------------------------------------------------------------------------------
# Strategies: values as they come out of JSON, YAML and hand-edited files
# --------------------------------------------------------------------------------------------

PAIR_FIELDS = [
    "id",
    "question",
    "prompt",
    "chosen",
    "rejected",
    "response_A",
    "response_B",
    "label",
    "domain",
    "source",
    "meta",
    "pair_id",
    "subset",
    "section",
    "original_id",
    "response_model",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.sampled_from(["A>B", "B>A", "A=B", "", " ", "x", "math", "livecodebench", "Chat"]),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
records = st.dictionaries(st.sampled_from(PAIR_FIELDS) | st.text(max_size=6), json_values, max_size=8)
"""A row: mostly the fields the loaders look for, with values of any JSON type."""


def good_row(i: int) -> dict[str, Any]:
    return {"id": f"p{i}", "question": f"q{i}", "chosen": f"right {i}", "rejected": f"wrong {i}"}


rows = st.lists(st.one_of(records, st.integers(0, 50).map(good_row)), max_size=6)

line_garbage = st.one_of(
    st.binary(max_size=40),
    st.just(b"\xff\xfe\x00"),
    st.just(b"[" * 3000),  # deeper than json's recursion limit
    st.text(max_size=30).map(lambda t: t.encode("utf-8")),
)


def jsonl_bytes(items: list[Any]) -> bytes:
    return b"".join(
        (json.dumps(item).encode() if not isinstance(item, bytes) else item.replace(b"\n", b" ")) + b"\n"
        for item in items
    )


# --------------------------------------------------------------------------------------------
# Data loaders
# --------------------------------------------------------------------------------------------


@budget(60)
@given(lines=st.lists(st.one_of(records, st.integers(0, 50).map(good_row), line_garbage), max_size=8))
def test_jsonl_loader(tmp_path: Path, lines: list[Any]) -> None:
    path = tmp_path / "pairs.jsonl"
    path.write_bytes(jsonl_bytes(lines))
    result_or_project_error(lambda: load_pairs(path))
    # skipping: every non-blank line is a pair or a named bad row, and nothing raises
    bad_rows: list[str] = []
    pairs = load_pairs(path, bad_rows=bad_rows)
    non_blank = sum(1 for line in path.read_bytes().split(b"\n") if line.strip(b" \t\r"))  # JSON's whitespace
    assert len(pairs) + len(bad_rows) == non_blank
    assert all(message.startswith((f"{path}:", "duplicate pair id")) for message in bad_rows)
    assert all(p.chosen.strip() != p.rejected.strip() for p in pairs)


@budget(40)
@given(document=st.one_of(rows, json_values, st.binary(max_size=60)))
def test_json_loader(tmp_path: Path, document: Any) -> None:
    path = tmp_path / "pairs.json"
    path.write_bytes(document if isinstance(document, bytes) else json.dumps(document).encode())
    result_or_project_error(lambda: load_pairs(path))
    result_or_project_error(lambda: load_pairs(path, bad_rows=[]))


parquet_columns = st.dictionaries(
    st.sampled_from(
        ["id", "question", "prompt", "chosen", "rejected", "response_A", "response_B", "label", "domain", "source"]
    ),
    st.one_of(
        st.lists(st.text(max_size=8) | st.none(), min_size=3, max_size=3),
        st.lists(st.integers(-5, 5) | st.none(), min_size=3, max_size=3),
        st.lists(st.sampled_from(["A>B", "B>A", "x"]), min_size=3, max_size=3),
    ),
    max_size=6,
)


@budget(30)
@given(columns=parquet_columns, garbage=st.none() | st.binary(max_size=40))
def test_parquet_loader(tmp_path: Path, columns: dict[str, list[Any]], garbage: bytes | None) -> None:
    path = tmp_path / "pairs.parquet"
    if garbage is not None:
        path.write_bytes(garbage)
    else:
        pq.write_table(pa.table(columns) if columns else pa.table({"x": [1, 2, 3]}), path)
    result_or_project_error(lambda: load_pairs(path))
    result_or_project_error(lambda: load_pairs(path, bad_rows=[]))


def judgebench_row(i: int) -> dict[str, Any]:
    return {
        "pair_id": f"jb-{i}",
        "original_id": i,
        "source": "livebench-math",
        "question": f"q{i}",
        "response_model": "m",
        "response_A": f"A{i}",
        "response_B": f"B{i}",
        "label": "A>B",
    }


def rewardbench_row(i: int) -> dict[str, Any]:
    return {
        "id": i,
        "prompt": f"p{i}",
        "chosen": f"c{i}",
        "chosen_model": "m1",
        "rejected": f"r{i}",
        "rejected_model": "m2",
        "subset": "math-prm",
        "section": "Reasoning",
    }


def mutated(base: Callable[[int], dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """A well-formed row of a hub-style format with some fields replaced, dropped or added."""
    return st.builds(
        lambda i, changes, dropped: {k: v for k, v in {**base(i), **changes}.items() if k not in dropped},
        st.integers(0, 20),
        st.dictionaries(st.sampled_from(PAIR_FIELDS), json_values, max_size=3),
        st.sets(st.sampled_from(PAIR_FIELDS), max_size=2),
    )


@budget(40)
@given(
    gpt=st.lists(mutated(judgebench_row) | line_garbage, max_size=5),
    claude=st.lists(mutated(judgebench_row), max_size=4),
    rewardbench=st.lists(mutated(rewardbench_row) | line_garbage, max_size=6),
)
def test_hub_style_files_in_a_data_dir(
    tmp_path: Path, gpt: list[Any], claude: list[Any], rewardbench: list[Any]
) -> None:
    """JudgeBench's response_A/response_B/label rows and RewardBench's rows, as the local copy
    of the named sets holds them."""
    for relative, lines in (
        (JUDGEBENCH_FILES["gpt"], gpt),
        (JUDGEBENCH_FILES["claude"], claude),
        (REWARDBENCH_FILE, rewardbench),
    ):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_bytes(jsonl_bytes(lines))
    for name in ("judgebench", "judgebench:gpt", "rewardbench", "rewardbench:chat"):
        result_or_project_error(lambda name=name: load_pairs(name, data_dir=tmp_path))
        bad_rows: list[str] = []
        result_or_project_error(
            lambda name=name, bad_rows=bad_rows: load_pairs(name, data_dir=tmp_path, bad_rows=bad_rows, limit=3, seed=1)
        )


@budget(30)
@given(hub_rows=st.lists(st.one_of(mutated(judgebench_row), mutated(rewardbench_row), records, scalars), max_size=5))
def test_hub_data_sets(monkeypatch: pytest.MonkeyPatch, hub_rows: list[Any]) -> None:
    """The same formats from the hub (`datasets.load_dataset`, stood in for), objects of any type."""
    module = types.ModuleType("datasets")
    module.load_dataset = lambda repo, split=None: hub_rows  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "datasets", module)
    for name in ("judgebench:gpt", "rewardbench", "hf:someone/pairs"):
        result_or_project_error(lambda name=name: load_pairs(name))
        result_or_project_error(lambda name=name: load_pairs(name, bad_rows=[]))


# --------------------------------------------------------------------------------------------
# Config loader and --set
# --------------------------------------------------------------------------------------------

CONFIG_KEYS = [
    "name",
    "seed",
    "max_iterations",
    "seed_library",
    "target",
    "teacher",
    "target.model",
    "target.base_url",
    "target.max_concurrency",
    "data",
    "data.target",
    "data.test_limit",
    "data.skip_bad_rows",
    "judge",
    "judge.positions",
    "judge.seed",
    "judge.reasoning_chars",
    "judge.prompt",
    "validate",
    "validate.alpha",
    "validate.sequential.looks",
    "validate.checker",
    "validate.checker.spec",
    "merge.top_k",
    "embedder",
    "perturb.max_tokens",
    "x",
    "x.y",
    "",
    ".",
    "a..b",
]
override_values = st.one_of(
    st.sampled_from(
        [
            "2",
            "-1",
            "0.5",
            "null",
            "true",
            "[0.5, 1.0]",
            "[1, 2",
            "{a: 1}",
            "{spec: llamacpp/x, 1: 2}",
            "llamacpp/smollm2",
            "openai/x",
            "nosuch/x",
            "'",
            '"',
            "!!python/object:os.system",
            "*",
            "&a [*a]",
            "judge_pairwise",
            "/nonexistent/template.txt",
            "a: b: c",
        ]
    ),
    st.text(max_size=15),
)
overrides = st.lists(
    st.builds(
        lambda k, v, sep: f"{k}{sep}{v}",
        st.sampled_from(CONFIG_KEYS) | st.text(max_size=8),
        override_values,
        st.sampled_from(["=", "=", ":", ""]),
    ),
    max_size=4,
)


@pytest.fixture(scope="module")
def base_config_text(tmp_path_factory: pytest.TempPathFactory) -> str:
    return make_config(tmp_path_factory.mktemp("config")).to_yaml()


@budget(80)
@given(
    sets=overrides,
    edit=st.one_of(st.none(), st.binary(max_size=50), st.text(max_size=60), json_values.map(yaml.safe_dump)),
    appended=st.booleans(),
)
def test_config_loader_with_overrides(
    tmp_path: Path, base_config_text: str, sets: list[str], edit: Any, appended: bool
) -> None:
    """A valid config (or one edited by hand: replaced or with text appended, bytes of any
    kind) with --set overrides of real and made-up keys."""
    path = tmp_path / "config.yaml"
    if edit is None:
        path.write_text(base_config_text)
    elif isinstance(edit, bytes):
        path.write_bytes(base_config_text.encode() + edit if appended else edit)
    else:
        path.write_text(base_config_text + "\n" + edit if appended else edit)
    config = result_or_project_error(lambda: load_run_config(path, sets))
    assert config is None or isinstance(config, RunConfig)


# --------------------------------------------------------------------------------------------
# Run-directory readers: library show / diff, report, status on damaged files
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished fake run (every file a run has: config, run.json, events, libraries,
    iteration files, baseline, placebo, checkpoints)."""
    base = tmp_path_factory.mktemp("fuzz-run")
    rd, _, _ = run_fake(base, make_config(base, max_iterations=2))
    return rd.root


@pytest.fixture(scope="module")
def reviewed_run(finished_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`finished_run` with two reviews of its discovered bias (reviews.jsonl is a file too)."""
    root = tmp_path_factory.mktemp("fuzz-reviewed") / "run"
    shutil.copytree(finished_run, root)
    run = load_run(root)
    run.review("d1-expert-citation-bias", "confirmed", note="fuzzed", reviewer="fuzz")
    run.review("d1-expert-citation-bias", "unsure", reviewer="fuzz")
    return root


def damage(data: bytes, how: str, where: float, garbage: bytes) -> bytes:
    at = int(len(data) * where)
    if how == "truncate":
        return data[:at]
    if how == "overwrite":
        return data[:at] + garbage + data[at + len(garbage) :]
    if how == "insert":
        return data[:at] + garbage + data[at:]
    if how == "empty":
        return b""
    return garbage  # replace


runner = CliRunner()
BROWSE = (
    lambda run, out: ["library", "show", str(run)],
    lambda run, out: ["library", "show", f"{run}@1", "--json"],
    lambda run, out: ["library", "diff", f"{run}@0", str(run)],
    lambda run, out: ["status", str(run)],
    lambda run, out: ["status", str(run), "--json"],
)
REPORT = (lambda run, out: ["report", str(run), "--out", str(out)],)
BIAS_VIEWS = (
    lambda run, out: ["library", "show", str(run), "d1-expert-citation-bias"],
    lambda run, out: ["library", "show", str(run), "d1-expert-citation-bias", "--json", "--examples", "5"],
    lambda run, out: ["report", str(run), "--bias", "d1-expert-citation-bias", "--out", str(out)],
)

damages = {
    "victims": st.lists(st.integers(0, 10_000), min_size=1, max_size=2),
    "how": st.sampled_from(["truncate", "overwrite", "insert", "empty", "replace"]),
    "where": st.floats(0.0, 1.0),
    "garbage": st.one_of(
        st.binary(min_size=1, max_size=30),
        st.sampled_from([b"\xff\xfe", b"\n{\n", b"null", b"[]", b'{"x": 1}', b"\x00" * 8]),
    ),
}


def check_on_damaged_copy(
    tmp_path: Path,
    finished_run: Path,
    commands: tuple[Callable[[Path, Path], list[str]], ...],
    victims: list[int],
    how: str,
    where: float,
    garbage: bytes,
    *,
    warnings_first: bool = False,
) -> None:
    """Damage one or two files of a copy of the run, then run each command on it in-process:
    exit 0, or exit 2 with a one-line "error: ..." (a traceback would be exit 1); with
    `warnings_first`, after "warning: ..." lines about what was damaged on the way."""
    work = Path(tempfile.mkdtemp(dir=tmp_path))  # tmp_path is shared by the examples
    run = work / "run"
    shutil.copytree(finished_run, run)
    files = sorted(p for p in run.rglob("*") if p.is_file())
    for victim in victims:
        path = files[victim % len(files)]
        path.write_bytes(damage(path.read_bytes(), how, where, garbage))
    for command in commands:
        args = command(run, work / "report.html")
        result = runner.invoke(app, args)
        assert result.exit_code in (0, 2), (args, result.exit_code, result.output)
        if result.exception is not None:
            assert isinstance(result.exception, SystemExit), (args, repr(result.exception))
        if result.exit_code == 2:
            stderr = result.stderr
            if warnings_first:
                stderr = stderr[stderr.find("error: ") :] if "error: " in stderr else stderr
                assert result.stderr.startswith(("warning: ", "error: ")), (args, result.stderr)
            assert stderr.startswith("error: ") and len(stderr.strip()) > len("error:"), (args, result.stderr)


@pytest.mark.slow
@budget(50)
@given(**damages)
def test_library_and_status_on_damaged_files(
    tmp_path: Path, finished_run: Path, victims: list[int], how: str, where: float, garbage: bytes
) -> None:
    check_on_damaged_copy(tmp_path, finished_run, BROWSE, victims, how, where, garbage)


@pytest.mark.slow
@budget(15)
@given(**damages)
def test_report_on_damaged_files(
    tmp_path: Path, finished_run: Path, victims: list[int], how: str, where: float, garbage: bytes
) -> None:
    check_on_damaged_copy(tmp_path, finished_run, REPORT, victims, how, where, garbage)


@pytest.mark.slow
@budget(25)
@given(**damages)
def test_bias_views_on_damaged_files(
    tmp_path: Path, reviewed_run: Path, victims: list[int], how: str, where: float, garbage: bytes
) -> None:
    """`library show RUN BIAS` and the bias page read every record of the bias (its cases, the
    teacher's identifications, the merges, the validation rewrites and judgments, the reviews):
    damaged, they are left out with a warning, or the command stops with an error naming them."""
    check_on_damaged_copy(tmp_path, reviewed_run, BIAS_VIEWS, victims, how, where, garbage, warnings_first=True)
