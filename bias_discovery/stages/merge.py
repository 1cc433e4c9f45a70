"""Merge: deduplicate candidates against the library and each other.

Embeddings (sentence-transformers) and a faiss inner-product index shortlist, for each
candidate, the nearest existing biases above a similarity threshold; only those pairs are put
to the teacher ("same" or "new"). The reference procedure asks the teacher about every pair of
library ∪ candidates; `MergeResult` reports both counts.

Candidates the teacher calls the same as a library bias are dropped (the library is left
unchanged, as in the paper; the decision is recorded). Candidates the teacher calls the same
as each other are merged into one (union-find over the "same" answers), pooling evidence and
recording `merged_from`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel

from ..config import MergeSettings
from ..embeddings import Embedder
from ..library import Bias
from ..llm.base import Engine
from ..llm.types import Constraint, GenerationRequest
from ..progress import ProgressFactory, progress_or_quiet
from ..prompts import load_prompt


class MergeDecision(BaseModel):
    """One question put to the teacher (a line of merges.jsonl)."""

    candidate_id: str
    """The candidate bias asked about."""
    other_id: str
    """The bias it was compared with."""
    other_kind: Literal["library", "candidate"]
    """Whether that bias is in the library or another candidate of the same iteration."""
    similarity: float
    """Cosine similarity of the two biases' embeddings (what put the pair on the shortlist)."""
    decision: Literal["same", "new", "invalid"]
    """The teacher's answer: the same bias, a new one, or no usable reply."""


class MergeResult(BaseModel):
    candidates: list[Bias]
    """Surviving candidates after merging (C_t = merged set minus library)."""
    merged_into_library: dict[str, str]
    """Candidate id -> library bias id it duplicates."""
    decisions: list[MergeDecision]
    teacher_calls: int
    all_pairs_calls: int
    """Teacher calls the all-pairs procedure would have made on library ∪ candidates."""


def bias_text(bias: Bias) -> str:
    return f"{bias.name}: {bias.definition}"


def shortlist(embeddings: np.ndarray, n_library: int, settings: MergeSettings) -> list[list[tuple[int, float]]]:
    """For each candidate (rows after the library), its top-k neighbours above the threshold."""
    import faiss

    n = embeddings.shape[0]
    index = faiss.IndexFlatIP(embeddings.shape[1])
    index.add(np.ascontiguousarray(embeddings, dtype=np.float32))
    k = min(settings.top_k + 1, n)
    sims, idx = index.search(np.ascontiguousarray(embeddings[n_library:], dtype=np.float32), k)
    result = []
    for row, candidate_index in enumerate(range(n_library, n)):
        neighbours = [
            (int(j), float(s))
            for j, s in zip(idx[row], sims[row])
            if j >= 0 and j != candidate_index and s >= settings.similarity_threshold
        ]
        result.append(neighbours[: settings.top_k])
    return result


def _merge_request(a: Bias, b: Bias, settings: MergeSettings, seed: int) -> GenerationRequest:
    messages = load_prompt("merge").render(
        name_a=a.name, definition_a=a.definition, name_b=b.name, definition_b=b.definition
    )
    return GenerationRequest(
        messages=messages,
        max_tokens=settings.max_tokens,
        temperature=0.0,
        seed=seed,
        constraint=Constraint(choices=("same", "new")),
    )


def _ask(
    teacher: Engine,
    questions: list[tuple[Bias, Bias]],
    settings: MergeSettings,
    seed: int,
    bar: ProgressFactory,
    step: str,
) -> list[Literal["same", "new", "invalid"]]:
    """The teacher's answers to `questions`, one progress step with its total."""
    if not questions:
        return []
    with bar(step, len(questions)) as advance:
        responses = teacher.generate([_merge_request(a, b, settings, seed) for a, b in questions], progress=advance)
    answers: list[Literal["same", "new", "invalid"]] = []
    for r in responses:
        word = r.text.strip().lower().strip(".")
        answers.append("same" if word == "same" else "new" if word == "new" else "invalid")
    return answers


def _combine(cluster: list[Bias]) -> Bias:
    """The candidate with most evidence represents the cluster; the others are merged into it."""
    representative = max(cluster, key=lambda b: len(b.evidence))
    others = [b for b in cluster if b is not representative]
    manifestations = list(dict.fromkeys(m for b in [representative, *others] for m in b.manifestations))
    return representative.model_copy(
        update={
            "evidence": [e for b in [representative, *others] for e in b.evidence],
            "manifestations": manifestations[:6],
            "merged_from": [*representative.merged_from, *(b.id for b in others)],
        }
    )


def merge_biases(
    teacher: Engine,
    embedder: Embedder,
    candidates: Sequence[Bias],
    library: Sequence[Bias],
    settings: MergeSettings,
    *,
    seed: int,
    progress: ProgressFactory | None = None,
) -> MergeResult:
    """Deduplicate `candidates` (see the module docstring). Each round of questions is a
    progress step of its own, whose total is known once the round before it is done."""
    bar = progress_or_quiet(progress)
    n_lib, n_all = len(library), len(library) + len(candidates)
    all_pairs = n_all * (n_all - 1) // 2
    if not candidates:
        return MergeResult(
            candidates=[], merged_into_library={}, decisions=[], teacher_calls=0, all_pairs_calls=all_pairs
        )
    everything = [*library, *candidates]
    neighbours = shortlist(embedder.embed([bias_text(b) for b in everything]), n_lib, settings)

    # Round 1: each candidate against its nearest library biases.
    lib_questions = [(ci, j, s) for ci, ns in enumerate(neighbours) for j, s in ns if j < n_lib]
    lib_answers = _ask(
        teacher, [(candidates[ci], library[j]) for ci, j, _ in lib_questions], settings, seed, bar, "vs library"
    )
    decisions = []
    merged_into: dict[str, str] = {}
    for (ci, j, s), answer in zip(lib_questions, lib_answers):
        decisions.append(
            MergeDecision(
                candidate_id=candidates[ci].id,
                other_id=library[j].id,
                other_kind="library",
                similarity=s,
                decision=answer,
            )
        )
        if answer == "same" and candidates[ci].id not in merged_into:
            merged_into[candidates[ci].id] = library[j].id  # neighbours come most similar first

    # Round 2: surviving candidates against each other; union-find over "same".
    alive = [ci for ci in range(len(candidates)) if candidates[ci].id not in merged_into]
    alive_set = set(alive)
    pair_questions: dict[tuple[int, int], float] = {}
    for ci in alive:
        for j, s in neighbours[ci]:
            cj = j - n_lib
            if j >= n_lib and cj in alive_set and cj != ci:
                pair_questions.setdefault((min(ci, cj), max(ci, cj)), s)
    ordered = sorted(pair_questions.items())
    pair_answers = _ask(
        teacher, [(candidates[a], candidates[b]) for (a, b), _ in ordered], settings, seed, bar, "between candidates"
    )
    parent = {ci: ci for ci in alive}

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for ((a, b), s), answer in zip(ordered, pair_answers):
        decisions.append(
            MergeDecision(
                candidate_id=candidates[a].id,
                other_id=candidates[b].id,
                other_kind="candidate",
                similarity=s,
                decision=answer,
            )
        )
        if answer == "same":
            parent[find(b)] = find(a)
    clusters: dict[int, list[Bias]] = {}
    for ci in alive:
        clusters.setdefault(find(ci), []).append(candidates[ci])
    merged = [_combine(cluster) for _, cluster in sorted(clusters.items())]
    return MergeResult(
        candidates=merged,
        merged_into_library=merged_into,
        decisions=decisions,
        teacher_calls=len(lib_questions) + len(ordered),
        all_pairs_calls=all_pairs,
    )
