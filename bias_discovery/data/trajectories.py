"""Agent trajectories from τ-bench and inspect_ai logs, and the pairs they make.

Two readers turn a source into `TrajectoryItem`s (one agent run on one task, with its
ground-truth outcome when the source has one), and `pairs_from_items` makes the pairs a judge
is scored on: per task, a run with the best outcome against one with the worst, when they
differ (as JudgeBench pairs a correct answer with an incorrect one).

- **τ-bench** (Yao et al., 2024; `sierra-research/tau-bench`, `historical_trajectories/`,
  MIT licence: keep its notice and attribution next to any copy). The file
  `taubench/gpt-4o-airline.json` of a data directory: 200 GPT-4o airline runs, 50 tasks x 4
  trials, each with τ-bench's own reward (1.0: the environment found the task completed). It
  is not shipped with bias-discovery; it is read from the user's data directory, as JudgeBench
  is. 26 tasks have a completed and a failed trial: 26 pairs (`taubench`), chosen = the first
  completed trial, rejected = the first failed one. The task (the pair's `question`) is the
  user's instruction (`info.task.instruction`); the airline policy stays the trajectory's system
  message. Rewards are in `meta` (`chosen_outcome`, `rejected_outcome`, the trials), never in
  the response strings: the pointwise judge's ground truth for each trajectory.
- **inspect_ai `.eval` logs** (a zip: `header.json`, `samples/*.json`): each sample's
  `messages` (text content parts joined; reasoning parts, often redacted, left out; tool-call
  arguments as JSON; a tool's `error` appended to its output) and its first score (`value`, or
  `value["score"]`) as the outcome. Samples of one id over several epochs pair up; a log of one
  epoch reads as items (`read_inspect_log`) but makes no pairs.

Every problem is a `DataError` naming the file, the row (or zip member) and the field.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..errors import DataError, json_problem
from ..io import read_utf8
from .pairs import PreferencePair
from .trajectory import Trajectory

TAUBENCH_FILE = "taubench/gpt-4o-airline.json"
"""τ-bench's historical GPT-4o airline trajectories, relative to the data directory."""

TAUBENCH_SOURCE = "tau-bench airline (gpt-4o), MIT, sierra-research/tau-bench"
"""The provenance every τ-bench pair carries (its `source`): the attribution its licence asks."""

TAUBENCH_URL = "https://github.com/sierra-research/tau-bench/tree/main/historical_trajectories"

BadRow = Callable[[str], None]
"""What to do with a bad row's message: raise it (the default) or record it (`skip_bad_rows`)."""


def _raise(message: str) -> None:
    raise DataError(message)


class TrajectoryItem(BaseModel):
    """One agent run on one task: what a pointwise judge scores against `outcome`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    """The run's id (`<task>-t<trial>`, an inspect sample's `<id>-e<epoch>`)."""
    group: str
    """The task it ran; runs of one group pair up."""
    task: str
    """The task in words (a pair's `question`)."""
    trajectory: Trajectory
    """What the agent and its user, tools and system said."""
    outcome: float | None = None
    """The ground-truth outcome (τ-bench's reward), None when the source has none."""
    domain: str = "agent"
    source: str = ""
    meta: dict[str, Any] = {}


# --------------------------------------------------------------------------------------
# OpenAI-style messages


def openai_trajectory(messages: Any, *, where: str) -> Trajectory:
    """A Trajectory from OpenAI chat messages (τ-bench's `traj`, a user's JSONL): `content`
    None is "", `tool_calls[].function.{name, arguments}` become `ToolCall`s, `type` and
    unknown keys that carry nothing a judge reads (`function_call` None, `refusal` None) go."""
    if not isinstance(messages, list):
        raise DataError(f"{where}: expected a list of messages, got {type(messages).__name__}")
    return Trajectory.parse(
        {"messages": [_openai_message(m, f"{where}: message {i}") for i, m in enumerate(messages)]}, where=where
    )


def _openai_message(message: Any, where: str) -> Any:
    if not isinstance(message, Mapping):
        return message  # Trajectory.parse names the message and what it should be
    out = {k: v for k, v in message.items() if not (k in ("function_call", "refusal", "audio") and v is None)}
    if out.get("content") is None:
        out["content"] = ""
    calls = out.get("tool_calls")
    if calls is None:
        out.pop("tool_calls", None)
    elif isinstance(calls, list):
        out["tool_calls"] = [_openai_call(call, f"{where}: tool call {j}") for j, call in enumerate(calls)]
    return out


def _openai_call(call: Any, where: str) -> Any:
    if not isinstance(call, Mapping) or "function" not in call:
        return call  # already {id, name, arguments}, or refused by the model with its field
    function = call["function"]
    if not isinstance(function, Mapping):
        raise DataError(f"{where}: field 'function' must be an object with 'name' and 'arguments'")
    arguments = function.get("arguments", "")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return {"id": call.get("id", ""), "name": function.get("name"), "arguments": arguments}


# --------------------------------------------------------------------------------------
# τ-bench


def read_taubench(path: Path, *, on_bad: BadRow = _raise) -> list[TrajectoryItem]:
    """The runs of a τ-bench `historical_trajectories` file (a JSON list of `task_id`, `trial`,
    `reward`, `traj`, `info.task.instruction`); a bad run goes to `on_bad`."""
    try:
        data = json.loads(read_utf8(path))
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not JSON: {json_problem(exc)}") from None
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list of τ-bench runs, got {type(data).__name__}")
    items: list[TrajectoryItem] = []
    for index, record in enumerate(data):
        try:
            items.append(_taubench_item(record, f"{path} run {index}"))
        except DataError as exc:
            on_bad(str(exc))
    return items


def _taubench_item(record: Any, where: str) -> TrajectoryItem:
    if not isinstance(record, Mapping):
        raise DataError(f"{where}: expected an object, got {type(record).__name__}")
    for field in ("task_id", "trial", "reward", "traj"):
        if field not in record:
            raise DataError(f"{where}: missing field {field!r}")
    reward = record["reward"]
    if isinstance(reward, bool) or not isinstance(reward, (int, float)):
        raise DataError(f"{where}: field 'reward' must be a number, got {reward!r}")
    task = record.get("info", {}).get("task", {}) if isinstance(record.get("info"), Mapping) else {}
    instruction = task.get("instruction") if isinstance(task, Mapping) else None
    if not isinstance(instruction, str) or not instruction.strip():
        raise DataError(f"{where}: missing field 'info.task.instruction' (the task)")
    return TrajectoryItem(
        id=f"taubench-airline-{record['task_id']}-t{record['trial']}",
        group=f"taubench-airline-{record['task_id']}",
        task=instruction,
        trajectory=openai_trajectory(record["traj"], where=f"{where}: field 'traj'"),
        outcome=float(reward),
        domain="airline",
        source=TAUBENCH_SOURCE,
        meta={"task_id": record["task_id"], "trial": record["trial"]},
    )


def load_taubench(data_dir: Path | None, *, on_bad: BadRow = _raise) -> list[PreferencePair]:
    """τ-bench's 26 pairs (a completed against a failed trial of one task) from `data_dir`."""
    if data_dir is None:
        raise DataError(
            f"taubench is read from a local copy, not the hub: pass a data directory (`data_dir`) holding "
            f"{TAUBENCH_FILE} (τ-bench's historical trajectories, MIT: {TAUBENCH_URL})"
        )
    path = data_dir / TAUBENCH_FILE
    if not path.is_file():
        raise DataError(f"data directory {data_dir} has no {TAUBENCH_FILE}: expected the file {path} ({TAUBENCH_URL})")
    return pairs_from_items(read_taubench(path, on_bad=on_bad))


# --------------------------------------------------------------------------------------
# inspect_ai logs


def read_inspect_log(path: Path) -> list[TrajectoryItem]:
    """The samples of an inspect_ai `.eval` log, in the zip's order."""
    try:
        archive = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except zipfile.BadZipFile:
        raise DataError(f"{path}: not an inspect_ai .eval log (not a zip archive)") from None
    with archive:
        header = _zip_json(archive, path, "header.json")
        eval_info = header.get("eval") if isinstance(header, Mapping) else None
        if not isinstance(eval_info, Mapping) or not isinstance(eval_info.get("task"), str):
            raise DataError(f"{path}: header.json: missing field 'eval.task' (is this an inspect_ai log?)")
        task_name = str(eval_info["task"])
        members = sorted(n for n in archive.namelist() if n.startswith("samples/") and n.endswith(".json"))
        return [_inspect_item(_zip_json(archive, path, name), f"{path}: {name}", task_name) for name in members]


def _zip_json(archive: zipfile.ZipFile, path: Path, name: str) -> Any:
    try:
        raw = archive.read(name)
    except KeyError:
        raise DataError(f"{path}: the log has no {name}") from None
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise DataError(f"{path}: {name}: not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: {name}: not JSON: {json_problem(exc)}") from None


def _inspect_item(sample: Any, where: str, task_name: str) -> TrajectoryItem:
    if not isinstance(sample, Mapping):
        raise DataError(f"{where}: expected an object, got {type(sample).__name__}")
    for field in ("id", "messages"):
        if field not in sample:
            raise DataError(f"{where}: missing field {field!r}")
    messages = sample["messages"]
    if not isinstance(messages, list):
        raise DataError(f"{where}: field 'messages' must be a list")
    converted = [_inspect_message(m, f"{where}: message {i}") for i, m in enumerate(messages)]
    trajectory = Trajectory.parse({"messages": converted}, where=where)
    epoch = sample.get("epoch", 1)
    return TrajectoryItem(
        id=f"{sample['id']}-e{epoch}",
        group=str(sample["id"]),
        task=_inspect_task(sample, trajectory),
        trajectory=trajectory,
        outcome=_inspect_score(sample.get("scores")),
        domain=task_name.rsplit("/", 1)[-1],
        source=task_name,
        meta={"sample_id": sample["id"], "epoch": epoch},
    )


def _inspect_text(content: Any) -> str:
    """A message's text: a string, or the `text` parts of a content list (reasoning parts,
    often redacted, and images are left out)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, Mapping) and part.get("type") == "text" and isinstance(part.get("text"), str)
        )
    return ""


def _inspect_message(message: Any, where: str) -> Any:
    if not isinstance(message, Mapping):
        raise DataError(f"{where}: expected an object, got {type(message).__name__}")
    role = message.get("role")
    out: dict[str, Any] = {"role": role, "content": _inspect_text(message.get("content"))}
    if role == "assistant":
        out["tool_calls"] = [
            _inspect_call(c, f"{where}: tool call {j}") for j, c in enumerate(message.get("tool_calls") or [])
        ]
    if role == "tool":
        out["tool_call_id"] = message.get("tool_call_id")
        out["name"] = message.get("function")
        error = message.get("error")
        if isinstance(error, Mapping) and error.get("message"):
            out["content"] = (out["content"] + "\n" if out["content"] else "") + f"Error: {error['message']}"
    return out


def _inspect_call(call: Any, where: str) -> dict[str, Any]:
    if not isinstance(call, Mapping) or not isinstance(call.get("function"), str):
        raise DataError(f"{where}: field 'function' (the tool's name) is missing")
    arguments = call.get("arguments", {})
    return {
        "id": str(call.get("id", "")),
        "name": call["function"],
        "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False),
    }


def _inspect_task(sample: Mapping[str, Any], trajectory: Trajectory) -> str:
    task = _inspect_text(sample.get("input"))
    if not task.strip():
        task = next((m.content for m in trajectory.messages if m.role == "user"), "")
    return task.strip()


def _inspect_score(scores: Any) -> float | None:
    """The first scorer's value as a number (`value["score"]` when the value is an object)."""
    if not isinstance(scores, Mapping) or not scores:
        return None
    first = next(iter(scores.values()))
    value = first.get("value") if isinstance(first, Mapping) else None
    if isinstance(value, Mapping):
        value = value.get("score")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def load_inspect_pairs(path: Path) -> list[PreferencePair]:
    """The pairs of an inspect log: per sample id, its best against its worst epoch."""
    items = read_inspect_log(path)
    pairs = pairs_from_items(items)
    if not pairs:
        raise DataError(
            f"{path}: no pairs: {len(items)} samples, but no sample id has two epochs with different scores "
            "(an inspect log pairs a sample's better epoch with its worse one)"
        )
    return pairs


# --------------------------------------------------------------------------------------
# pairs


def pairs_from_items(items: Iterable[TrajectoryItem]) -> list[PreferencePair]:
    """Per group (task), the first run with the best outcome as chosen and the first with the
    worst as rejected, when the outcomes differ; groups in their first run's order."""
    groups: dict[str, list[TrajectoryItem]] = {}
    for item in items:
        groups.setdefault(item.group, []).append(item)
    return [pair for runs in groups.values() if (pair := _pair(runs)) is not None]


def _pair(runs: Sequence[TrajectoryItem]) -> PreferencePair | None:
    scored = [run for run in runs if run.outcome is not None]
    if len(scored) < 2:
        return None
    best = max(scored, key=lambda r: r.outcome or 0.0)
    worst = min(scored, key=lambda r: r.outcome or 0.0)
    if best.outcome == worst.outcome:
        return None
    return PreferencePair(
        id=best.group,
        question=best.task,
        chosen=best.trajectory.to_response(),
        rejected=worst.trajectory.to_response(),
        domain=best.domain,
        source=best.source,
        kind="trajectory",
        meta={
            "chosen_run": best.id,
            "rejected_run": worst.id,
            "chosen_outcome": best.outcome,
            "rejected_outcome": worst.outcome,
            **{f"chosen_{k}": v for k, v in best.meta.items()},
            **{f"rejected_{k}": v for k, v in worst.meta.items()},
        },
    )


__all__ = [
    "TAUBENCH_FILE",
    "TAUBENCH_SOURCE",
    "TrajectoryItem",
    "load_inspect_pairs",
    "load_taubench",
    "openai_trajectory",
    "pairs_from_items",
    "read_inspect_log",
    "read_taubench",
]
