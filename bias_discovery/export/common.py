"""What every export shares: bias selection, the run's models, output staging, data files.

- `select_biases`: which biases of a run's latest library an export uses (``all``, ``top-K``
  or explicit ids/names).
- `RunContext`: a run directory's config, library and models (`ModelRoles`); every model goes
  through the run's call cache (``RUN_DIR/calls.sqlite``), so a repeated export never pays twice.
- `check_output_dir` / `staged_output`: an export is written into a temporary directory next
  to ``--out`` and renamed into place at the end; a failure leaves nothing half-written.
- `write_data_files`: ``data.jsonl`` and ``data.parquet`` with an explicit schema (parquet
  written atomically, an empty set as a file without row groups).
- `length_stats`: average whitespace-token lengths (see `count_tokens`).
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from pydantic import BaseModel

from ..config import RunConfig, load_run_config
from ..data.loaders import describe_source, load_pairs
from ..data.overlap import DataOverlap, PairKey, check_overlap, content_hash, find_overlap, pair_keys
from ..data.pairs import PreferencePair
from ..errors import BiasDiscoveryError
from ..io import atomic_write_jsonl, probe_writable
from ..library import Bias, BiasLibrary
from ..llm.base import Engine
from ..llm.config import ModelConfig
from ..llm.roles import ModelRoles
from ..run import RunDir
from ..stages.rewrite_checks import TOKEN_COUNT_METHOD, count_tokens


class ExportError(BiasDiscoveryError):
    """An export cannot be made as asked (no biases, unknown bias, bad output directory...)."""


def package_version() -> str:
    try:
        from importlib.metadata import version

        return version("bias-discovery")
    except Exception:  # pragma: no cover - running from an uninstalled checkout
        return "unknown"


# --------------------------------------------------------------------------------------------
# Bias selection
# --------------------------------------------------------------------------------------------


def validated_biases(library: BiasLibrary) -> list[Bias]:
    """The discovered biases whose test-set validation accepted them, in library order."""
    return [
        b
        for b in library.biases
        if b.origin.kind == "discovered" and b.validation is not None and b.validation.accepted
    ]


_TOP_K = re.compile(r"^top-(\d+)$", re.I)


def _available(library: BiasLibrary) -> str:
    return ", ".join(library.ids()) or "none"


def select_biases(library: BiasLibrary, spec: str | None, *, run_dir: Path | str) -> list[Bias]:
    """The biases an export uses.

    - ``None`` or ``"all"``: every validated-and-accepted discovered bias;
    - ``"top-K"``: the K accepted ones with the largest reported effect (`BiasValidation.effect`:
      honest after an early stop; fewer if there are fewer);
    - ``"ID,NAME,..."``: the named biases, in the given order, duplicates once; an entry
      matches a bias id exactly, else a bias name case-insensitively (or its slug). Seed
      biases may be named too.

    Raises ExportError for an empty selection (naming the available ids and how to name them
    explicitly) and for an entry that names no bias (listing the available ids).
    """
    text = (spec or "all").strip()
    if text.lower() == "all" or _TOP_K.match(text):
        chosen = validated_biases(library)
        match = _TOP_K.match(text)
        if match:
            k = int(match.group(1))
            if k < 1:
                raise ExportError(f"--biases {text}: K must be at least 1")
            chosen = sorted(chosen, key=lambda b: -(b.validation.effect.delta if b.validation else 0.0))[:k]
        if not chosen:
            raise ExportError(
                f"run {run_dir} has no validated biases; name "
                f"biases explicitly with --biases ID,...  available: {_available(library)}"
            )
        return chosen
    entries = [part.strip() for part in text.split(",") if part.strip()]
    if not entries:
        raise ExportError(f"--biases {spec!r} names no bias; available: {_available(library)}")
    chosen, seen, unknown = [], set(), []
    for entry in entries:
        bias = library.find(entry)
        if bias is None:
            unknown.append(entry)
        elif bias.id not in seen:
            seen.add(bias.id)
            chosen.append(bias)
    if unknown:
        names = ", ".join(repr(u) for u in unknown)
        raise ExportError(
            f"unknown bias {names} in run {run_dir}; available ids: {_available(library)}"
        )
    return chosen


COMPARISON_FIELDS = {"n", "delta", "ci_low", "ci_high", "p_value", "p_adjusted"}
"""What the exports report of each validation comparison (vs baseline, vs placebo)."""


def bias_summary(bias: Bias) -> dict[str, Any]:
    """What a dataset card and stats.json say about one bias: its reported effect (against the
    control that decided, with CI, n and the estimator), its comparisons against the baseline
    and, when the run had one, the placebo, each with CI, n and p, and what the decision
    controls (a Δ without its comparison, n and uncertainty is not a finding)."""
    v = bias.validation
    placebo = None if v is None else v.vs_placebo
    decided = None if v is None else v.decisive_comparison
    return {
        "id": bias.id,
        "name": bias.name,
        "definition": bias.definition,
        "manifestations": list(bias.manifestations),
        "origin": bias.origin.kind,
        "iteration": bias.origin.iteration,
        "validated": bool(v is not None and v.accepted),
        "decided_against": None if v is None else v.decisive,
        "effect": None if v is None else v.effect.model_dump(mode="json"),
        "delta_error": None if v is None else v.effect.delta,
        "p_value": None if decided is None else decided.p_value,
        "vs_baseline": None if v is None else v.vs_baseline.model_dump(include=COMPARISON_FIELDS),
        "vs_placebo": None if placebo is None else placebo.model_dump(include=COMPARISON_FIELDS),
        "error_statement": None if v is None else v.error_statement,
    }


# --------------------------------------------------------------------------------------------
# The run: config, library, models through the call cache
# --------------------------------------------------------------------------------------------


class RunContext:
    """A finished (or stopped) run directory, read for an export: its config, its newest
    library, and its models (`roles`), every one through the run's call cache."""

    def __init__(
        self, run_dir: Path | str, *, engines: Mapping[str, Engine] | None = None, timeout_s: float | None = None
    ) -> None:
        """`engines` replaces roles by ready engines (tests use scripted fakes); `timeout_s`
        (`--timeout`) replaces every model's request deadline (None: the run's)."""
        self.run = RunDir(run_dir)
        self.run.require_run()
        self.timeout_s = timeout_s
        self.config: RunConfig = load_run_config(self.run.config_path).with_timeout(timeout_s)
        self.library: BiasLibrary = self.run.library.load_latest()
        self._engines = dict(engines or {})
        self._roles: ModelRoles | None = None

    @property
    def root(self) -> Path:
        return self.run.root

    @property
    def library_file(self) -> str:
        """The library the export read, relative to the run directory."""
        store = self.run.library
        iterations = store.iterations()
        path = store.path_for(iterations[-1]) if iterations else store.latest_path
        return str(path.relative_to(self.run.root))

    def roles(self, configs: Mapping[str, ModelConfig]) -> ModelRoles:
        """The export's models by role (teacher, checker, filter ...): roles with the same
        config share one engine (the teacher doubling as equivalence checker is loaded once)."""
        if self._roles is not None:
            raise RuntimeError("RunContext.roles is called once per export")
        configs = {role: config.with_timeout(self.timeout_s) for role, config in configs.items()}
        self._roles = ModelRoles(configs, cache_path=self.run.cache_path, engines=self._engines)
        return self._roles

    def close(self) -> None:
        if self._roles is not None:
            self._roles.close()

    def __enter__(self) -> "RunContext":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def discovery_keys(run: RunDir, config: RunConfig) -> tuple[list[PairKey], str]:
    """The items a run discovered its biases on, and their description: the target pairs its
    iterations perturbed (with their original texts), else its configured target data."""
    keys: dict[str, str] = {}
    for t in run.iterations():
        perturbed = run.iteration(t).perturbed
        if t > 0 and perturbed.exists():
            for pair in perturbed.read():
                keys.setdefault(pair.pair_id, content_hash(pair.question, pair.chosen, pair.original_rejected))
    if keys:
        return [PairKey(i, c) for i, c in keys.items()], f"run {run.root.name}'s {len(keys)} target pairs"
    d = config.data
    pairs = load_pairs(d.target, data_dir=d.data_dir, limit=d.target_limit, seed=config.seed)
    return pair_keys(pairs), f"run {run.root.name}'s data.target {describe_source(d.target, d.data_dir, portable=True)}"


def check_run_overlap(
    run: RunDir, config: RunConfig, pairs: Sequence[PreferencePair], *, data_name: str, allow: bool
) -> DataOverlap:
    """`pairs` (data a run's biases are measured on) against the items the run discovered them
    on, by id and content: refused unless `allow` (`--allow-overlap`), recorded either way."""
    keys, name = discovery_keys(run, config)
    overlap = find_overlap(keys, pair_keys(pairs), discovery_name=name, validation_name=data_name)
    return check_overlap(overlap, allow=allow, how_to_allow="pass --allow-overlap")


def model_config(spec: str | None, base_url: str | None, default: ModelConfig) -> ModelConfig:
    """`spec` (+ `base_url`) as a ModelConfig, or `default` when no spec is given."""
    if spec is None:
        if base_url:
            return default.model_copy(update={"base_url": base_url})
        return default
    return ModelConfig.from_spec(spec, **({"base_url": base_url} if base_url else {}))


# --------------------------------------------------------------------------------------------
# Output directory: check early, write into a temp dir, rename at the end
# --------------------------------------------------------------------------------------------


def check_output_dir(out: Path, *, overwrite: bool, protect: Sequence[Path] = ()) -> None:
    """Refuse an --out that exists and is not an empty directory (unless `overwrite`), one
    that is or contains a protected path (the run directory: --overwrite must never delete it),
    and one whose parent cannot be written (`staged_output` writes and renames there): proved
    with a probe file before any model call is paid for."""
    out_resolved = out.resolve()
    for path in protect:
        p = path.resolve()
        if out_resolved == p or out_resolved in p.parents:
            raise ExportError(f"--out {out} is or contains {path}; pick another output directory")
    if out.is_symlink() or out.exists():
        if not out.is_dir():
            raise ExportError(f"--out {out} exists and is not a directory")
        if any(out.iterdir()) and not overwrite:
            raise ExportError(
                f"--out {out} exists and is not empty; pass --overwrite to replace it, or pick "
                "another directory"
            )
    probe_writable(out.absolute().parent, what=f"--out {out}: its folder")


@contextmanager
def staged_output(out: Path, *, overwrite: bool, protect: Sequence[Path] = ()) -> Iterator[Path]:
    """Yield a fresh temporary directory next to `out`; on success it replaces `out`.

    On any exception the temporary directory is removed and `out` is left as it was. An
    existing `out` (empty, or any with `overwrite`) is moved aside, the new one renamed in,
    and the old one deleted; if the rename fails, the old one is put back.
    """
    check_output_dir(out, overwrite=overwrite, protect=protect)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        yield tmp
        check_output_dir(out, overwrite=overwrite, protect=protect)
        if out.exists():
            old = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
            os.rename(out, old)
            try:
                os.rename(tmp, out)
            except BaseException:
                os.rename(old, out)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# --------------------------------------------------------------------------------------------
# Data files
# --------------------------------------------------------------------------------------------


def atomic_write_parquet(path: Path, rows: Sequence[Mapping[str, Any]], schema: Any) -> None:
    """Write `rows` as parquet with `schema`, atomically (temp file + rename).

    An empty set is written without any row group: `datasets` then reads it without error
    (a zero-row row group makes its parquet reader fail on "BatchSize must be greater than 0").
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        if rows:
            pq.write_table(pa.Table.from_pylist([dict(r) for r in rows], schema=schema), tmp)
        else:
            pq.ParquetWriter(tmp, schema).close()
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_data_files(directory: Path, rows: Sequence[Mapping[str, Any]], schema: Any) -> None:
    """``data.jsonl`` and ``data.parquet`` in `directory`, the same rows in both, columns in
    schema order."""
    names = list(schema.names)
    ordered = [{name: row.get(name) for name in names} for row in rows]
    atomic_write_jsonl(directory / "data.jsonl", ordered)
    atomic_write_parquet(directory / "data.parquet", ordered, schema)


def string_schema(names: Sequence[str]) -> Any:
    import pyarrow as pa

    return pa.schema([(name, pa.string()) for name in names])


# --------------------------------------------------------------------------------------------
# Lengths
# --------------------------------------------------------------------------------------------


class LengthStats(BaseModel):
    """Average lengths in whitespace tokens (`count_tokens`), over `n` samples."""

    n: int
    method: str = TOKEN_COUNT_METHOD
    chosen: float | None
    original_rejected: float | None
    new_rejected: float | None
    relative_increase: float | None
    """(new_rejected - original_rejected) / original_rejected; the paper reports +8.4 %."""


def length_stats(triples: Sequence[tuple[str, str, str]]) -> LengthStats:
    """`triples` = (chosen, original rejected, new rejected) per sample."""
    n = len(triples)
    if n == 0:
        return LengthStats(n=0, chosen=None, original_rejected=None, new_rejected=None, relative_increase=None)
    chosen = sum(count_tokens(c) for c, _, _ in triples) / n
    original = sum(count_tokens(o) for _, o, _ in triples) / n
    new = sum(count_tokens(r) for _, _, r in triples) / n
    return LengthStats(
        n=n,
        chosen=chosen,
        original_rejected=original,
        new_rejected=new,
        relative_increase=(new - original) / original if original else None,
    )


CARD_MISSING = "n/a"
"""What a dataset card prints for a missing number (`bias_discovery.formatting` formats them)."""


def dataset_card_meta(
    directory: Path, *, split: str, n_rows: int, extra: Mapping[str, Any]
) -> dict[str, Any]:
    """The card's YAML metadata: `extra`, then `configs` (the default config reads
    ``data.parquet`` as `split`) and `dataset_info` (rows and bytes of the file).

    `dataset_info` is not decoration: with `configs` in a card, `datasets` keys its cache on
    the folder name and the card only, not on the data files, so a rewritten ``data.parquet``
    (apply-annotations, --overwrite) would be served from the stale cache. Rows and bytes in
    the card change that key whenever the data changes (and `datasets` checks the row count).
    """
    path = directory / "data.parquet"
    size = path.stat().st_size if path.is_file() else 0
    return {
        **extra,
        "configs": [{"config_name": "default", "data_files": [{"split": split, "path": "data.parquet"}]}],
        "dataset_info": {
            "splits": [{"name": split, "num_bytes": size, "num_examples": n_rows}],
            "download_size": size,
            "dataset_size": size,
        },
    }


def yaml_front_matter(meta: Mapping[str, Any]) -> str:
    import yaml

    return "---\n" + yaml.safe_dump(dict(meta), sort_keys=False, allow_unicode=True) + "---\n"


def settings_text(settings: Mapping[str, Any]) -> str:
    """``positions=both, seed=42, ...`` for a card."""
    return ", ".join(f"{k}={v}" for k, v in settings.items())


def one_line(text: str) -> str:
    """Collapse whitespace so a definition fits a Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")
