"""`judge(model, data)`: measure a judge model on a pairwise data set (what `bias-discovery
judge` runs), optionally on an exported Pro set too, with the same engine; its summary is a
`JudgeSummary` (a pointwise judge's scores: `ScoreSummary`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from ..config import DEFAULT_SEED
from ..data.loaders import describe_source
from ..errors import OutputError
from ..export.compare import CompareReport, check_pro_dir, compare_with_pro
from ..formatting import plural
from ..io import atomic_write_json, atomic_write_jsonl, probe_writable
from ..judging import JudgeSummary, Judgment, PairOutcome, ScoreSummary, calls_per_pair, judge_pairs, summarize
from ..llm.base import Engine
from ..llm.config import ModelConfig
from ..options import CallOptions, DataOptions
from ..progress import ProgressFactory, progress_or_quiet
from ..settings.judge import JudgeSettings
from ..tables import Tabular
from ._common import WarningHandler, cache_path_of, load_data, model_config_of, python_warning

__all__ = ["JudgeOptions", "JudgeOutput", "JudgeSummary", "ScoreSummary", "judge"]


class JudgeOutput(BaseModel, Tabular):
    """A judge measured on one data set: its `summary` (summary.json: error with a Wilson CI,
    per domain, invalid rate, position-A rate, JudgeBench's score), every judged order
    (`judgments`, judgments.jsonl) and each pair's combined verdict (`outcomes`); with a Pro set,
    the side-by-side `compare`. As a table: one row per judged order (`Judgment`'s fields)."""

    row_model: ClassVar[type[BaseModel]] = Judgment

    summary: JudgeSummary
    judgments: list[Judgment]
    outcomes: list[PairOutcome]
    compare: CompareReport | None = None
    out: Path | None = None
    """Where judgments.jsonl and summary.json were written (None: nowhere)."""

    def table_rows(self) -> list[dict[str, Any]]:
        return [j.model_dump() for j in self.judgments]


class JudgeOptions(DataOptions, CallOptions):
    """How one data set is judged (`bias-discovery judge`'s options, the arguments of
    `api.judge`): the judge's settings, where the data and the outputs are, the call cache.
    `limit` (inherited, as are the data's and the deadline's fields) judges the first N pairs,
    of the Pro set too."""

    settings: JudgeSettings = Field(default_factory=JudgeSettings)
    """The judge: positions, prompt, reasoning, mitigation, verdict ... (a dict of its fields
    is read as one)."""
    out: Path | None = None
    """A directory for judgments.jsonl and summary.json, proved writable before the first call
    (None: nothing is written)."""
    base_url: str | None = None
    """The server of an `openai/` model (sets or replaces the model config's)."""
    seed: int = DEFAULT_SEED
    """Seed of the position swaps and of sampling."""
    cache: Path | bool = True
    """True: the shared call cache; False: none; or a SQLite file."""
    compare: Path | None = None
    """An exported Pro set, judged with the same engine after the data (its files go to `out`)."""
    """Each request's deadline, retries included (None: the model config's)."""


def judge(
    model: str | ModelConfig,
    data: str | Path,
    options: JudgeOptions | None = None,
    *,
    progress: ProgressFactory | None = None,
    engine: Engine | None = None,
    on_warning: WarningHandler | None = None,
    **overrides: Any,
) -> JudgeOutput:
    """Judge every pair of `data` (``demo``, ``judgebench``, a file ...) with `model` and
    score it, as `options` (`JudgeOptions`) and keyword `overrides` of its fields say
    (``judge(model, "demo", limit=4, settings={"positions": "swap"})``).

    `engine` replaces the model (tests; it is not closed here). Raises BiasDiscoveryError
    subclasses with a one-line message, and pydantic's ValidationError naming an option or
    setting that does not validate.
    """
    opts = JudgeOptions.with_overrides(options, overrides)
    warn = on_warning or python_warning
    judge_settings = opts.settings
    config = model_config_of(model, opts.base_url, opts.timeout_s)
    out_dir = Path(opts.out) if opts.out is not None else None
    if out_dir is not None:
        if out_dir.exists() and not out_dir.is_dir():
            raise OutputError(f"`out` {out_dir} exists and is not a directory")
        probe_writable(out_dir, what="`out`")  # before any call is paid for, not after all of them
    pro_dir = check_pro_dir(Path(opts.compare), judge_settings) if opts.compare is not None else None
    pairs, bad_rows = load_data(
        data, data_dir=opts.data_dir, limit=opts.limit, skip_bad_rows=opts.skip_bad_rows, warn=warn
    )
    cache_path = cache_path_of(opts.cache)
    own_engine = engine is None
    if engine is None:
        from ..llm import registry  # through the module: tests replace registry.make_engine

        engine = registry.make_engine(config, cache_path=cache_path)
    # One engine for the data set and the Pro set: a model is loaded once (with vLLM, a second
    # `LLM()` in one process would not fit), and closed once, on any exit.
    try:
        bar = progress_or_quiet(progress)
        with bar(f"judging {plural(len(pairs), 'pair')}", len(pairs) * calls_per_pair(judge_settings)) as advance:
            result = judge_pairs(engine, pairs, judge_settings, seed=opts.seed, progress=advance)
        summary = summarize(
            result,
            model=config.spec,
            data=describe_source(data, opts.data_dir),
            settings=judge_settings,
            seed=opts.seed,
        )
        summary.skipped_rows = len(bad_rows)
        output = JudgeOutput(summary=summary, judgments=result.judgments, outcomes=result.outcomes, out=out_dir)
        if out_dir is not None:
            _write(out_dir, output, cache_path)
        if pro_dir is not None:
            output.compare = compare_with_pro(
                config,
                judge_settings,
                summary,
                pro_dir,
                out=out_dir,
                cache_path=cache_path,
                seed=opts.seed,
                limit=opts.limit,
                progress=progress,
                engine=engine,
            )
        return output
    finally:
        if own_engine:
            engine.close()


def _write(out: Path, output: JudgeOutput, cache_path: Path | None) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_jsonl(out / "judgments.jsonl", output.judgments)
        atomic_write_json(out / "summary.json", output.summary)
    except OSError as exc:  # the probe passed, then the disk filled up or the folder went
        rerun = f" (the calls are in the call cache {cache_path}: a rerun is free)" if cache_path else ""
        raise OutputError(f"cannot write to `out` {out}: {exc.strerror or exc}{rerun}") from None
