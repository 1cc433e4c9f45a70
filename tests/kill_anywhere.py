"""Kill a discovery run at random moments, resume it until it finishes, compare with a run
nobody killed: the machinery of the randomized kill test (tests/test_kill_anywhere.py) and of
`benchmarks/kill_anywhere.py`.

Everything goes through the CLI, as a user would: `bias-discovery run CONFIG --run-dir D`,
SIGKILL after a delay drawn uniformly over the reference run's wall time (for one trial in four,
over its first second), then `bias-discovery resume D` (itself killed at a random moment with probability
`resume_kill_share`, up to `max_resume_kills` times) until a resume exits 0 (a run killed before
it wrote its config.yaml started nothing: it is run again, as its error message says). Every artifact the run
computes (`RunDir.outputs()`: every file but the logs, the lock and the SQLite files, with the
`cached` flags of calls and the run's timings dropped) must equal the reference's, byte for byte,
and no command may print a traceback.

Given a `cli_forks.ForkServer`, the commands are forked from an interpreter that has done the
CLI's imports once (most of a fresh process's CPU on these small runs); the reference run and
the first-second kills (which land in the imports) still start fresh interpreters, so the
forked sessions are compared with a process of another hash seed.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cli_forks import ForkServer

REPO = Path(__file__).resolve().parents[1]

VOLATILE_KEYS = {
    "cached",
    "time",
    "started_at",
    "updated_at",
    "finished_at",
    "elapsed_s",
    "seconds",
    "wall_s",
    "cached_calls",
    "created_at",
    "duration_s",
}
"""Fields that say when or how (from the call cache) a record was made, not what it holds."""


def write_pairs(path: Path, n: int, prefix: str) -> str:
    """`n` synthetic preference pairs (four domains) as JSONL."""
    domains = ["math", "knowledge", "reasoning", "code"]
    with path.open("w") as handle:
        for i in range(n):
            handle.write(
                json.dumps(
                    {
                        "id": f"{prefix}{i:04d}",
                        "question": f"{prefix} question {i}: which answer is right?",
                        "chosen": f"The right answer to {prefix} question {i}, explained.",
                        "rejected": f"A wrong answer to {prefix} question {i}, explained.",
                        "domain": domains[i % 4],
                    }
                )
                + "\n"
            )
    return str(path)


PRICE = {"input_per_mtok": 3.0, "output_per_mtok": 15.0}
"""A hosted model's price (dollars per million tokens), for runs that count dollars."""


def stub_config(
    path: Path,
    base_url: str,
    *,
    pipeline: str,
    n_target: int = 16,
    n_test: int = 60,
    embedder: str | None = None,
    priced: bool = False,
    probes: bool = True,
) -> Path:
    """A run on the stub server in both roles: one seed validated on the test pairs, then one
    iteration (the stub names every mistake "x", which Merge folds into a seed, so the iteration
    ends with an empty candidate set). `priced`: both roles carry `PRICE`. `probes` False: no
    constraint probes (`constraint_probe`), so every call the stub answers is one the run made."""
    import yaml

    data_dir = path.parent
    model: dict[str, Any] = {
        "spec": "openai/served",
        "base_url": base_url,
        "structured_outputs": "vllm",
        "max_concurrency": 8,
        "timeout_s": 60,
    }
    if priced:
        model["price"] = dict(PRICE)
    if not probes:
        model["constraint_probe"] = False
    raw: dict[str, Any] = {
        "name": "kill-anywhere",
        "pipeline": pipeline,
        "max_iterations": 1,
        "seed": 7,
        "target": model,
        "teacher": dict(model),
        "data": {
            "target": write_pairs(data_dir / "target.jsonl", n_target, "t"),
            "test": write_pairs(data_dir / "test.jsonl", n_test, "p"),
        },
        "merge": {"similarity_threshold": 0.0},
        "validate": {"n_boot": 200, "seeds": True, "max_candidates": 1},
    }
    if embedder:
        raw["embedder"] = {"model": embedder}
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def normalized(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: normalized(v) for k, v in value.items() if k not in VOLATILE_KEYS}
    if isinstance(value, list):
        return [normalized(v) for v in value]
    return value


def artifacts(run_dir: Path) -> dict[str, Any]:
    """Every computed file of a run, its volatile fields dropped (JSON and JSONL parsed)."""
    from bias_discovery.run import RunDir

    out: dict[str, Any] = {}
    for name, data in RunDir(run_dir).outputs().items():
        text = data.decode("utf-8")
        if name.endswith(".jsonl"):
            out[name] = [normalized(json.loads(line)) for line in text.splitlines() if line.strip()]
        elif name.endswith(".json"):
            out[name] = normalized(json.loads(text))
        else:
            out[name] = text
    return out


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "bias_discovery.cli", *args]


@dataclass
class Trial:
    seed: int
    kill_at: float
    kills: int = 0
    resumes: int = 0
    finished: bool = False
    tracebacks: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    """Resumes that exited non-zero (their last line), in order."""
    differing: list[str] = field(default_factory=list)
    """Artifacts that differ from the reference (or exist on one side only)."""

    @property
    def ok(self) -> bool:
        return self.finished and not self.tracebacks and not self.differing


def _spawn(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)


def _start(args: list[str], env: dict[str, str], forks: ForkServer | None) -> Any:
    """`bias-discovery ARGS`, forked by `forks` when given, else in a fresh interpreter (a
    `Popen` either way, as far as the trials use one). A forked command has the server's
    environment: an `env` that sets a variable otherwise is refused, not ignored."""
    if forks is None:
        return _spawn(_command(*args), env)
    unlike = sorted(k for k, v in env.items() if v != os.environ.get(k) and forks.env.get(k) != v)
    if unlike:
        raise ValueError(f"the fork server was started without this command's environment: {unlike}")
    return forks.spawn(args)


def _finish(args: list[str], env: dict[str, str], forks: ForkServer | None) -> tuple[int, str, str]:
    """`bias-discovery ARGS` to its end: (exit code, stdout, stderr)."""
    process = _start(args, env, forks)
    try:
        out, err = process.communicate(timeout=900)
    finally:
        if process.poll() is None:
            process.kill()
    return int(process.returncode), out, err


def _kill_after(process: Any, delay: float) -> tuple[bool, str]:
    """SIGKILL `process` after `delay` seconds unless it ends first; (killed, output)."""
    try:
        out, err = process.communicate(timeout=delay)
        return False, out + err
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGKILL)
        out, err = process.communicate()
        return True, out + err


def run_trial(
    config: Path,
    run_dir: Path,
    reference: dict[str, Any],
    *,
    seed: int,
    wall: float,
    resume_kill_share: float = 0.3,
    max_resume_kills: int = 2,
    max_resumes: int = 8,
    env: dict[str, str] | None = None,
    forks: ForkServer | None = None,
) -> Trial:
    """One trial: run, killed at a random moment, resumed until finished, compared. With
    `forks`, `wall` is a forked run's, and every command but a first-second kill's is forked."""
    rng = random.Random(seed)
    full_env = {**os.environ, **(env or {})}
    # one trial in four kills in the first second (start-up: imports, config, lock, first
    # checkpoint), the rest anywhere in the run
    first_second = seed % 4 == 0
    trial = Trial(seed=seed, kill_at=round(rng.uniform(0.0, min(1.0, wall) if first_second else wall), 3))
    run_args = ["run", str(config), "--run-dir", str(run_dir), "--quiet"]
    killed, output = _kill_after(_start(run_args, full_env, None if first_second else forks), trial.kill_at)
    trial.kills += killed
    if "Traceback" in output:
        trial.tracebacks.append(output[-3000:])
    if not killed:  # finished before the kill: still compared
        trial.finished = True
    resume_kills = 0
    while not trial.finished and trial.resumes < max_resumes:
        trial.resumes += 1
        # killed before it wrote its config (in its imports): nothing was started, so the user runs it again
        started = (run_dir / "config.yaml").is_file()
        again = ("resume", str(run_dir)) if started else ("run", str(config), "--run-dir", str(run_dir))
        process = _start([*again, "--quiet"], full_env, forks)
        if resume_kills < max_resume_kills and rng.random() < resume_kill_share:
            killed, output = _kill_after(process, rng.uniform(0.0, wall))
            resume_kills += killed
            trial.kills += killed
        else:
            killed, output = _kill_after(process, 600.0)
        if "Traceback" in output:
            trial.tracebacks.append(output[-3000:])
        if killed:
            continue
        if process.returncode == 0:
            trial.finished = True
        else:
            lines = [line for line in output.strip().splitlines() if line.strip()]
            trial.failures.append(f"rc {process.returncode}: {lines[-1] if lines else ''}")
    if trial.finished:
        got = artifacts(run_dir)
        trial.differing = sorted(k for k in set(got) | set(reference) if got.get(k) != reference.get(k))
    return trial


def reference_run(
    config: Path, run_dir: Path, env: dict[str, str] | None = None, forks: ForkServer | None = None
) -> tuple[dict[str, Any], float]:
    """An uninterrupted run (forked by `forks` when given): its artifacts and its wall time."""
    started = time.monotonic()
    code, out, err = _finish(
        ["run", str(config), "--run-dir", str(run_dir), "--quiet"], {**os.environ, **(env or {})}, forks
    )
    wall = time.monotonic() - started
    if code != 0:
        raise RuntimeError(f"the reference run exited {code}:\n{out}\n{err}")
    return artifacts(run_dir), wall


def summary_line(trial: Trial) -> str:
    state = (
        "ok" if trial.ok else ("unfinished" if not trial.finished else "differs" if trial.differing else "traceback")
    )
    extra = f" differing={trial.differing}" if trial.differing else ""
    extra += f" failures={trial.failures}" if trial.failures else ""
    return f"seed {trial.seed}: kill at {trial.kill_at:.2f}s, {trial.kills} kill(s), {trial.resumes} resume(s): {state}{extra}"


# --------------------------------------------------------------------------------------
# Stopped at a budget, resumed with a larger one
# --------------------------------------------------------------------------------------

BUDGET_KINDS = ("max_calls", "max_tokens", "max_usd")


def run_spend(run_dir: Path) -> dict[str, float]:
    """The run's spend (run.json), all roles together: calls, tokens, usd."""
    state = json.loads((run_dir / "run.json").read_text())
    roles = state.get("spend") or {}
    return {
        "max_calls": sum(r["calls"] for r in roles.values()),
        "max_tokens": sum(r["prompt_tokens"] + r["completion_tokens"] for r in roles.values()),
        "max_usd": sum(r["usd"] for r in roles.values()),
    }


def paid_twice(run_dir: Path) -> int:
    """Calls the run's cache holds that were paid more than once."""
    import sqlite3

    conn = sqlite3.connect(run_dir / "calls.sqlite")
    try:
        return int(conn.execute("SELECT COUNT(*) FROM calls WHERE paid > 1").fetchone()[0])
    finally:
        conn.close()


@dataclass
class BudgetTrial:
    seed: int
    kind: str
    budgets: list[float] = field(default_factory=list)
    """The budget of each session, in order (None-free: the last session has none)."""
    stops: int = 0
    finished: bool = False
    tracebacks: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    differing: list[str] = field(default_factory=list)
    status_lines: list[str] = field(default_factory=list)
    """`status`'s headline after each stop."""
    spent: dict[str, float] = field(default_factory=dict)
    paid_twice: int = 0

    @property
    def ok(self) -> bool:
        return (
            self.finished
            and not self.tracebacks
            and not self.differing
            and not self.failures
            and self.paid_twice == 0
            and all("stopped: budget reached" in line for line in self.status_lines)
        )


def budget_trial(
    config: Path,
    run_dir: Path,
    reference: dict[str, Any],
    totals: dict[str, float],
    *,
    seed: int,
    max_stops: int = 3,
    env: dict[str, str] | None = None,
    forks: ForkServer | None = None,
) -> BudgetTrial:
    """A run with a budget drawn uniformly below what the whole run pays (`totals`: the reference
    run's spend), stopped by it (exit 4), resumed with a larger budget drawn above the last, up to
    `max_stops` times, then without a limit; compared with the reference."""
    rng = random.Random(seed)
    kind = BUDGET_KINDS[seed % len(BUDGET_KINDS)]
    trial = BudgetTrial(seed=seed, kind=kind)
    full_env = {**os.environ, **(env or {})}
    budget = rng.uniform(0.0, totals[kind])
    args: list[str] = ["run", str(config), "--run-dir", str(run_dir)]
    for session in range(max_stops + 1):
        last = session == max_stops
        value = "null" if last else (str(int(budget)) if kind != "max_usd" else f"{budget:.9f}")
        trial.budgets.append(budget if not last else float("inf"))
        code, out, err = _finish([*args, "--quiet", "--set", f"budget.{kind}={value}"], full_env, forks)
        output = out + err
        if "Traceback" in output:
            trial.tracebacks.append(output[-3000:])
        if code == 0:
            trial.finished = True
            break
        if code != 4:
            trial.failures.append(f"rc {code}: {output.strip().splitlines()[-1:]}")
            break
        trial.stops += 1
        _, status, _ = _finish(["status", str(run_dir)], full_env, forks)
        trial.status_lines.append(" ".join(status.split())[:400])
        args = ["resume", str(run_dir)]
        budget = budget + rng.uniform(0.0, totals[kind] - budget) if budget < totals[kind] else budget * 1.5
    if trial.finished:
        got = artifacts(run_dir)
        trial.differing = sorted(k for k in set(got) | set(reference) if got.get(k) != reference.get(k))
        trial.spent = run_spend(run_dir)
        trial.paid_twice = paid_twice(run_dir)
    return trial


def budget_summary_line(trial: BudgetTrial) -> str:
    state = "ok" if trial.ok else ("unfinished" if not trial.finished else "differs" if trial.differing else "bad")
    return (
        f"seed {trial.seed}: {trial.kind} budgets {[round(b, 6) for b in trial.budgets]}, {trial.stops} stop(s): "
        f"{state}"
        + (f" differing={trial.differing}" if trial.differing else "")
        + (f" failures={trial.failures}" if trial.failures else "")
        + (f" paid_twice={trial.paid_twice}" if trial.paid_twice else "")
    )


# --------------------------------------------------------------------------------------
# Killed after the k-th answered call, with a budget: is what was paid booked?
# --------------------------------------------------------------------------------------


@dataclass
class SpendKillTrial:
    """One budgeted run killed at events (after the server's k-th answer) and resumed until a
    session ends by itself: after every session, the run's booked spend against the calls the
    server answered (`answered`: calls, tokens, dollars at `PRICE`, all sessions)."""

    seed: int
    kind: str
    budget: float
    kills: int = 0
    sessions: int = 0
    exit_code: int | None = None
    mismatches: list[str] = field(default_factory=list)
    """After a session: booked spend that is not what the server answered."""
    over_cap: list[str] = field(default_factory=list)
    """After a session: answered more than the budget allows."""
    tracebacks: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches and not self.over_cap and not self.tracebacks and self.exit_code in (0, 4)


def answered_spend(stub: dict[str, Any]) -> dict[str, float]:
    """The calls the stub answered (its /stats), as a run's `run_spend` counts them."""
    usd = (stub["prompt_tokens"] * PRICE["input_per_mtok"] + stub["completion_tokens"] * PRICE["output_per_mtok"]) / 1e6
    return {
        "max_calls": stub["requests"],
        "max_tokens": stub["prompt_tokens"] + stub["completion_tokens"],
        "max_usd": usd,
    }


def booked_spend(run_dir: Path) -> dict[str, float]:
    """What the run has booked as paid (run.json and the call cache's ledger, as `resume` and
    `status` count it), all roles together."""
    from bias_discovery.run import RunDir

    run = RunDir(run_dir)
    try:
        state = run.read_state()
    except Exception:  # noqa: BLE001  a run.json a kill cut short: the ledger alone
        state = None
    roles = run.spend(state).values()
    return {
        "max_calls": sum(s.calls for s in roles),
        "max_tokens": sum(s.tokens for s in roles),
        "max_usd": sum(s.usd for s in roles),
    }


def _same(a: dict[str, float], b: dict[str, float]) -> bool:
    return (
        a["max_calls"] == b["max_calls"]
        and a["max_tokens"] == b["max_tokens"]
        and abs(a["max_usd"] - b["max_usd"]) < 1e-9
    )


def _wait_for(condition: Any, timeout: float, process: Any = None) -> bool:
    """Poll `condition` until it holds (True), `process` ends, or `timeout` passes (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        if process is not None and process.poll() is not None:
            return bool(condition())
        time.sleep(0.02)
    return bool(condition())


def spend_kill_trial(
    config: Path,
    run_dir: Path,
    base_url: str,
    totals: dict[str, float],
    *,
    seed: int,
    max_kills: int = 2,
    env: dict[str, str] | None = None,
    forks: ForkServer | None = None,
) -> SpendKillTrial:
    """A run with a budget of a random kind drawn below what the whole run pays (`totals`),
    SIGKILLed after the stub's k-th answered call (k drawn at random; the stub withholds every
    later call, so exactly k were answered), once the run has booked them (at most
    `SETTLE_S` seconds: a run that books a call only at a stage's end is killed anyway), and
    resumed with the same budget, up to `max_kills` times, until a session ends by itself
    (exit 4 at the budget, 0 finished). After every session the run's booked spend must equal
    what the stub answered, and what it answered must fit the budget."""
    from bias_discovery.llm.cache import read_spend

    from stub_openai import control, stats

    rng = random.Random(seed)
    kind = BUDGET_KINDS[seed % len(BUDGET_KINDS)]
    budget = rng.uniform(0.2, 0.9) * totals[kind]
    value = str(int(budget)) if kind != "max_usd" else f"{budget:.9f}"
    trial = SpendKillTrial(seed=seed, kind=kind, budget=budget)
    full_env = {**os.environ, **(env or {})}
    stats(base_url, reset=True)
    args: list[str] = ["run", str(config), "--run-dir", str(run_dir)]
    while True:
        trial.sessions += 1
        kill = trial.kills < max_kills
        before = stats(base_url)["requests"]
        # within the calls the budget lets through (a budget of tokens or dollars reserves each
        # request's max_tokens while it is in flight: it lets only a few through on this run)
        most = int(totals["max_calls"] * budget / totals[kind] * 0.6) if kind == "max_calls" else 3
        k = rng.randint(1, max(1, most))
        control(base_url, k if kill else None)
        process = _start([*args, "--quiet", "--set", f"budget.{kind}={value}"], full_env, forks)
        target = before + k
        reached = kill and _wait_for(lambda: stats(base_url)["requests"] >= target, 120.0, process)  # noqa: B023
        if reached and process.poll() is None:

            def settled() -> bool:
                ledger = read_spend(run_dir / "calls.sqlite")
                return sum(s.calls for s in ledger.values()) >= stats(base_url)["requests"]

            _wait_for(settled, SETTLE_S)
            process.send_signal(signal.SIGKILL)
            trial.kills += 1
        out, err = process.communicate(timeout=600)
        control(base_url, None)
        if "Traceback" in out + err:
            trial.tracebacks.append((out + err)[-3000:])
        answered, booked = answered_spend(stats(base_url)), booked_spend(run_dir)
        label = f"session {trial.sessions} ({'killed' if process.returncode == -signal.SIGKILL else f'exit {process.returncode}'})"
        if not _same(answered, booked):
            trial.mismatches.append(f"{label}: booked {booked}, the server answered {answered}")
        if answered[kind] > budget + 1e-12:
            trial.over_cap.append(f"{label}: the server answered {answered[kind]:.6g} {kind}, over {budget:.6g}")
        if process.returncode != -signal.SIGKILL:  # ended by itself: at its budget, finished, or failed
            trial.exit_code = process.returncode
            return trial
        args = ["resume", str(run_dir)]


SETTLE_S = 5.0
"""How long a kill waits for the run to book the calls the stub answered (the call cache commits
within `FLUSH_SECONDS`, 0.2 s): a run that books them only at a stage's end is killed anyway."""


def spend_kill_summary_line(trial: SpendKillTrial) -> str:
    state = "ok" if trial.ok else "bad"
    return (
        f"seed {trial.seed}: {trial.kind} budget {trial.budget:.6g}, {trial.kills} kill(s), {trial.sessions} "
        f"session(s), exit {trial.exit_code}: {state}" + "".join(f"\n  {m}" for m in trial.mismatches + trial.over_cap)
    )
