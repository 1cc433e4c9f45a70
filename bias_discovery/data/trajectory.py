"""An agent's trajectory as a response: chat messages with tool calls, and how a judge reads them.

A trajectory is one more kind of response (`PreferencePair.kind == "trajectory"`), not a
second pipeline: a pair's `chosen` / `rejected` strings hold the canonical JSON of a
`Trajectory` (`Trajectory.to_response`), its `question` holds the task, and records, caches
and exports keep storing strings. Whatever reads a trajectory response parses it back with
`Trajectory.from_response`; a judge reads `render_transcript`'s text, never the JSON.

The canonical JSON is `json.dumps` with sorted keys, compact separators and no ASCII escaping,
of the model without its defaults (no empty `tool_calls`, no `tool_call_id`/`name`/`outcome`
of None), so `Trajectory.from_response(s).to_response() == s` for every canonical `s`:
a rewrite that keeps a message keeps its bytes.

A trajectory is checked when it is built: a tool reply must answer a call of an earlier
assistant message that no other reply answered yet (τ-bench's logs reuse a call id after
its reply, so ids are matched in order, not as a set), a role must be one of the four, and
there must be at least one assistant message. A violation is a `DataError` saying which
message (0-based index) and which field.

The ground-truth outcome (τ-bench's reward) may ride on a `Trajectory`, but loaders keep it
out of the response strings (in the pair's `meta`): a string a teacher rewrites or a judge's
cache keys on should not carry its label.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..errors import DataError

Role = Literal["system", "user", "assistant", "tool"]
"""The roles of an OpenAI-style chat; anything else is refused."""

ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")


class ToolCall(BaseModel):
    """One call an assistant message makes: its id, the tool's name and its arguments as the
    agent wrote them (a JSON string, kept byte for byte: the action check compares it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    """The call's id; a tool reply names it in `tool_call_id`."""
    name: str = Field(min_length=1)
    """The tool called."""
    arguments: str = ""
    """The arguments, as the agent wrote them (usually a JSON object)."""


class TrajectoryMessage(BaseModel):
    """One message of a trajectory: a system prompt (the policy), a user turn, an assistant
    turn (text, tool calls or both) or a tool's reply to one call."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Role
    """Who speaks: system, user, assistant or tool."""
    content: str = ""
    """The text (an assistant message that only calls tools has none: "")."""
    tool_calls: tuple[ToolCall, ...] = ()
    """Assistant messages: the tools it calls, in order."""
    tool_call_id: str | None = None
    """Tool messages: the id of the call this replies to."""
    name: str | None = None
    """Tool messages: the tool that replied (optional)."""

    @model_validator(mode="after")
    def _fields_fit_the_role(self) -> TrajectoryMessage:
        if self.tool_calls and self.role != "assistant":
            raise ValueError(f"field 'tool_calls': only an assistant message calls tools, not a {self.role} message")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("field 'tool_call_id': a tool message must name the call it replies to")
        if self.role != "tool" and self.tool_call_id is not None:
            raise ValueError(f"field 'tool_call_id': only a tool message replies to a call, not a {self.role} message")
        return self


class Trajectory(BaseModel):
    """An agent's run on one task: its messages and, when known, the ground-truth outcome
    (τ-bench's reward: 1.0 completed, 0.0 failed)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    messages: tuple[TrajectoryMessage, ...]
    """The chat, in order."""
    outcome: float | None = None
    """The ground-truth outcome when the source has one; None otherwise."""

    @model_validator(mode="after")
    def _consistent(self) -> Trajectory:
        pending: Counter[str] = Counter()
        for index, message in enumerate(self.messages):
            if message.role == "assistant":
                pending.update(call.id for call in message.tool_calls)
            elif message.role == "tool":
                call_id = message.tool_call_id or ""
                if pending[call_id] <= 0:
                    raise ValueError(
                        f"message {index}: field 'tool_call_id' is {call_id!r}, but no earlier assistant message "
                        "has an unanswered tool call with that id (a tool reply with no matching call)"
                    )
                pending[call_id] -= 1
        if not any(message.role == "assistant" for message in self.messages):
            raise ValueError("the trajectory has no assistant message (nothing to judge)")
        return self

    def to_response(self) -> str:
        """The canonical JSON of this trajectory: what a pair's `chosen`/`rejected` holds."""
        return json.dumps(
            self.model_dump(mode="json", exclude_defaults=True),
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
        )

    @classmethod
    def from_response(cls, text: str, *, where: str = "trajectory") -> Trajectory:
        """Parse a trajectory response (canonical or not: an object with `messages`, or a bare
        list of messages). Anything else is a `DataError` that starts with `where`."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DataError(
                f"{where}: not a trajectory's JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
            ) from None
        if isinstance(data, list):
            data = {"messages": data}
        return cls.parse(data, where=where)

    @classmethod
    def parse(cls, data: Any, *, where: str = "trajectory") -> Trajectory:
        """Validate `data` (a mapping with `messages`) into a Trajectory, or raise a `DataError`
        that starts with `where` and names the message and field at fault."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise DataError(f"{where}: {_validation_problem(exc)}") from None

    @property
    def policy(self) -> str:
        """The system messages' text (τ-bench: the domain policy), joined; "" without one."""
        return "\n\n".join(m.content for m in self.messages if m.role == "system")

    @property
    def final_message(self) -> str:
        """The text of the last assistant message that has text ("" when none has)."""
        for message in reversed(self.messages):
            if message.role == "assistant" and message.content.strip():
                return message.content
        return ""

    def actions(self) -> tuple[tuple[str, str, str], ...]:
        """What the agent did and saw, in order: ("call", name, arguments) for each tool call
        and ("output", name, content) for each tool reply. Two trajectories with equal actions
        differ only in what the agent and user said."""
        out: list[tuple[str, str, str]] = []
        for message in self.messages:
            out.extend(("call", call.name, call.arguments) for call in message.tool_calls)
            if message.role == "tool":
                out.append(("output", message.name or "", message.content))
        return tuple(out)


def _validation_problem(exc: ValidationError) -> str:
    """The first problem of a ValidationError in words: the message index and field."""
    error = exc.errors()[0]
    loc = [str(part) for part in error["loc"]]
    message = str(error["msg"]).removeprefix("Value error, ")
    if message.startswith("message "):  # ours, already located
        return message
    place = ""
    if len(loc) >= 2 and loc[0] == "messages":
        place = f"message {loc[1]}: "
        rest = loc[2:]
        if rest and rest[0] == "tool_calls" and len(rest) >= 2:
            place += f"tool call {rest[1]}: "
            rest = rest[2:]
        if error["type"] == "literal_error" and rest == ["role"]:
            return f"{place}field 'role' is {error.get('input')!r}; expected one of " + ", ".join(ROLES)
        if rest:
            place += f"field {'.'.join(rest)!r}: "
    elif loc:
        place = f"field {'.'.join(loc)!r}: "
    return f"{place}{message}"


def render_transcript(trajectory: Trajectory, *, include_system: bool = False) -> str:
    """The transcript a judge reads: one block per message, headed by its role, tool calls with
    their names and arguments, tool replies with the tool's name and output.

    The system message (the policy) is left out by default: a judge prompt gives the policy
    once, before the transcripts (`${policy}`), so a pair's two trajectories and every request
    of a run share it as a prefix. `include_system` puts it in, as the first block."""
    blocks: list[str] = []
    for message in trajectory.messages:
        if message.role == "system":
            if include_system:
                blocks.append(f"[system]\n{message.content}")
            continue
        if message.role == "tool":
            blocks.append(f"[tool output: {message.name or message.tool_call_id}]\n{message.content}")
            continue
        lines = [f"[{message.role}]"]
        if message.content:
            lines.append(message.content)
        lines.extend(f"[tool call: {call.name}] {call.arguments}" for call in message.tool_calls)
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def is_trajectory_response(text: str) -> bool:
    """Whether `text` parses as a trajectory response (a cheap look before `from_response`)."""
    try:
        Trajectory.from_response(text)
    except DataError:
        return False
    return True


__all__ = [
    "ROLES",
    "Role",
    "ToolCall",
    "Trajectory",
    "TrajectoryMessage",
    "is_trajectory_response",
    "render_transcript",
]
