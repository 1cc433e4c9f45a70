"""Scripted stand-ins for models, for unit tests of orchestration logic only.

Every capability also has a test with the real embedded model or a real server; these fakes
let the loop's bookkeeping (stop reasons, merges, acceptance, resume) be tested in seconds.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Sequence

import numpy as np

from bias_discovery.llm.base import SequentialEngine
from bias_discovery.llm.types import FinalTokenLogprobs, GenerationRequest, GenerationResponse

MARKER = "As leading experts confirm."


class ScriptedEngine(SequentialEngine):
    """Answers with `respond(request)`; records every request it is sent. On the engines' own
    base class, so it reports responses and progress exactly as the real engines do.

    `probability_of_a(request)`, when given, is the judge's P(A) at the verdict token: a request
    asking for `final_top_logprobs` gets the output's last character as the final token (" A"
    or " B") and the two labels at log P(A), log(1 - P(A)) as its top tokens (None: no
    log-probabilities, as an engine that cannot place the verdict token)."""

    name = "scripted"
    thread_safe = True

    def __init__(
        self,
        respond: Callable[[GenerationRequest], str],
        engine_id: str = "fake/scripted",
        probability_of_a: Callable[[GenerationRequest], float | None] | None = None,
    ) -> None:
        super().__init__(engine_id)
        self.respond = respond
        self.probability_of_a = probability_of_a
        self.sent: list[GenerationRequest] = []

    def _generate_one(self, request: GenerationRequest) -> GenerationResponse:
        self.sent.append(request)
        text = self.respond(request)
        final = None
        p_a = self.probability_of_a(request) if self.probability_of_a and request.final_top_logprobs else None
        if p_a is not None:
            token = f" {text[-1:]}"
            logs = {t: math.log(p) if p > 0 else float("-inf") for t, p in ((" A", p_a), (" B", 1.0 - p_a))}
            final = FinalTokenLogprobs.from_candidates(
                token, logs.get(token, 0.0), logs.items(), request.final_top_logprobs or 1
            )
        return GenerationResponse(
            text=text, finish_reason="stop", prompt_tokens=10, completion_tokens=len(text.split()), final_logprobs=final
        )


def _responses(prompt: str) -> tuple[str, str]:
    a = re.search(r"\[Response A\]\n(.*?)\n\[End of Response A\]", prompt, re.S)
    b = re.search(r"\[Response B\]\n(.*?)\n\[End of Response B\]", prompt, re.S)
    assert a and b, prompt
    return a.group(1), b.group(1)


PLACEBO_PREFIX = "Put plainly:"


def neutral_rewrite(user: str) -> str:
    """The scripted teacher's placebo: the original answer, reworded only at its start."""
    original = re.search(r"Original answer:\n(.*?)\n\nWrite the rewritten answer now", user, re.S).group(1)
    return f"{PLACEBO_PREFIX} {original}"


def answer_check(user: str) -> str:
    """The scripted checker: a rewrite that now says RIGHT reaches the chosen answer."""
    candidate = re.search(r"\[Response 2\]\n(.*?)\n\[End of Response 2\]", user, re.S).group(1)
    return "same" if "RIGHT" in candidate else "different"


def authority_world(request: GenerationRequest) -> str:
    """A world with one real bias: the judge prefers any response that cites experts.

    Correct responses contain "RIGHT"; the teacher injects the expert marker only for biases
    whose name mentions authority or experts (a neutral rewrite rewords the start only); the
    checker says "same" when a rewrite now says RIGHT; the identifier names that bias "Expert
    Citation Bias"; the merger says "same" only for two authority/expert biases.
    """
    user = request.messages[-1].content
    if "[Response A]" in user and len(request.messages) <= 2:
        a, b = _responses(user)
        if MARKER in a and MARKER not in b:
            pick = "A"
        elif MARKER in b and MARKER not in a:
            pick = "B"
        else:
            pick = "A" if "RIGHT" in a else "B"
        return f"Reasoning: Response {pick} is better.\nVerdict: {pick}"
    if "Explain your decision in more depth" in user:
        return "It cites leading experts, which made it more convincing."
    if "Trait:" in user:
        original = re.search(r"Original answer:\n(.*?)\n\nTrait:", user, re.S).group(1)
        trait = re.search(r"Trait: (.*)", user).group(1).lower()
        return f"{original} {MARKER}" if ("authority" in trait or "expert" in trait) else original
    if "Original answer:" in user:  # the placebo: a neutral paraphrase
        return neutral_rewrite(user)
    if "Answer with one word: same or different" in user:
        return answer_check(user)
    if "preferred the WRONG one" in user:
        if MARKER in user:
            return json.dumps(
                {
                    "bias_found": True,
                    "name": "Expert Citation Bias",
                    "definition": "The judge favours responses that invoke expert consensus.",
                    "manifestations": ["appeals to leading experts"],
                }
            )
        return json.dumps({"bias_found": False, "name": "", "definition": "", "manifestations": []})
    if "Answer with one word: same or new" in user:
        names = re.findall(r"Bias \d: (.*)", user)
        both = all(("authority" in n.lower() or "expert" in n.lower()) for n in names)
        return "same" if both else "new"
    raise AssertionError(f"unexpected prompt: {user[:200]}")


def _item_number(text: str) -> int:
    found = re.search(r"number (\d+)", text)
    return int(found.group(1)) if found else 0


def quiet_authority_world(request: GenerationRequest) -> str:
    """authority_world, except that the judge always picks the right response (its choice
    verdicts never err); only its probability moves (`quiet_authority_p_a`)."""
    user = request.messages[-1].content
    if "[Response A]" in user and len(request.messages) <= 2:
        a, _ = _responses(user)
        pick = "A" if "RIGHT" in a else "B"
        return f"Reasoning: Response {pick} is better.\nVerdict: {pick}"
    return authority_world(request)


def quiet_authority_p_a(request: GenerationRequest) -> float:
    """The quiet judge's P(A): its probability of preferring the rejected response is 0.2 plus
    up to 0.1 by item, plus 0.15 when the rejected response cites the experts (never above
    0.5, so the choice verdict never changes)."""
    a, b = _responses(request.messages[-1].content)
    rejected = b if "RIGHT" in a else a
    p_rejected = 0.2 + 0.01 * (_item_number(rejected) % 11) + (0.15 if MARKER in rejected else 0.0)
    return 1.0 - p_rejected if "RIGHT" in a else p_rejected


class BagOfWordsEmbedder:
    """Deterministic hashed bag-of-words vectors (no torch), L2-normalised."""

    model_id = "fake/bow"

    def __init__(self, dim: int = 64) -> None:
        self.dim = dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in re.findall(r"[a-z]+", text.lower()):
                out[i, int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1, norms)


POLISH = "Indeed, this is well put."


def rewrite_world(request: GenerationRequest) -> str:
    """A judge that prefers *any* rewrite: every rewrite the teacher makes (with a trait or
    neutral) ends with the same polish, and the judge picks the polished response. The
    identifier blames the polish; nothing about a trait matters."""
    user = request.messages[-1].content
    if "[Response A]" in user and len(request.messages) <= 2:
        a, b = _responses(user)
        if (POLISH in a) != (POLISH in b):
            pick = "A" if POLISH in a else "B"
        else:
            pick = "A" if "RIGHT" in a else "B"
        return f"Reasoning: Response {pick} reads better.\nVerdict: {pick}"
    if "Explain your decision in more depth" in user:
        return "It was better written."
    if "Trait:" in user:
        original = re.search(r"Original answer:\n(.*?)\n\nTrait:", user, re.S).group(1)
        return f"{original} {POLISH}"
    if "Original answer:" in user:
        return f"{neutral_rewrite(user)} {POLISH}"
    if "Answer with one word: same or different" in user:
        return answer_check(user)
    if "preferred the WRONG one" in user:
        return json.dumps(
            {
                "bias_found": True,
                "name": "Polished Prose Bias",
                "definition": "The judge favours responses with a polished closing sentence.",
                "manifestations": ["a confident closing remark"],
            }
        )
    if "Answer with one word: same or new" in user:
        return "new"
    raise AssertionError(f"unexpected prompt: {user[:200]}")


def null_world(request: GenerationRequest) -> str:
    """A judge with no bias at all: its verdict is a coin keyed on the whole request (texts,
    order and seed), so every rewrite re-draws it and nothing systematic is there to find.
    The identifier still names a bias for each mistake (one of three names by question), as a
    weak teacher would."""
    user = request.messages[-1].content
    if "[Response A]" in user and len(request.messages) <= 2:
        key = hashlib.sha256(f"{request.seed}:{user}".encode()).digest()
        pick = "A" if key[0] & 1 else "B"
        return f"Reasoning: Response {pick} seems better.\nVerdict: {pick}"
    if "Explain your decision in more depth" in user:
        return "It seemed better."
    if "Trait:" in user:
        original = re.search(r"Original answer:\n(.*?)\n\nTrait:", user, re.S).group(1)
        trait = re.search(r"Trait: (.*)", user).group(1)
        return f"{original} (style {len(trait)})"  # a change that carries nothing (never the name: it is cut)
    if "Original answer:" in user:
        return neutral_rewrite(user)
    if "Answer with one word: same or different" in user:
        return answer_check(user)
    if "preferred the WRONG one" in user:
        number = int(re.search(r"(\d+)\?", user).group(1))
        name = ("Hedging Bias", "Formality Bias", "Enumeration Bias")[number % 3]
        return json.dumps(
            {
                "bias_found": True,
                "name": name,
                "definition": f"The judge favours {name.lower()} responses.",
                "manifestations": [name.lower()],
            }
        )
    if "Answer with one word: same or new" in user:
        return "new"
    raise AssertionError(f"unexpected prompt: {user[:200]}")


def _scored(prompt: str) -> str:
    found = re.search(r"\[Response\]\n(.*?)\n\[End of Response\]", prompt, re.S)
    assert found, prompt
    return found.group(1)


def pointwise_authority_world(request: GenerationRequest) -> str:
    """authority_world with a pointwise judge on a 1-10 scale: a right response scores 7, a
    wrong one 3 to 5 by item, and a response citing the experts 3 or 4 points more (6 to 9:
    at least the chosen response's score, so the pair misjudged, on 5 items in 6; a tie at 7)."""
    user = request.messages[-1].content
    if "[Response]" in user and len(request.messages) <= 2:
        response = _scored(user)
        score = 7 if "RIGHT" in response else 3 + _item_number(response) % 3
        if MARKER in response:
            score += 3 + _item_number(response) % 2
        return f"Reasoning: it reads {'well' if score >= 7 else 'poorly'}.\nScore: {min(score, 10)}"
    if "Explain your score in more depth" in user:
        return "It cites leading experts, which raised my score."
    if "gave the WRONG one a score" in user:
        user = user.replace("gave the WRONG one a score", "preferred the WRONG one")
        return authority_world(
            request.model_copy(
                update={"messages": (*request.messages[:-1], request.messages[-1].model_copy(update={"content": user}))}
            )
        )
    return authority_world(request)


# --------------------------------------------------------------------------------------------
# Trajectories: an agent's runs as responses, and a world whose judge has a planted bias
# --------------------------------------------------------------------------------------------

TAMPERED = 3
"""`trajectory_world`'s teacher changes a tool argument of every turn it rewrites for the items
whose number ends in this digit (3, 13, 23 ...): those rewrites must be dropped."""


def trajectory_messages(i: int, *, right: bool) -> list[dict]:
    """Item `i`'s trajectory: the agent looks up a reservation, then closes the task with a
    final message that also logs a ticket (a tool call with arguments in the rewritten turn).
    The right run looks up the right reservation and says RIGHT; the wrong one does neither."""
    reservation = f"R{i}" if right else f"R{i + 500}"
    outcome = "RIGHT" if right else "wrong"
    return [
        {"role": "system", "content": "Policy: cancel only the reservation the user names."},
        {"role": "user", "content": f"Please cancel my reservation R{i} (task number {i})."},
        {
            "role": "assistant",
            "content": f"Let me look up reservation {reservation}.",
            "tool_calls": [{"id": "c1", "name": "get_reservation", "arguments": json.dumps({"id": reservation})}],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "get_reservation", "content": f'{{"id": "{reservation}"}}'},
        {
            "role": "assistant",
            "content": f"Done: {outcome} outcome number {i}.",
            "tool_calls": [{"id": "c2", "name": "log_ticket", "arguments": json.dumps({"ticket": f"T{i}"})}],
        },
        {"role": "tool", "tool_call_id": "c2", "name": "log_ticket", "content": "logged"},
    ]


def trajectory_pair(i: int, prefix: str = "p"):
    """Pair `i` of trajectories (`PreferencePair`, kind trajectory): the right run chosen."""
    from bias_discovery.data.pairs import PreferencePair
    from bias_discovery.data.trajectory import Trajectory

    def response(right: bool) -> str:
        return Trajectory.model_validate({"messages": trajectory_messages(i, right=right)}).to_response()

    return PreferencePair(
        id=f"{prefix}{i:02d}",
        question=f"Cancel reservation R{i} (task number {i}).",
        chosen=response(True),
        rejected=response(False),
        domain=["airline", "retail"][i % 2],
        kind="trajectory",
    )


def _tampered(turn: str) -> str:
    """The turn with its ticket's argument changed, for the items `TAMPERED` names."""
    found = re.search(r'"ticket": "T(\d+)"', turn)
    if found and int(found.group(1)) % 10 == TAMPERED:
        return turn.replace(found.group(0), f'"ticket": "T{found.group(1)}-changed"')
    return turn


def trajectory_world(request: GenerationRequest) -> str:
    """`authority_world` on trajectories: the judge prefers the trajectory whose agent cites
    experts, else the RIGHT one; the teacher rewrites one turn (`Original turn:`), adding the
    expert marker to its text for an authority or expert trait, a plain rewording for the
    placebo, and changing a tool argument for the items `TAMPERED` names. No answer checker is
    ever asked (a trajectory's check is mechanical): such a prompt fails the test."""
    user = request.messages[-1].content
    if "[Transcript A]" in user and len(request.messages) <= 2:  # the trajectory judge prompt
        a = re.search(r"\[Transcript A\]\n(.*?)\n\[End of Transcript A\]", user, re.S).group(1)
        b = re.search(r"\[Transcript B\]\n(.*?)\n\[End of Transcript B\]", user, re.S).group(1)
        if (MARKER in a) != (MARKER in b):
            pick = "A" if MARKER in a else "B"
        else:
            pick = "A" if "RIGHT" in a else "B"
        return f"Reasoning: Agent {pick} did better.\nVerdict: {pick}"
    if "Original turn:" in user:
        turn = re.search(r"Original turn:\n(.*?)\n\n(?:Trait:|Write the rewritten turn now)", user, re.S).group(1)
        text, _, calls = turn.partition("\n[tool call:")
        calls = f"\n[tool call:{calls}" if calls else ""
        if "Trait:" in user:
            trait = re.search(r"Trait: (.*)", user).group(1).lower()
            text = f"{text} {MARKER}" if ("authority" in trait or "expert" in trait) else text
        else:
            text = f"{PLACEBO_PREFIX} {text}"
        return _tampered(f"{text}{calls}")
    if "Answer with one word: same or different" in user:
        raise AssertionError("a trajectory's rewrite went to the answer checker")
    return authority_world(request)
