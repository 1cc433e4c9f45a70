"""`bias-discovery judge`: measure a judge model on a pairwise data set (and, with
``--compare``, on an exported Pro set, with the same engine)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from rich.table import Table

from ..config import RunConfig
from ..errors import BiasDiscoveryError
from ..formatting import percent, percent_range, plural
from ..options import DataOptions
from ..settings.judge import JudgeSettings
from ._common import app, console, fail, figure_column, format_validation_error, options_error, stacked, warn
from ._options import (
    CACHE,
    DATA_DIR,
    NO_CACHE,
    NO_REASONING_CAP,
    QUIET,
    REASONING,
    REASONING_CHARS,
    SKIP_BAD_ROWS,
    TIMEOUT,
    VERDICT,
    default_of,
    flag,
    option,
    reasoning_fields,
)

if TYPE_CHECKING:  # imported lazily at run time: the CLI must start fast
    from ..api import JudgeOutput, JudgeSummary, ScoreSummary
    from ..api.views import Calibration


def print_calibration(cal: Calibration) -> None:
    """ECE and Brier with their CIs, and the reliability bins as a small table."""
    from ..api.views import calibration_line

    console.print(calibration_line(cal), highlight=False, soft_wrap=True)
    console.print(reliability_table(cal))


def reliability_table(cal: Calibration) -> Table:
    """The reliability bins that hold verdicts: each bin's verdicts, mean confidence and accuracy."""
    table = Table(title="reliability (confidence = probability of the verdict's label)", title_justify="left")
    for column in ("confidence\nbin", "verdicts", "mean\nconfidence", "accuracy"):
        figure_column(table, column)
    for b in cal.bins:
        if b.n:
            table.add_row(f"{b.low:.2f}-{b.high:.2f}", str(b.n), percent(b.confidence), percent(b.accuracy))
    return table


def _print_score_notes(summary: JudgeSummary) -> None:
    """What P(rejected) means and the verdicts' calibration, for score verdicts."""
    if summary.score is not None:
        console.print(
            f"P(rejected): the judge's mean probability of preferring the rejected response over the "
            f"{summary.score.n} valid pairs (verdict token's P(A), P(B) renormalised; mean over the judged "
            f"orders), 95% Student-t CI over pairs; {summary.score_one_label} judgments had only one label "
            "among the verdict token's top log-probabilities",
            highlight=False,
        )
    if summary.calibration is not None:
        print_calibration(summary.calibration)


def judge_table(summary: JudgeSummary) -> Table:
    """Error (over its 95 % CI, stacked), JudgeBench's score and P(rejected) per domain and
    overall: one figure a line, so that the table keeps every figure whole at 80 columns."""
    mitigation = f", mitigation: {summary.mitigation}" if summary.mitigation != "none" else ""
    prompt = f", prompt: {summary.prompt}" if summary.prompt else ""
    verdict = ", verdict: score" if summary.score is not None else ""
    shown = f"pointwise, scale {summary.pointwise.scale}" if summary.pointwise else f"positions: {summary.positions}"
    table = Table(title=f"{summary.model} on {summary.data} ({shown}{mitigation}{verdict}{prompt})")
    pointwise = summary.pointwise is not None  # JudgeBench's score counts verdicts on pairs: none here
    table.add_column("domain", overflow="fold")
    for column in ("pairs", "valid", "error\n(95% CI)", *([] if pointwise else ["JudgeBench\nscore"])):
        figure_column(table, column)
    if summary.score is not None:
        figure_column(table, "P(rejected)\n(95% CI)")

    def with_ci(value: float | None, low: float | None, high: float | None) -> str:
        return stacked(percent(value), f"({percent_range(low, high)})")

    def score_cells(score: ScoreSummary | None) -> list[str]:
        if summary.score is None:
            return []
        return ["-"] if score is None else [with_ci(score.mean_p_rejected, score.ci_low, score.ci_high)]

    for domain, d in summary.per_domain.items():
        table.add_row(
            domain,
            str(d.n),
            str(d.n_valid),
            with_ci(d.error_rate, d.ci_low, d.ci_high),
            *([] if pointwise else [percent(d.judgebench_score)]),
            *score_cells(d.score),
        )
    table.add_row(
        "all",
        str(summary.n_pairs),
        str(summary.n_valid_pairs),
        with_ci(summary.error_rate, summary.error_ci_low, summary.error_ci_high),
        *([] if pointwise else [percent(summary.judgebench_score)]),
        *score_cells(summary.score),
        style="bold",
    )
    return table


def print_judge_summary(summary: JudgeSummary) -> None:
    table = judge_table(summary)
    console.print(table)
    _print_score_notes(summary)
    if summary.pointwise is not None:
        print_pointwise(summary)
        return
    orders = "both orders" if summary.positions == "both" else "one order per pair"
    console.print(
        f"error: share of the valid pairs judged wrong in at least one order (both-orders-correct rule). "
        f"JudgeBench score: share of all {plural(summary.n_pairs, 'pair')} whose net vote over {orders} is positive "
        f"(+1 right, -1 wrong, 0 invalid): {percent(summary.judgebench_score)} (95% CI "
        f"{percent_range(summary.judgebench_ci_low, summary.judgebench_ci_high)}; {plural(summary.judgebench_ties, 'pair')} at net 0)",
        highlight=False,
    )
    console.print(
        f"invalid pairs: {percent(summary.invalid_rate)} ({plural(summary.n_invalid_judgments, 'invalid judgment')}"
        f"{': ' + ', '.join(f'{k} {v}' for k, v in summary.invalid_reasons.items()) if summary.invalid_reasons else ''})"
        f" | position-A rate: {percent(summary.position_a_rate)}"
        + (
            f" | consistency: {percent(summary.position_consistency)}"
            if summary.position_consistency is not None
            else ""
        )
        + f" | tokens: {summary.prompt_tokens} prompt, {summary.completion_tokens} completion"
        f" | cached calls: {summary.cached_calls}/{summary.n_judgments}",
        highlight=False,
    )
    for reason, example in summary.invalid_examples.items():
        console.print(
            f"{reason} ({summary.invalid_reasons.get(reason, 0)}): {example}", highlight=False, soft_wrap=True
        )
    if summary.skipped_rows:
        console.print(
            f"skipped bad data rows: {summary.skipped_rows}, not among the pairs above (named on stderr)",
            highlight=False,
        )


def print_pointwise(summary: JudgeSummary) -> None:
    """A pointwise judge's scores, ties and length correlation, each with its n and CI."""
    pw = summary.pointwise
    assert pw is not None

    def mean(value: float | None, ci: tuple[float, float] | None) -> str:
        return "-" if value is None else f"{value:.2f}" + (f" (95% CI {ci[0]:.2f} to {ci[1]:.2f})" if ci else "")

    console.print(
        f"error: share of the valid pairs whose rejected response scored at least as high as the chosen one "
        f"(ties included). Pointwise judges have no position: each response is scored alone. Over {pw.n} pairs with both "
        f"scores: chosen {mean(pw.mean_chosen, pw.chosen_ci)}, rejected {mean(pw.mean_rejected, pw.rejected_ci)}; "
        f"ties {pw.ties} ({percent(pw.tie_rate)}, 95% CI {percent_range(*(pw.tie_ci or (None, None)))}), "
        f"rejected higher {pw.rejected_higher}; scores from probabilities {pw.from_probabilities}, sampled {pw.from_sampled}",
        highlight=False,
    )
    rho = "-" if pw.length_rho is None else f"{pw.length_rho:+.2f}"
    ci = f" (95% CI {pw.length_rho_ci[0]:+.2f} to {pw.length_rho_ci[1]:+.2f})" if pw.length_rho_ci else ""
    console.print(
        f"score vs response length (words): Spearman rho {rho}{ci}, n = {pw.length_n} scored responses "
        "(chosen and rejected together: describes the judge, does not isolate a length bias)",
        highlight=False,
    )
    console.print(
        f"invalid pairs: {percent(summary.invalid_rate)} ({plural(summary.n_invalid_judgments, 'invalid judgment')}"
        f"{': ' + ', '.join(f'{k} {v}' for k, v in summary.invalid_reasons.items()) if summary.invalid_reasons else ''})"
        f" | tokens: {summary.prompt_tokens} prompt, {summary.completion_tokens} completion"
        f" | cached calls: {summary.cached_calls}/{summary.n_judgments}",
        highlight=False,
    )


def _check_compare_dir(value: Path | None) -> Path | None:
    """`judge --compare` callback: refuse a directory that is not a Pro set before judging."""
    if value is None:
        return None
    from ..api.exports import check_pro_dir

    try:
        return check_pro_dir(value)
    except BiasDiscoveryError as exc:
        fail(str(exc))


def _judge_fields(
    *, mode: str, positions: str, scale: str, rubric: str | None, prompt: str | None, **rest: object
) -> dict[str, object]:
    """The judge settings the flags give: a pointwise judge takes --scale and --rubric and no
    position option left at its default (no choice of the user's); a pairwise one refuses them."""
    fields: dict[str, object] = {"mode": mode, "positions": positions, **rest}
    if prompt is not None:
        fields["prompt"] = prompt
    if mode == "pointwise":
        fields.update(scale=scale, rubric=rubric)
        if positions == default_of(JudgeSettings, "positions"):
            del fields["positions"]
    elif rubric is not None or scale != default_of(JudgeSettings, "scale"):
        fail("--scale and --rubric are pointwise settings: give --mode pointwise too")
    return fields


_PROMPT: Any = flag(
    "prompt",
    None,
    help="Default: judge_pairwise; pointwise: judge_pointwise (judge_pointwise_rubric with --rubric). Judge prompt: "
    "judge_pairwise (a neutral question, as in the paper), judge_pairwise_mitigated (tells the judge to ignore style, "
    "length and position), or a path to your own template file. Agent trajectories are judged with the shipped "
    "prompts' judge_trajectory_* twins (the policy once, each run as a transcript).",
)
_MITIGATION: Any = option(
    JudgeSettings,
    "mitigation",
    help="Position-bias mitigation: none | swap (both orders, a disagreement is a tie; 2 calls) | shuffle3 (3 "
    "alternating orders, majority; 3 calls) | votes6 (Chen et al.'s 6 votes; 6 calls).",
)
_COMPARE: Any = flag(
    "compare",
    None,
    metavar="PRO_DIR",
    callback=lambda value: _check_compare_dir(value),
    help="Also judge the exported Pro set in PRO_DIR (--limit applies to it too); print error per domain side by "
    "side, write compare.json.",
)


@app.command()
def judge(
    model: str = flag(
        "model",
        ...,
        help="Judge model spec, provider/model: hf/smollm2 (the embedded default), llamacpp/smollm2, openai/NAME, vllm/HF_ID.",
    ),
    data: str = flag(
        "data",
        ...,
        help="demo, judgebench[:gpt|:claude], rewardbench, taubench, or a .jsonl/.json/.parquet/.eval path.",
    ),
    out: Path | None = flag(
        "out", None, help="Output directory for judgments.jsonl and summary.json (none: the summary is only printed)."
    ),
    data_dir: Path | None = DATA_DIR,
    limit: int | None = option(DataOptions, "limit", help="Judge only the first N pairs."),
    positions: str = option(JudgeSettings, "positions", help="both | swap | fixed (pairwise only)."),
    mode: str = option(
        JudgeSettings, "mode", help="pairwise (pick one of two) | pointwise (score each response alone on --scale)."
    ),
    scale: str = option(JudgeSettings, "scale", help="Pointwise: an integer range such as 1-10, or pass/fail."),
    rubric: str | None = flag(
        "rubric",
        None,
        help="Pointwise: the rubric text (selects the judge_pointwise_rubric prompt unless --prompt is given).",
    ),
    seed: int = option(RunConfig, "seed", help="Seed for the position swap and sampling."),
    base_url: str | None = flag("base_url", None, help="Server URL for openai/ models, e.g. http://127.0.0.1:8000/v1."),
    reasoning: bool = REASONING,
    reasoning_chars: int | None = REASONING_CHARS,
    no_reasoning_cap: bool = NO_REASONING_CAP,
    prompt: str | None = _PROMPT,
    allow_tie: bool = option(JudgeSettings, "allow_tie", help="Offer a third verdict, tie (never counted correct)."),
    mitigation: str = _MITIGATION,
    max_tokens: int = option(
        JudgeSettings,
        "max_tokens",
        help="Completion token budget per judgment; must cover the reasoning.",
    ),
    verdict: str = VERDICT,
    cache: Path | None = CACHE,
    no_cache: bool = NO_CACHE,
    skip_bad_rows: bool = SKIP_BAD_ROWS,
    timeout: float | None = TIMEOUT,
    compare: Path | None = _COMPARE,
    quiet: bool = QUIET,
) -> None:
    """Measure a judge on a pairwise data set.

    Error rate per domain with its confidence interval, JudgeBench's own score, invalid rate,
    position-A rate and position consistency; writes judgments.jsonl and summary.json."""
    from ..api import JudgeOptions
    from ..api import judge as judge_model
    from ..progress import progress_bar

    if compare is not None and out is None:
        fail("--compare writes compare.json and the Pro set's judgments: give --out DIR too")
    try:
        fields = _judge_fields(
            mode=mode,
            positions=positions,
            scale=scale,
            rubric=rubric,
            prompt=prompt,
            max_tokens=max_tokens,
            allow_tie=allow_tie,
            mitigation=mitigation,
            verdict=verdict,
            **reasoning_fields(reasoning, reasoning_chars, no_reasoning_cap),
        )
        settings = JudgeSettings.model_validate(fields)
        options = JudgeOptions(
            settings=settings,
            out=out,
            base_url=base_url,
            data_dir=data_dir,
            limit=limit,
            seed=seed,
            cache=False if no_cache else (cache or True),
            skip_bad_rows=skip_bad_rows,
            compare=compare,
            timeout_s=timeout,
        )
        output = judge_model(model, data, options, progress=None if quiet else progress_bar, on_warning=warn)
    except ValidationError as exc:
        fail(options_error(exc) if exc.title == "JudgeOptions" else format_validation_error(exc))
    except BiasDiscoveryError as exc:
        fail(str(exc))
    print_judge_output(output, out)


def print_judge_output(output: JudgeOutput, out: Path | None) -> None:
    """`judge`'s last step: the summary, what was written, and the Pro comparison (`--compare`)."""
    from ..api.views import print_compare

    print_judge_summary(output.summary)
    if out is None:
        console.print(
            "no --out: the judgments were not written (--out DIR keeps judgments.jsonl and summary.json)",
            highlight=False,
        )
        return
    console.print(f"wrote {out / 'judgments.jsonl'} and {out / 'summary.json'}", highlight=False)
    if output.compare is not None:
        print_compare(output.compare, console)
        console.print(
            f"wrote {out / 'compare.json'}, {out / 'pro_summary.json'} and {out / 'pro_judgments.jsonl'}",
            highlight=False,
        )
