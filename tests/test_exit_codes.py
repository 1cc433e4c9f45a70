"""Every exit code of `cli/_exit_codes.py`, each produced by a real command line (a process of its
own, against the stub servers), and `--fail-on`: a finding exits 3 on the planted-bias stub and
0 on a null one; a condition the command does not take is a usage error."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kill_anywhere import write_pairs

from bias_discovery.cli._exit_codes import EXIT_CODES, ExitCode, exit_codes_markdown

from helpers import REPO, free_port
from stub_openai import launch, stats

CHILD_ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "fake_sentence_transformers"), str(REPO)]),
}
TRAIT = {
    "id": "planted-trait",
    "name": "Planted Certainty",
    "definition": "The judge prefers an answer that ends by assuring the reader it is certain.",
    "manifestations": ["Ends with an assurance of certainty."],
    "origin": {"kind": "seed", "iteration": 0, "target_model": None, "seed_library": "planted"},
    "evidence": [],
    "validation": None,
    "merged_from": [],
}


def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bias_discovery.cli", *args],
        capture_output=True,
        text=True,
        env=CHILD_ENV,
        cwd=REPO,
        timeout=timeout,
    )


def planted_config(work: Path, url: str, n_test: int = 100, **extra: Any) -> Path:
    """A run on the planted-bias stub whose one seed is the planted trait (validated at
    iteration 0, `validate.seeds`), then one discovery iteration."""
    work.mkdir(parents=True, exist_ok=True)
    library = work / "library.json"
    library.write_text(
        json.dumps(
            {
                "version": 1,
                "name": "planted",
                "iteration": 0,
                "created_at": "2026-01-01T00:00:00+00:00",
                "target_model": None,
                "parent": None,
                "biases": [TRAIT],
            }
        )
    )
    model = {
        "spec": "openai/served",
        "base_url": url,
        "structured_outputs": "vllm",
        "max_concurrency": 8,
        "timeout_s": 60,
    }
    raw: dict[str, Any] = {
        "name": "planted",
        "seed": 3,
        "max_iterations": 1,
        "target": model,
        "teacher": dict(model),
        "seed_library": str(library),
        "data": {
            "target": write_pairs(work / "target.jsonl", 4, "t"),
            "test": write_pairs(work / "test.jsonl", n_test, "p"),
        },
        "merge": {"similarity_threshold": 0.0},
        "validate": {"seeds": True, "n_boot": 200},
        **extra,
    }
    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_the_table_names_every_code_once_and_the_page_lists_them() -> None:
    assert [d.code for d in EXIT_CODES] == list(ExitCode)
    assert len({int(c) for c in ExitCode}) == len(ExitCode)
    page = exit_codes_markdown()
    for doc in EXIT_CODES:
        assert f"| {int(doc.code)} | {doc.name} |" in page


@pytest.mark.slow
def test_fail_on_accepted_exits_with_the_finding_code_on_a_planted_bias_and_0_on_a_null_run(tmp_path: Path) -> None:
    with launch(0.0, "--planted-delta", "0.5", "--planted-error", "0.2", "--planted-salt", "exit") as (url, _):
        planted = cli(
            "run",
            str(planted_config(tmp_path / "p", url)),
            "--run-dir",
            str(tmp_path / "p" / "run"),
            "--quiet",
            "--fail-on",
            "accepted",
        )
    assert planted.returncode == ExitCode.FINDING == 3, planted.stdout + planted.stderr
    assert "fail-on: accepted: 1 bias(es) accepted: planted-trait" in " ".join(planted.stderr.split())
    assert "Traceback" not in planted.stderr
    assert (tmp_path / "p" / "run" / "report.html").exists() or (tmp_path / "p" / "run" / "iter_000").is_dir()
    with launch(0.0, "--planted-delta", "0.0", "--planted-error", "0.2", "--planted-salt", "exit") as (url, _):
        null = cli(
            "run",
            str(planted_config(tmp_path / "n", url)),
            "--run-dir",
            str(tmp_path / "n" / "run"),
            "--quiet",
            "--fail-on",
            "accepted",
        )
    assert null.returncode == ExitCode.OK == 0, null.stdout + null.stderr
    assert "fail-on" not in null.stderr
    # the same finished run, resumed with the condition: the same finding, the same code
    again = cli("resume", str(tmp_path / "p" / "run"), "--quiet", "--fail-on", "accepted")
    assert again.returncode == ExitCode.FINDING, again.stdout + again.stderr


def test_errors_and_usage_exit_2_and_a_wrong_condition_is_a_usage_error(tmp_path: Path) -> None:
    usage = cli("run", "--no-such-flag")
    assert usage.returncode == ExitCode.ERROR == 2
    missing = cli("run", str(tmp_path / "missing.yaml"), "--quiet")
    assert missing.returncode == ExitCode.ERROR and "missing.yaml" in missing.stderr
    wrong = cli("run", str(tmp_path / "missing.yaml"), "--fail-on", "replication-failed")
    assert wrong.returncode == ExitCode.ERROR and "not a condition of this command (it takes: accepted)" in wrong.stderr
    measure = cli(
        "audit",
        "--model",
        "openai/x",
        "--data",
        "demo",
        "--biases",
        "position",
        "--out",
        str(tmp_path / "a"),
        "--fail-on",
        "position-consistence<0.8",
    )
    assert measure.returncode == ExitCode.ERROR and "no audit measure 'position-consistence'" in measure.stderr
    assert not (tmp_path / "a").exists()  # refused before anything ran


def test_check_failed_exits_1(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    raw = yaml.safe_load(Path(REPO / "experiments/quickstart-cpu.yaml").read_text())
    raw["target"] = raw["teacher"] = {"provider": "openai", "model": "smollm2", "base_url": url}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    result = cli("check", str(path), "--set", "data.target_limit=2", "--set", "data.test_limit=2")
    assert result.returncode == ExitCode.CHECK_FAILED == 1, result.stdout + result.stderr
    out = " ".join(result.stdout.split())
    assert "expected over at most" in out and "assumed (not measured): 30% of perturbed target pairs misjudged" in out


def test_ctrl_c_exits_130_and_the_run_stays_resumable(tmp_path: Path) -> None:
    # 1 s a reply (the run makes hundreds, a few rounds at a time): it is still going when SIGINT
    # comes, sent as soon as its first request is in flight. Until interrupts.py, this failed now
    # and then: the signal landed in a weakref callback, which swallowed the KeyboardInterrupt,
    # and the run finished (exit 0) or waited for a held request's deadline (exit 2).
    with launch(1.0) as (url, _):
        config = planted_config(tmp_path, url, n_test=40)
        run_dir = tmp_path / "run"
        process = subprocess.Popen(
            [sys.executable, "-m", "bias_discovery.cli", "run", str(config), "--run-dir", str(run_dir), "--quiet"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=CHILD_ENV,
            cwd=REPO,
            # a shell's background job (`pytest ... &`) ignores SIGINT, and a child inherits that
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        deadline = time.monotonic() + 120
        while stats(url)["in_flight"] == 0 and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)  # the run's loop has sent its first request
        assert process.poll() is None, "the run ended before it sent a request"
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
    assert process.returncode == ExitCode.INTERRUPTED == 130, out + err
    assert f"bias-discovery resume {run_dir}" in " ".join(err.split()) and "Traceback" not in err


FAIL_ON_CONDITIONS = {"accepted": "accepted", "flagged": "flagged", "replication-failed": "replication-failed"}
FAIL_ON_CONDITIONS["threshold"] = "rr<0.5"
"""One --fail-on value of each kind."""


@pytest.mark.parametrize(
    ("command", "takes"),
    [
        (["run", "{tmp}/missing.yaml"], ["accepted"]),
        (["resume", "{tmp}/missing-run"], ["accepted"]),
        (["matrix", "{tmp}/missing.yaml", "--out", "{tmp}/m"], ["accepted"]),
        (["replicate", "{tmp}/missing-run"], ["replication-failed"]),
        (["audit", "--from-log", "{tmp}/missing.jsonl", "--out", "{tmp}/a"], ["flagged", "threshold"]),
    ],
    ids=["run", "resume", "matrix", "replicate", "audit"],
)
def test_fail_on_conditions_parse_per_command(command: list[str], takes: list[str], tmp_path: Path) -> None:
    """Each command takes its own --fail-on conditions: one of another command's is a usage
    error naming what this one takes, before anything runs; its own pass the parse."""
    from typer.testing import CliRunner

    from bias_discovery.cli import app

    args = [a.replace("{tmp}", str(tmp_path)) for a in command]
    for kind, value in FAIL_ON_CONDITIONS.items():
        result = CliRunner().invoke(app, [*args, "--fail-on", value], env={"COLUMNS": "200"})
        said = " ".join(result.output.split())
        if kind in takes:
            assert "not a condition of this command" not in said, (kind, said)
        else:
            assert result.exit_code == ExitCode.ERROR, (kind, said)
            assert f"not a condition of this command (it takes: {', '.join(takes)}" in said, (kind, said)
        assert not (tmp_path / "m").exists() and not (tmp_path / "a").exists()


def test_audit_thresholds_exit_3_when_met_and_0_when_not(tmp_path: Path) -> None:
    """The stub judge always names the first response: the position audit's RR (position
    consistency) is 0, under 0.8 and not under 0."""
    with launch(0.0) as (url, _):

        def audit(condition: str, out: str) -> subprocess.CompletedProcess[str]:
            return cli(
                "audit",
                "--model",
                "openai/served",
                "--base-url",
                url,
                "--data",
                "demo",
                "--biases",
                "position",
                "--limit",
                "8",
                "--out",
                str(tmp_path / out),
                "--quiet",
                "--no-cache",
                "--n-boot",
                "100",
                "--fail-on",
                condition,
            )

        met = audit("position-consistency<0.8", "met")
        unmet = audit("position-consistency<0.0", "unmet")
    assert met.returncode == ExitCode.FINDING, met.stdout + met.stderr
    assert "fail-on: position-consistency<0.8: position has rr = 0" in " ".join(met.stderr.split())
    assert (tmp_path / "met" / "audit.json").is_file()  # outputs are written before the exit
    assert unmet.returncode == ExitCode.OK, unmet.stdout + unmet.stderr


@pytest.mark.slow
def test_a_run_stopped_at_its_budget_exits_4_says_so_and_resumes_with_a_larger_one(tmp_path: Path) -> None:
    from bias_discovery.report.render import render_report

    with launch(0.0) as (url, _):
        config = planted_config(tmp_path, url, n_test=20)
        run_dir = tmp_path / "run"
        stopped = cli(
            "run",
            str(config),
            "--run-dir",
            str(run_dir),
            "--quiet",
            "--set",
            "budget.max_calls=25",
            "--set",
            "teacher.price.input_per_mtok=3",
            "--set",
            "teacher.price.output_per_mtok=15",
        )
        assert stopped.returncode == ExitCode.BUDGET == 4, stopped.stdout + stopped.stderr
        err = " ".join(stopped.stderr.split())
        assert "stopped: budget reached: the next request could take the run past max calls = 25" in err
        assert f"bias-discovery resume {run_dir} --set budget.max_calls=..." in err and "Traceback" not in err
        status = cli("status", str(run_dir))
        headline = " ".join(status.stdout.split())
        assert "planted: stopped: budget reached at stage" in headline and "spent 25 calls" in headline
        state = json.loads((run_dir / "run.json").read_text())
        assert state["status"] == "stopped" and sum(s["calls"] for s in state["spend"].values()) == 25
        assert "Paid" in render_report(run_dir) and "calls paid" in render_report(run_dir)  # `view` shows the spend
        refused = cli("resume", str(run_dir), "--quiet", "--set", "seed=4")
        assert refused.returncode == ExitCode.ERROR and "only its budget may change" in " ".join(refused.stderr.split())
        resumed = cli("resume", str(run_dir), "--quiet", "--set", "budget.max_calls=100000")
    assert resumed.returncode == ExitCode.OK, resumed.stdout + resumed.stderr
    out = " ".join(resumed.stdout.split())
    assert "paid (every session of the run; calls answered by the call cache cost nothing):" in out
    assert "teacher:" in out and "$" in out
    assert "max_calls: 100000" in (run_dir / "config.yaml").read_text()  # the new budget is the run's
