"""One turn of a trajectory, rewritten: which turn, what the teacher reads, how the rewrite is
spliced back, and the mechanical check that it kept the agent's actions.

A trajectory is a response like any other (`PreferencePair.kind == "trajectory"`), and Perturb
rewrites it as it rewrites an answer, with one difference: the teacher rewrites ONE turn, not
the whole response, and every other message stays byte for byte as it was.

**Which turn** (`PerturbSettings.turn`, recorded on every rewrite as `PerturbedPair.turn`, the
message's 0-based index, and `turn_rule`):

- `final`: the last assistant message that has text (the agent's closing words: where a
  claim of success or an omitted error lives);
- `reasoning`: an assistant message that has text *and* calls a tool (the agent's stated
  reasoning before it acts, as "Gaming the Judge" rewrites it), drawn by a generator keyed on
  the run's seed and the pair's id;
- `any`: any assistant message that has text, drawn the same way.

The choice depends on the pair and the run's seed only, never on the bias, so the placebo
paraphrases the very turn each bias's rewrite changed. A trajectory with no such turn gives an
invalid rewrite (`no_turn`), counted as the other invalid rewrites are.

**What the teacher reads**: the task, the conversation before the turn (as a judge reads it,
`render_transcript`, without the system policy) and the turn itself in the same form: its text,
then one line per tool call, ``[tool call: NAME] ARGUMENTS``. Its reply is read back in that
form: lines of that shape are the turn's tool calls, the rest is its text.

**The action check** is mechanical, with no model: the rewritten trajectory must have every
tool call (name and arguments, in order) and every tool output of the original
(`Trajectory.actions`). A rewrite that changes, drops or adds an action no longer shows the
rejected trajectory's run (its outcome may have changed), so it is dropped and counted as a
rewrite that changed the final answer is (`invalid_reason` ``answer_changed``, `check_method`
``actions``), with what changed in `PerturbedPair.action_change`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..data.trajectory import ToolCall, Trajectory, TrajectoryMessage, render_transcript
from ..errors import DataError
from ..settings.common import TurnRule

__all__ = [
    "Spliced",
    "TurnRule",
    "action_change",
    "as_read",
    "choose_turn",
    "context_before",
    "parse_turn",
    "readable",
    "splice",
    "turn_candidates",
    "turn_text",
    "untouched",
]

_CALL_LINE = re.compile(r"^\[tool call: ([^\]\n]+)\] ?(.*)$")


def has_text(message: TrajectoryMessage) -> bool:
    return message.role == "assistant" and bool(message.content.strip())


def turn_candidates(trajectory: Trajectory, rule: TurnRule) -> list[int]:
    """The indices of the messages `rule` may choose (module docstring), in order."""
    spoken = [i for i, m in enumerate(trajectory.messages) if has_text(m)]
    if rule == "final":
        return spoken[-1:]
    if rule == "reasoning":
        return [i for i in spoken if trajectory.messages[i].tool_calls]
    return spoken


def choose_turn(trajectory: Trajectory, rule: TurnRule, draw: float) -> int | None:
    """The message `rule` rewrites (`draw` in [0, 1): a keyed draw among the candidates); None
    when the trajectory has none."""
    candidates = turn_candidates(trajectory, rule)
    if not candidates:
        return None
    return candidates[min(int(draw * len(candidates)), len(candidates) - 1)]


def turn_text(message: TrajectoryMessage) -> str:
    """A turn as the teacher reads and writes it: its text, then a line per tool call."""
    lines = [message.content] if message.content else []
    lines.extend(f"[tool call: {call.name}] {call.arguments}" for call in message.tool_calls)
    return "\n".join(lines)


def context_before(trajectory: Trajectory, index: int) -> str:
    """The conversation before message `index`, as a judge reads it (no system policy)."""
    before = Trajectory.model_construct(messages=trajectory.messages[:index], outcome=None)
    return render_transcript(before) or "(the turn opens the conversation)"


def parse_turn(text: str) -> tuple[str, list[tuple[str, str]]]:
    """The teacher's rewritten turn: (its text, its tool calls as (name, arguments))."""
    kept: list[str] = []
    calls: list[tuple[str, str]] = []
    for line in text.splitlines():
        match = _CALL_LINE.match(line.strip())
        if match:
            calls.append((match.group(1).strip(), match.group(2).strip()))
        else:
            kept.append(line)
    return "\n".join(kept).strip(), calls


@dataclass(frozen=True)
class Spliced:
    """A rewritten turn put back into its trajectory."""

    response: str
    """The rewritten trajectory's canonical JSON ("" when it does not parse as a trajectory)."""
    text: str
    """The rewritten turn's text."""
    action_change: str | None
    """What the rewrite changed of the agent's actions (None: nothing)."""


def splice(trajectory: Trajectory, index: int, rewrite: str) -> Spliced:
    """`trajectory` with message `index` replaced by the teacher's `rewrite` of it (its text
    and tool-call lines, `parse_turn`), every other message as it was; and what the rewrite
    changed of the actions (`action_change`)."""
    original = trajectory.messages[index]
    content, calls = parse_turn(rewrite)
    ids = [call.id for call in original.tool_calls]
    new_calls = tuple(
        ToolCall(id=ids[k] if k < len(ids) else f"rewrite-{k}", name=name, arguments=arguments)
        for k, (name, arguments) in enumerate(calls)
    )
    kept_calls = [(c.name, c.arguments) for c in original.tool_calls] == calls
    message = original.model_copy(
        update={"content": content, "tool_calls": original.tool_calls if kept_calls else new_calls}
    )
    messages = (*trajectory.messages[:index], message, *trajectory.messages[index + 1 :])
    try:
        rewritten = Trajectory.parse({"messages": [m.model_dump() for m in messages]}, where="rewrite")
    except DataError as exc:
        return Spliced(response="", text=content, action_change=f"the rewrite breaks the trajectory: {exc}")
    rewritten = rewritten.model_copy(update={"outcome": trajectory.outcome})
    return Spliced(response=rewritten.to_response(), text=content, action_change=action_change(trajectory, rewritten))


def action_change(original: Trajectory, rewrite: Trajectory) -> str | None:
    """The first difference between the two trajectories' actions (tool calls with their
    arguments, tool outputs; `Trajectory.actions`) in words; None when they are the same."""
    before, after = original.actions(), rewrite.actions()
    for k, (old, new) in enumerate(zip(before, after)):
        if old != new:
            return f"action {k + 1}: {_action(old)} became {_action(new)}"
    if len(before) != len(after):
        longer, verb = (before, "dropped") if len(before) > len(after) else (after, "added")
        return f"action {min(len(before), len(after)) + 1}: {_action(longer[min(len(before), len(after))])} {verb}"
    return None


def _action(action: tuple[str, str, str]) -> str:
    kind, name, detail = action
    shown = detail if len(detail) <= 80 else detail[:77] + "..."
    return f"{'tool call' if kind == 'call' else 'tool output'} {name}({shown})"


def untouched(original: Trajectory, rewrite: Trajectory, index: int) -> list[int]:
    """The messages other than `index` that differ between the two (a splice keeps them all:
    this is the check of that promise)."""
    if len(original.messages) != len(rewrite.messages):
        return [i for i in range(max(len(original.messages), len(rewrite.messages))) if i != index]
    return [i for i, (a, b) in enumerate(zip(original.messages, rewrite.messages)) if i != index and a != b]


def readable(text: str, kind: str) -> str:
    """A response as a person or a model reads it: a trajectory's transcript (its JSON when it
    does not parse), an answer as it is."""
    if kind != "trajectory":
        return text
    try:
        return render_transcript(Trajectory.from_response(text))
    except DataError:
        return text


_TRAJECTORY_JSON = '{"messages":['
"""How a trajectory's canonical JSON starts (sorted keys: `messages` before `outcome`)."""


def as_read(text: str) -> str:
    """`text` as a page shows it: a trajectory's canonical JSON as its transcript (as a judge
    reads it, without the system policy), anything else as it is. For views, which may not
    know a record's kind."""
    if not text.startswith(_TRAJECTORY_JSON):
        return text
    try:
        return render_transcript(Trajectory.from_response(text))
    except DataError:
        return text
