"""Bias-augmented preference data for DPO: rejected responses rewritten to carry a bias.

Each pair of a preference set gets one of the run's biases (seeded per pair id); the run's
teacher rewrites the rejected response with the loop's perturb prompt; the chosen response
stays as it is. A model trained with DPO on such pairs learns to prefer the correct response
even when the wrong one is dressed up with the bias (the BiasScope paper's Section 4.4).

Written in TRL's preference format (what `trl.DPOTrainer` reads), with an explicit prompt:

- ``standard``: ``prompt``, ``chosen``, ``rejected`` are strings;
- ``conversational``: ``prompt`` is ``[{"role": "user", "content": question}]``, ``chosen``
  and ``rejected`` are ``[{"role": "assistant", "content": ...}]`` (TRL applies the model's
  chat template).

Extra columns: ``injected_bias`` (bias id; empty for an original pair added with
``include_original``), ``pair_id``, ``domain``, ``source``.

Trajectories (`PreferencePair.kind == "trajectory"`) are rewritten one turn at a time, as in
the loop, and written as conversations: ``conversational`` puts the trajectory's opening
system and user messages in ``prompt`` and the rest of the run in ``chosen`` / ``rejected``
(a tool call as a ``[tool call: NAME] ARGUMENTS`` line of its assistant message, a tool's
reply as a ``tool`` message); ``standard`` puts the task in ``prompt`` and each run's
transcript (`render_transcript`, what a judge reads) in ``chosen`` / ``rejected``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..config import PerturbSettings
from ..data.loaders import bad_rows_for, describe_source, load_pairs
from ..data.pairs import PreferencePair
from ..data.trajectory import Trajectory, render_transcript
from ..errors import ExportError
from ..formatting import number, percent, plural
from ..io import atomic_write_json, atomic_write_text, check_output_dir, staged_output
from ..library import Bias
from ..llm.base import Engine
from ..progress import ProgressFactory, progress_or_quiet
from ..run.context import RunContext
from ..run.selection import select_biases
from ..settings.export import DpoExportOptions, DpoFormat
from ..stages.perturb import keyed_rng, perturb
from .common import (
    CARD_MISSING,
    BiasSummary,
    ExportStats,
    LengthStats,
    bias_summary,
    card_template,
    dataset_card_meta,
    export_options,
    length_stats,
    package_version,
    required_out,
    review_paragraph,
    settings_text,
    write_data_files,
    yaml_front_matter,
)

KIND = "dpo"
COLUMNS = ("prompt", "chosen", "rejected", "injected_bias", "pair_id", "domain", "source")


class DpoCounts(BaseModel):
    pairs: int
    biases: int
    generated: int = 0
    dropped_invalid_perturbation: int = 0
    invalid_perturbation_reasons: dict[str, int] = Field(default_factory=dict)
    perturbed_rows: int = 0
    original_rows: int = 0
    rows: int = 0


class DpoBuild(BaseModel):
    rows: list[dict[str, Any]]
    counts: DpoCounts
    length: LengthStats
    per_bias: dict[str, int]


def _messages(role: str, text: str) -> list[dict[str, str]]:
    return [{"role": role, "content": text}]


def _conversation(response: str) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """A trajectory as (its opening system and user messages, the rest), each message as a
    role and a content (tool calls as lines of their assistant message's content)."""
    messages = []
    for m in Trajectory.from_response(response).messages:
        lines = [m.content] if m.content else []
        lines.extend(f"[tool call: {call.name}] {call.arguments}" for call in m.tool_calls)
        messages.append({"role": m.role, "content": "\n".join(lines)})
    opening = next((k for k, m in enumerate(messages) if m["role"] not in ("system", "user")), len(messages))
    return messages[:opening], messages[opening:]


def _trajectory_row(pair: PreferencePair, rejected: str, fmt: DpoFormat) -> tuple[Any, Any, Any]:
    """A trajectory pair's prompt, chosen and rejected (module docstring)."""
    if fmt == "conversational":
        prompt, chosen = _conversation(pair.chosen)
        return prompt, chosen, _conversation(rejected)[1]
    return (
        pair.question,
        render_transcript(Trajectory.from_response(pair.chosen)),
        render_transcript(Trajectory.from_response(rejected)),
    )


def dpo_row(pair: PreferencePair, rejected: str, bias_id: str, fmt: DpoFormat) -> dict[str, Any]:
    prompt: Any
    chosen: Any
    rejected_value: Any
    if pair.kind == "trajectory":
        prompt, chosen, rejected_value = _trajectory_row(pair, rejected, fmt)
    elif fmt == "conversational":
        prompt = _messages("user", pair.question)
        chosen = _messages("assistant", pair.chosen)
        rejected_value = _messages("assistant", rejected)
    else:
        prompt, chosen, rejected_value = pair.question, pair.chosen, rejected
    return {
        "prompt": prompt,
        "chosen": chosen,
        "rejected": rejected_value,
        "injected_bias": bias_id,
        "pair_id": pair.id,
        "domain": pair.domain,
        "source": pair.source,
    }


def build_dpo_set(
    pairs: Sequence[PreferencePair],
    biases: Sequence[Bias],
    *,
    teacher: Engine,
    seed: int,
    perturb_settings: PerturbSettings,
    fmt: DpoFormat = "standard",
    include_original: bool = False,
    progress: ProgressFactory | None = None,
) -> DpoBuild:
    """One perturbed row per pair whose rewrite is valid (invalid ones are counted and dropped:
    truncated, empty, engine error, or identical to the original rejected response)."""
    if not biases:
        raise ExportError("no biases to inject")
    items = [(p, keyed_rng(seed, KIND, p.id).choice(list(biases))) for p in pairs]
    with progress_or_quiet(progress)(f"perturbing {plural(len(items), 'rejected response')}", len(items)) as advance:
        perturbed = perturb(teacher, items, perturb_settings, seed=seed, progress=advance)
    counts = DpoCounts(pairs=len(pairs), biases=len(biases), generated=len(items))
    reasons: Counter[str] = Counter()
    rows: list[dict[str, Any]] = []
    triples = []
    per_bias: Counter[str] = Counter()
    for (pair, bias), record in zip(items, perturbed):
        reason = record.invalid_reason  # "unchanged" included: perturb marks it
        if include_original:
            rows.append(dpo_row(pair, pair.rejected, "", fmt))
            counts.original_rows += 1
        if reason is not None:
            reasons[reason] += 1
            continue
        rows.append(dpo_row(pair, record.perturbed_rejected, bias.id, fmt))
        triples.append((pair.chosen, pair.rejected, record.perturbed_rejected))
        per_bias[bias.id] += 1
        counts.perturbed_rows += 1
    counts.dropped_invalid_perturbation = sum(reasons.values())
    counts.invalid_perturbation_reasons = dict(sorted(reasons.items()))
    counts.rows = len(rows)
    return DpoBuild(rows=rows, counts=counts, length=length_stats(triples), per_bias=dict(per_bias))


def dpo_schema(fmt: DpoFormat) -> Any:
    import pyarrow as pa

    if fmt == "conversational":
        message = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
        text_type = {"prompt": message, "chosen": message, "rejected": message}
    else:
        text_type = {}
    return pa.schema([(name, text_type.get(name, pa.string())) for name in COLUMNS])


class DpoModels(BaseModel):
    """The models of a DPO export (specs)."""

    teacher: str
    target: str


class DpoStats(ExportStats):
    """stats.json of a DPO export."""

    kind: Literal["dpo"] = "dpo"
    format: DpoFormat
    include_original: bool = False
    models: DpoModels
    counts: DpoCounts
    per_bias: dict[str, int] = Field(default_factory=dict)


def render_dpo_card(stats: DpoStats, directory: Path) -> str:
    """README.md of a DPO export: the template `templates/dpo_card.md.j2`, from its stats."""
    c = stats.counts
    front = yaml_front_matter(
        dataset_card_meta(
            directory,
            split="train",
            n_rows=c.rows,
            extra={
                "pretty_name": f"{stats.run_name} bias-augmented DPO data",
                "license": "other",
                "language": ["en"],
                "tags": ["dpo", "preference", "llm-as-a-judge", "bias", "bias-discovery"],
            },
        )
    )
    return card_template("dpo_card.md.j2").render(
        stats=stats,
        c=c,
        carried=carried_biases_sentence(stats.biases),
        standing=bias_standing,
        front=front,
        reasons=", ".join(f"{k} {v}" for k, v in c.invalid_perturbation_reasons.items()) or "none",
        settings_text=settings_text,
        number=partial(number, missing=CARD_MISSING),
        percent=partial(percent, unit=" %", missing=CARD_MISSING),
        review=review_paragraph(stats.biases, reviewed_only=stats.reviewed_only),
    )


def bias_standing(bias: BiasSummary) -> str:
    """Where a bias of the card comes from and whether the run validated it (a `bias_summary`):
    "discovered (iteration t), validated", "seed, validated", "seed, never validated", or
    "..., rejected by validation"."""
    origin = "seed" if bias.origin == "seed" else f"discovered (iteration {bias.iteration})"
    if bias.validated:
        return f"{origin}, validated"
    if bias.effect is None:
        return f"{origin}, never validated"
    return f"{origin}, rejected by validation"


def carried_biases_sentence(biases: Sequence[BiasSummary]) -> str:
    """What the rewrites carry, said as it is: biases the discovery run found and validated, or
    seeds of the library that were never validated (a trait written into the response, not a
    bias the judge was shown to have), counted."""
    standings = [bias_standing(b) for b in biases]
    found = sum(s.startswith("discovered") and s.endswith(", validated") for s in standings)
    if standings and found == len(standings):
        return "one bias the discovery run found and validated (accepted against its control)"
    parts = []
    if found:
        parts.append(f"{found} found by the discovery run and validated")
    seeds_validated = standings.count("seed, validated")
    if seeds_validated:
        parts.append(f"{seeds_validated} of the seed library that the run validated")
    never = sum(s.endswith("never validated") for s in standings)
    if never:
        parts.append(
            f"{never} never validated (seeds of the library: a trait written into the response, not a bias this "
            "run showed the judge to have)"
        )
    rejected = sum(s.endswith("rejected by validation") for s in standings)
    if rejected:
        parts.append(f"{rejected} that validation rejected")
    return f"one of {len(standings)} biases: " + "; ".join(parts) + " (see Biases below)"


def export_dpo(
    run_dir: Path | str,
    out: Path | str | None = None,
    options: DpoExportOptions | None = None,
    *,
    progress: ProgressFactory | None = None,
    engines: Mapping[str, Engine] | None = None,
    **overrides: Any,
) -> DpoStats:
    """Perturb the rejected responses of `data` with the run's biases and write DPO data to
    `out`, as `options` (`DpoExportOptions`) and keyword `overrides` of its fields say
    (``export_dpo(run, out, data="rewardbench", limit=100)``); returns stats.json's content as
    a `DpoStats`. `limit` takes a seeded sample (the run's seed); `skip_bad_rows` (or the
    run's `data.skip_bad_rows`) skips and counts bad data rows; `reviewed_only` keeps only
    biases a reviewer confirmed (`select_biases`). `timeout_s` replaces the teacher's request
    deadline (None: the run's). `engines` ({"teacher"}) replaces the model (tests)."""
    opts = export_options(DpoExportOptions, options, out, overrides)
    out_dir = required_out(opts)
    if opts.data is None:
        raise ExportError("`data` is required: the preference pairs to perturb")
    run_path = Path(run_dir)
    check_output_dir(out_dir, overwrite=opts.overwrite, protect=[run_path], error=ExportError)
    with RunContext(run_path, engines=engines, timeout_s=opts.timeout_s) as ctx:
        config = ctx.config
        chosen = select_biases(ctx.library, opts.biases, run_dir=run_path, reviewed_only=opts.reviewed_only)
        decisions = ctx.run.reviews.decisions()
        where = opts.data_dir if opts.data_dir is not None else config.data.data_dir
        bad_rows = bad_rows_for(opts.data, opts.skip_bad_rows or config.data.skip_bad_rows)
        pairs = load_pairs(
            opts.data, data_dir=where, limit=opts.limit, seed=config.seed if opts.limit else None, bad_rows=bad_rows
        )
        if not pairs:
            raise ExportError(f"data {opts.data!r} has no pairs")
        build = build_dpo_set(
            pairs,
            chosen,
            teacher=ctx.roles({"teacher": config.teacher})["teacher"],
            seed=config.seed,
            perturb_settings=config.perturb,
            fmt=opts.fmt,
            include_original=opts.include_original,
            progress=progress,
        )
        stats = {
            "kind": KIND,
            "format": opts.fmt,
            "run_name": config.name,
            "run_dir": ctx.root.name,
            "library_file": ctx.library_file,
            "data": describe_source(opts.data, where, portable=True),
            "limit": opts.limit,
            "skipped_rows": len(bad_rows or []),
            "bias_selection": opts.biases or "all",
            "reviewed_only": opts.reviewed_only,
            "seed": config.seed,
            "include_original": opts.include_original,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "bias_discovery_version": package_version(),
            "models": {"teacher": config.teacher.spec, "target": config.target.spec},
            "perturb_settings": config.perturb.model_dump(mode="json"),
            "biases": [bias_summary(b, decisions.get(b.id)) for b in chosen],
            "counts": build.counts.model_dump(),
            "per_bias": build.per_bias,
            "length": build.length.model_dump(),
        }
    with staged_output(out_dir, overwrite=opts.overwrite, protect=[run_path], error=ExportError) as tmp:
        write_data_files(tmp, build.rows, dpo_schema(opts.fmt))
        atomic_write_json(tmp / "stats.json", stats)
        atomic_write_text(tmp / "README.md", render_dpo_card(DpoStats.model_validate(stats), tmp))
    return DpoStats.model_validate(stats)
