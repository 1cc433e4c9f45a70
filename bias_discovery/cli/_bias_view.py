"""One bias in the terminal (`library show RUN BIAS`): definition, numbers, provenance,
examples and reviews, readable at 80 columns.

Everything a model wrote is shown as plain text: control characters (terminal escape
sequences, carriage returns, bidirectional overrides) are removed first (`terminal_text`), and
no text is read as rich markup. Word diffs read as git's ``--word-diff=plain``:
``[-removed-]{+added+}`` (coloured on a colour terminal). Long texts are cut, saying so; the
`--json` output has every text whole.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.text import Text

from ..formatting import MEASURE_LABELS, ci_pp, delta_clause, excluded_clause, number, p_value, percent, plural, pp

if TYPE_CHECKING:  # annotations only: the CLI must start fast
    from ..api import Review, ScoreShift
    from ..api.views import (
        BiasDetail,
        DiffSegment,
        JudgedItem,
        MergedCandidate,
        PairedComparison,
        ProvenanceCase,
        ValidationExample,
    )

__all__ = ["print_bias", "terminal_text"]

_ESCAPE_SEQUENCE = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|[@-Z\\-_])")
"""ANSI/VT escape sequences: CSI (colours, cursor moves), OSC (titles, hyperlinks), and the
two-byte ones."""
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
"""Bidirectional formatting characters: they can make a terminal show text in another order
than it is."""

TEXT_CHARS = 600
"""Model texts (responses, explanations) longer than this are cut in the terminal."""
TEXT_LINES = 12
"""... and those of more lines than this."""
QUESTION_CHARS = 300
DIFF_CONTEXT = 12
"""Unchanged words kept on each side of a change in a diff; the rest of a run is elided."""


def terminal_text(text: str | None) -> str:
    """`text` safe to print on a terminal: escape sequences, control characters (but newlines;
    a tab becomes a space) and bidirectional overrides removed."""
    if not text:
        return ""
    text = _ESCAPE_SEQUENCE.sub("", text).replace("\r\n", "\n").replace("\t", " ")
    return "".join(ch for ch in text if ch == "\n" or (unicodedata.category(ch) != "Cc" and ch not in _BIDI))


def _cut(text: str | None, limit: int = TEXT_CHARS, lines: int = TEXT_LINES) -> str:
    """`text` for the terminal, at most `limit` characters and `lines` lines (blank lines
    collapsed), saying how much was left out."""
    clean = re.sub(r"\n\s*\n+", "\n\n", terminal_text(text).strip())
    kept = "\n".join(clean.splitlines()[:lines])[:limit].rstrip()
    if kept == clean:
        return clean
    return kept + f" … ({len(clean) - len(kept)} more characters: --json has all)"


def _elide(text: str, where: str) -> str:
    """An unchanged run of a diff, shortened to `DIFF_CONTEXT` words next to the changes
    (`where`: first, middle or last run)."""
    words = text.split(" ")
    c = DIFF_CONTEXT
    if where == "only" or len(words) <= 2 * c:
        return text
    if where == "first":
        return "… " + " ".join(words[-c:])
    if where == "last":
        return " ".join(words[:c]) + " …"
    return " ".join(words[:c]) + " … " + " ".join(words[-c:])


def diff_text(segments: Sequence[DiffSegment]) -> Text:
    """A word diff as ``[-removed-]{+added+}``, unchanged runs elided."""
    out = Text()
    if not any(kind != "eq" for kind, _ in segments):
        out.append(_cut("".join(t for _, t in segments)))
        out.append("  (identical to the original)", style="dim")
        return out
    last = len(segments) - 1
    for i, (kind, raw) in enumerate(segments):
        text = terminal_text(raw)
        if kind == "eq":
            where = "only" if last == 0 else "first" if i == 0 else "last" if i == last else "middle"
            out.append(_elide(text, where))
        elif kind == "del":
            out.append(f"[-{text}-]", style="red")
        else:
            out.append(f"{{+{text}+}}", style="green")
    return out


def _indent(renderable: RenderableType | str, level: int = 1) -> Padding:
    body = Text(renderable) if isinstance(renderable, str) else renderable
    return Padding(body, (0, 0, 0, 2 * level), expand=False)


def _shift_text(s: ScoreShift) -> str:
    """A score shift in points and SDs with its CIs and n."""
    sd = "" if s.sd_units is None else f", {s.sd_units:+.2f} SD (CI {s.sd_ci_low:+.2f} to {s.sd_ci_high:+.2f})"
    interval = "" if s.ci_low is None else f" (CI {s.ci_low:+.2f} to {s.ci_high:+.2f})"
    return f"{s.points:+.2f} points of {s.scale}{interval}{sd} vs {s.control}, n = {s.n}"


def _labelled(label: str, text: str | Text, level: int = 1) -> Padding:
    line = Text(f"{label}: ", style="bold")
    line.append(text if isinstance(text, Text) else Text(text))
    return _indent(line, level)


def _review_line(review: Review) -> Text:
    when = review.reviewed_at.replace("T", " ").replace("+00:00", " UTC")
    line = Text()
    line.append(review.decision, style={"confirmed": "green", "rejected": "red"}.get(review.decision, "yellow"))
    line.append(f" by {terminal_text(review.reviewer)}, {when}")
    if review.note:
        line.append(f": {_cut(review.note, 300)}")
    return line


def _comparison(c: PairedComparison, label: str) -> str:
    adjusted = f" (adjusted {p_value(c.p_adjusted)})" if c.p_adjusted is not None else ""
    return (
        f"{label} {percent(c.control_error)} → with the bias {percent(c.arm_error)}, "
        + delta_clause(c.delta, c.ci_low, c.ci_high, c.n, c.p_value)
        + adjusted
    )


def _numbers(detail: BiasDetail) -> list[RenderableType]:
    r, v = detail.row, detail.validation
    if v is None:
        return [
            _indent(
                Text("not validated: no numbers (a seed without validate.seeds, or a candidate skipped)", style="dim")
            )
        ]
    what = MEASURE_LABELS.get(r.measure or "error", "Δerror")
    e = v.effect
    measured = f"{what} {pp(e.delta)} (CI {ci_pp(e.ci_low, e.ci_high, missing='-')}, n = {e.n}; {e.method})"
    if e.upper_bound is not None:  # rejected: what its looks exclude leads; the estimate is not a figure to quote
        measured = (
            f"{excluded_clause(e.upper_bound, e.confidence)} (one-sided, given how it stopped and that it was "
            f"rejected); as estimated: {measured}"
        )
    lines: list[RenderableType] = [
        _labelled(f"effect vs {v.decisive}", measured),
        _labelled("vs baseline", _comparison(v.vs_baseline, "unchanged")),
    ]
    if v.vs_placebo is not None:
        lines.append(_labelled("vs placebo", _comparison(v.vs_placebo, "neutral rewrite")))
    if v.score_shift is not None:
        lines.append(
            _labelled("score shift", _shift_text(v.score_shift) + f" (pointwise judge; on {v.score_shift.method})")
        )
    if v.score_shift_decision is not None:
        lines.append(
            _labelled(
                "as decided",
                _shift_text(v.score_shift_decision)
                + " on the items the decision saw (biased upward by the acceptance)",
            )
        )
    if v.secondary is not None:
        lines.append(
            _labelled(
                "secondary", _comparison(v.secondary, v.secondary.control or "control") + " (reported, not decisive)"
            )
        )
    lines.append(_labelled("decision", f"{r.status}: {v.rule}"))
    if v.mde_n is not None:
        mde = "none at this n" if v.mde is None else pp(v.mde)
        power = percent(v.mde_power, digits=0, unit=" %") if v.mde_power is not None else "80 %"
        lines.append(_labelled("smallest detectable Δ", f"{mde} vs {v.decisive} at n = {v.mde_n} ({power} power)"))
    if v.stop is not None and v.stopped_at is not None:
        lines.append(_labelled("stopped", f"after {plural(v.stopped_at, 'test item')} ({v.stop})"))
    if v.n_answer_checked is not None:
        lines.append(
            _labelled(
                "answer check",
                f"{v.n_answer_changed or 0} of {plural(v.n_answer_checked, 'checked rewrite')} reached the chosen answer "
                f"({percent(v.answer_change_rate)}; excluded)"
                + (f", {v.n_answer_unverifiable} unverifiable (kept)" if v.n_answer_unverifiable else "")
                + (f"; checker {terminal_text(v.checker)}" if v.checker else "")
                + (" (self-checked: it wrote the rewrites)" if v.self_checked else ""),
            )
        )
    if v.length_ratio is not None:
        lines.append(
            _labelled("length", f"×{number(v.length_ratio, digits=2)} perturbed / original (whitespace tokens)")
        )
    if detail.domains:
        lines.append(_indent(Text("per domain, vs the unchanged items (descriptive):", style="bold")))
        for domain, d in detail.domains.items():
            lines.append(
                _indent(
                    f"{terminal_text(domain)}: n {d.n}, {percent(d.control_error)} → {percent(d.arm_error)}, "
                    f"{pp(d.delta)} {ci_pp(d.ci_low, d.ci_high)}".rstrip()
                    + f", p {p_value(d.p_value)}",
                    2,
                )
            )
    if v.error_statement:
        lines.append(_labelled("error control", v.error_statement))
    return lines


def _case(number_: int, case: ProvenanceCase) -> list[RenderableType]:
    head = f"case {number_}: pair {terminal_text(case.pair_id)}"
    head += f" ({terminal_text(case.domain)})" if case.domain else ""
    if case.injected_bias:
        head += f", {terminal_text(case.injected_bias)} injected"
    if case.order and case.verdict:
        first = "the chosen response" if case.order == "chosen_first" else "the rejected one"
        head += f"; shown {first} first, the judge answered {case.verdict} (the rewrite)"
    if case.score is not None:
        head += (
            f"; scored alone, the rewrite {number(case.score)} and the chosen response "
            f"{number(case.chosen_score) if case.chosen_score is not None else '-'}"
        )
    lines: list[RenderableType] = [_indent(Text(head, style="bold"))]
    if case.question:
        lines.append(_labelled("question", _cut(case.question, QUESTION_CHARS), 2))
    if case.diff is not None:
        lines.append(_labelled("rejected, rewritten", diff_text(case.diff), 2))
    else:
        lines.append(_labelled("rejected, rewritten", _cut(case.perturbed_rejected), 2))
    lines.append(_labelled("judge", _cut(case.explanation) or "(no reasoning)", 2))
    if case.deeper_explanation:
        lines.append(_labelled("asked to explain further", _cut(case.deeper_explanation), 2))
    ident = case.identification
    if ident is not None:
        said = (
            f"{terminal_text(ident.name)}: {_cut(ident.definition, 300)}"
            if ident.status == "bias"
            else "no bias found"
            if ident.status == "none"
            else "no usable reply"
        )
        lines.append(
            _labelled(
                "teacher", said + (f" (candidate {terminal_text(case.candidate_id)})" if case.candidate_id else ""), 2
            )
        )
    return lines


def _merged(candidate: MergedCandidate) -> RenderableType:
    how = "pooled with it" if candidate.how == "pooled" else "named again, dropped as the same"
    text = f"{terminal_text(candidate.id)} (iteration {candidate.iteration}, {how}"
    text += f", {plural(len(candidate.pair_ids), 'case')})" if candidate.pair_ids else ")"
    if candidate.name:
        text += f": {terminal_text(candidate.name)}"
    answers = "; ".join(
        f"vs {terminal_text(a.other_id)}: similarity {number(a.similarity, digits=2)}, teacher said {a.answer}"
        for a in candidate.answers
    )
    return _indent(text + (f". {answers}" if answers else ""), 2)


def _provenance(detail: BiasDetail) -> list[RenderableType]:
    p = detail.provenance
    lines: list[RenderableType] = []
    if p.origin == "seed":
        lines.append(_indent(f"{terminal_text(p.summary)}: a known bias the run started from"))
    else:
        lines.append(_indent(f"{terminal_text(p.summary)}, from {plural(len(p.cases), 'misjudged case')}"))
    if p.merged:
        lines.append(_indent(Text("candidates merged into it:", style="bold")))
        lines += [_merged(m) for m in p.merged]
    if p.excluded:
        lines.append(
            _indent(
                f"not counted: {plural(len(p.excluded), 'misjudged pair')} of its iteration excluded by the misjudgment check"
            )
        )
        lines += [_indent(f"{terminal_text(x.pair_id)}: {terminal_text(x.answer_check)}", 2) for x in p.excluded]
    for i, case in enumerate(p.cases, start=1):
        lines += _case(i, case)
    return lines


def _verdicts(item: JudgedItem) -> str:
    if not item.verdicts:
        return item.outcome
    parts = []
    for v in item.verdicts:
        shown = {"chosen_first": "chosen first", "rejected_first": "rejected first"}.get(
            v.order, f"the {v.order} response alone"
        )
        said = v.verdict or (f"score {number(v.score)}" if v.score is not None else f"no verdict ({v.invalid_reason})")
        picked = f" = the {v.picked}" if v.picked in ("chosen", "rejected") else ""
        reason = f", \u201c{_cut(v.reasoning, 240)}\u201d" if v.reasoning else ""
        parts.append(f"{shown}: {said}{picked}{reason}")
    return f"{item.outcome} ({'; '.join(parts)})"


def _example(title: str, x: ValidationExample) -> list[RenderableType]:
    lines: list[RenderableType] = [
        _indent(Text(f"{title}: pair {terminal_text(x.pair_id)} ({terminal_text(x.domain)})", style="bold")),
        _labelled("question", _cut(x.question, QUESTION_CHARS), 2),
        _labelled("rejected, rewritten", diff_text(x.diff), 2),
        _labelled(f"on the {x.control}", _verdicts(x.on_control), 2),
        _labelled("with the bias", _verdicts(x.with_bias), 2),
    ]
    ratio = f"; length ×{number(x.length_ratio, digits=2)}" if x.length_ratio is not None else ""
    lines.append(_labelled("answer check", x.answer_check + ratio, 2))
    return lines


def _examples(detail: BiasDetail) -> list[RenderableType]:
    e = detail.examples
    if e is None:
        return [
            _indent(
                Text(
                    "none: the bias was not validated on this run's test items, or its files are not there", style="dim"
                )
            )
        ]
    control = "the placebo (the same item, rewritten neutrally)" if e.control == "placebo" else "the unchanged item"
    lines: list[RenderableType] = [
        _indent(
            f"validation of iteration {e.iteration}, against {control}: of {plural(e.n_judged, 'item')} judged on both, "
            f"{e.n_flipped} flipped (right on the control, wrong with the bias), {e.n_unflipped} did not"
            + (f"; {plural(e.n_invalid, 'item')} not judged or invalid" if e.n_invalid else "")
            + f". Shown: {len(e.flipped)} flipped, {len(e.not_flipped)} not (drawn with seed {e.seed})."
        )
    ]
    for i, x in enumerate(e.flipped, start=1):
        lines += _example(f"flipped {i}", x)
    for i, x in enumerate(e.not_flipped, start=1):
        lines += _example(f"not flipped {i}", x)
    return lines


def print_bias(detail: BiasDetail, console: Console) -> None:
    """Print `detail` (see the module docstring)."""
    r = detail.row
    head = Text(terminal_text(r.name), style="bold")
    head.append(f"\n{r.id}", style="dim")
    head.append(f" · {terminal_text(detail.provenance.summary)} · ")
    head.append(r.status + ("" if r.in_library else " (not in the library)"))
    head.append(f" · {terminal_text(detail.library)}", style="dim")
    parts: list[RenderableType] = [head]
    if detail.reviews:
        line = Text("review: ", style="bold")
        line.append(_review_line(detail.reviews[0]))
        if len(detail.reviews) > 1:
            line.append(f" ({plural(len(detail.reviews), 'review')}, newest first below)", style="dim")
        parts.append(line)
    else:
        parts.append(
            Text(
                f"review: none yet (bias-discovery review {detail.run_dir or 'RUN_DIR'} {r.id} --decision ...)",
                style="dim",
            )
        )
    parts += [Text(""), Text(terminal_text(detail.definition))]
    if detail.manifestations:
        parts.append(_labelled("manifestations", "; ".join(terminal_text(m) for m in detail.manifestations)))
    sections = [("Numbers", _numbers(detail)), ("Provenance", _provenance(detail)), ("Examples", _examples(detail))]
    if len(detail.reviews) > 1:
        sections.append(("Reviews, newest first", [_indent(_review_line(review)) for review in detail.reviews]))
    for title, lines in sections:
        parts += [Text(""), Text(title, style="bold underline"), *lines]
    if detail.notes:
        parts += [Text(""), *(Text(f"note: {terminal_text(n)}", style="yellow") for n in detail.notes)]
    # Wrapped to the console's width, then printed line by line without the padding the
    # wrapping leaves at the end of lines (a capture or a pipe gets clean text).
    for segments in console.render_lines(Group(*parts), console.options, pad=False):
        line = Text()
        for segment in segments:
            if not segment.control:
                line.append(segment.text, segment.style)
        line.rstrip()
        console.print(line, soft_wrap=True, highlight=False)
