"""Read a judge's existing verdicts (`audit --from-log`): our judgments.jsonl, inspect_ai eval
logs, or any JSONL / CSV / parquet file with a column map. No model is called.

Every log is normalised to the same shape: *pairs* with two responses, 0 and 1, and
*verdicts*, each one judged order of one pair (which response was shown first, which one the
judge picked, the repeat, and the probability the judge gave the first response when it
logged one). Response 0 is the labelled better response when the log has labels (so the
audit's "chosen" is response 0); without labels it is the response shown first in the pair's
first row, and every measure that needs to know which response is better is reported as not
supported.

A malformed row is a DataError naming the file and line (CSV, JSONL), the row (parquet) or the
sample (inspect), and the field, as the data loaders do; nothing is computed from a log with
one bad row.
"""

from __future__ import annotations

import csv
import io
import json
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..data.loaders import load_pairs
from ..errors import DataError, json_problem
from ..io import read_utf8, scan_jsonl
from ..metrics import Preference
from ..stages.rewrite_checks import count_tokens

__all__ = ["ColumnMap", "LoadedLog", "LogFormat", "LogPair", "LogVerdict", "read_log"]

LogFormat = Literal["judgments", "inspect", "generic"]
Response = Literal[0, 1]
_VERDICTS = {"a": "A", "b": "B", "tie": "tie"}
_LABELS = {"a": "A", "b": "B", "a>b": "A", "b>a": "B"}
_ORDERS: dict[str, Response] = {
    "ab": 0,
    "original": 0,
    "0": 0,
    "chosen_first": 0,
    "ba": 1,
    "swapped": 1,
    "1": 1,
    "rejected_first": 1,
}


class ColumnMap(BaseModel):
    """Which column of a generic log (one row per judged order of a pair) holds what. Only
    `pair_id` and `verdict` are required; every other column unlocks the measures that need it.

    The responses, lengths and models are *as shown*: ``response_a`` is the response shown
    first. ``verdict`` is A, B or tie (case does not matter; `verdict_values` maps other
    values). ``label`` names the better response as shown: A, B, A>B or B>A. ``order`` (when
    there is no label) says whether the pair's own first response was shown first: AB /
    original / 0 or BA / swapped / 1. ``probability`` is the judge's probability that the
    response shown first (A) is better."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pair_id: str = "pair_id"
    """The pair's id: the rows of one pair (its orders, its repeats) share it."""
    verdict: str = "verdict"
    """The judge's verdict on the order shown: A, B or tie (or a value of `verdict_values`)."""
    label: str | None = None
    """The better response as shown (A, B, A>B, B>A): agreement with the labels, and the order."""
    order: str | None = None
    """Whether the pair's own first response was shown first (AB / original / 0, BA / swapped / 1)."""
    probability: str | None = None
    """The judge's probability that the response shown first is better: calibration."""
    response_a: str | None = None
    """The response shown first (its length is counted when no `length_a` is given)."""
    response_b: str | None = None
    """The response shown second."""
    length_a: str | None = None
    """The length of the response shown first (tokens or words, as the log counts them)."""
    length_b: str | None = None
    """The length of the response shown second."""
    model_a: str | None = None
    """The model that wrote the response shown first."""
    model_b: str | None = None
    """The model that wrote the response shown second."""
    judge_model: str | None = None
    """The judge that gave the verdict (self-preference reads its family)."""
    repeat: str | None = None
    """The repeat (0, 1, ...); without it a pair's rows in one order are repeats in file order."""
    domain: str | None = None
    """The pair's domain, for the per-domain figures."""
    verdict_values: dict[str, Literal["A", "B", "tie"]] = Field(default_factory=dict)
    """Extra verdict values, e.g. {"1": "A", "2": "B"}."""

    def columns(self) -> dict[str, str]:
        """The columns the map names, by key (the keys left unmapped are not listed)."""
        return {
            key: value
            for key in type(self).model_fields
            if key != "verdict_values" and isinstance(value := getattr(self, key), str)
        }

    @classmethod
    def parse(cls, text: str) -> ColumnMap:
        """``pair_id=qid,verdict=choice,label=gold`` (the CLI's syntax), or the path of a YAML
        file with these keys (and `verdict_values`)."""
        path = Path(text)
        values: dict[str, Any]
        if path.suffix in (".yaml", ".yml") or path.is_file():
            try:
                loaded = yaml.safe_load(read_utf8(path, what="column map"))
            except yaml.YAMLError as exc:
                raise DataError(f"{path}: malformed YAML ({exc})") from None
            if not isinstance(loaded, dict):
                raise DataError(f"{path}: a column map is a mapping of key: column")
            values, where = loaded, str(path)
        else:
            values, where = {}, f"--columns {text!r}"
            for part in (p.strip() for p in text.split(",")):
                key, sep, value = part.partition("=")
                if part and (not sep or not key.strip() or not value.strip()):
                    raise DataError(f"{where}: entry {part!r} is not of the form key=column")
                if part:
                    values[key.strip()] = value.strip()
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'map'}: {e['msg']}" for e in exc.errors())
            raise DataError(f"{where}: invalid column map ({problems}); keys: {', '.join(cls.model_fields)}") from None


@dataclass
class LogPair:
    """One pair of the log: response 0 is the labelled better one (when `LoadedLog.labelled`)."""

    pair_id: str
    domain: str = "unknown"
    lengths: tuple[int, int] | None = None
    """Whitespace tokens of responses 0 and 1."""
    models: tuple[str, str] | None = None
    """The models that wrote responses 0 and 1."""
    texts: tuple[str, str] | None = None


@dataclass(frozen=True)
class LogVerdict:
    where: str
    pair_index: int
    first: Response
    """The response shown first."""
    picked: Preference | None
    """chosen = response 0, rejected = response 1, tie; None: invalid."""
    repeat: int
    p_first: float | None = None
    """The judge's probability that the response shown first is better."""


@dataclass
class LoadedLog:
    path: Path
    format: LogFormat
    pairs: list[LogPair]
    verdicts: list[LogVerdict]
    labelled: bool
    judge_model: str | None = None
    seed: int | None = None
    """The live audit's seed, when the log is an audit directory's judgments.jsonl."""
    skipped: dict[str, int] = field(default_factory=dict)
    """Rows not audited, by why (e.g. a perturbed condition of an audit)."""
    rows: int = 0


@dataclass
class _Builder:
    """Collects verdicts pair by pair, numbering repeats in file order where none is given."""

    pairs: list[LogPair] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)
    verdicts: list[LogVerdict] = field(default_factory=list)
    seen: dict[tuple[int, int], int] = field(default_factory=dict)

    def pair(self, pair_id: str, domain: str) -> int:
        if pair_id not in self.index:
            self.index[pair_id] = len(self.pairs)
            self.pairs.append(LogPair(pair_id=pair_id, domain=domain))
        return self.index[pair_id]

    def add(
        self, where: str, i: int, first: Response, picked: Preference | None, repeat: int | None, p_first: float | None
    ) -> None:
        key = (i, first)
        if repeat is None:
            repeat = self.seen.get(key, 0)
        self.seen[key] = max(self.seen.get(key, 0), repeat + 1)
        self.verdicts.append(LogVerdict(where, i, first, picked, repeat, p_first))


def _picked(verdict: str | None, first: Response) -> Preference | None:
    """The response a verdict letter points at, in the pair's frame."""
    if verdict is None:
        return None
    if verdict == "tie":
        return "tie"
    response = first if verdict == "A" else 1 - first
    return "chosen" if response == 0 else "rejected"


def _probability(where: str, name: str, value: Any) -> float | None:
    if value is None or value == "":
        return None
    try:
        p = float(value)
    except (TypeError, ValueError):
        raise DataError(f"{where}: field {name!r} has value {value!r}; expected a probability in [0, 1]") from None
    if not 0.0 <= p <= 1.0:
        raise DataError(f"{where}: field {name!r} has value {value!r}; expected a probability in [0, 1]")
    return p


# -- our judgments.jsonl --------------------------------------------------------------------


def _side_record(path: Path) -> dict[str, Any]:
    """audit.json or summary.json next to a judgments.jsonl (its model and seed), {} when none."""
    for name in ("audit.json", "summary.json"):
        side = path.with_name(name)
        if side.is_file():
            try:
                record = json.loads(side.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                raise DataError(f"{side}: malformed JSON next to the log {path.name}") from None
            return record if isinstance(record, dict) else {}
    return {}


def _judgment_fields(where: str, obj: dict[str, Any]) -> tuple[str, str, Any]:
    """A judgments.jsonl row's pair id, order and pick, each checked (the row named if not)."""
    pair_id, order, picked = obj.get("pair_id"), obj.get("order"), obj.get("picked")
    if "picked" not in obj:
        raise DataError(f"{where}: field 'picked' is missing (the verdict: chosen, rejected, tie or null)")
    if not isinstance(pair_id, str) or not pair_id:
        raise DataError(f"{where}: field 'pair_id' is missing or not a string")
    if order in ("chosen", "rejected"):
        raise DataError(
            f"{where}: field 'order' has value {order!r}: a pointwise judge's score of one response; --from-log "
            "audits pairwise verdicts only (audit a pointwise judge live: audit --mode pointwise)"
        )
    if order not in ("chosen_first", "rejected_first"):
        raise DataError(f"{where}: field 'order' has value {order!r}; expected chosen_first or rejected_first")
    if picked not in ("chosen", "rejected", "tie", None):
        raise DataError(f"{where}: field 'picked' has value {picked!r}; expected chosen, rejected, tie or null")
    return pair_id, order, picked


def _read_judgments(path: Path, data: str | None, data_dir: Path | None) -> LoadedLog:
    side = _side_record(path)
    seed = side.get("settings", {}).get("seed") if "settings" in side else side.get("seed")
    repeat_of: dict[int, int] = {}
    if isinstance(seed, int) and side.get("kind") == "audit":
        from .runner import repeat_seed

        repeat_of = {repeat_seed(seed, r): r for r in range(int(side["settings"].get("repeats", 1)))}
    b, rows = _Builder(), 0
    skipped: dict[str, int] = {}
    for line, obj, problem in scan_jsonl(path):
        if problem is not None or obj is None:
            raise DataError(problem or f"{path}:{line}: not a JSON object")
        rows += 1
        where = f"{path}:{line}"
        condition = obj.get("condition", "original")
        if condition != "original":
            skipped[f"condition {condition}"] = skipped.get(f"condition {condition}", 0) + 1
            continue
        pair_id, order, picked = _judgment_fields(where, obj)
        first: Response = 0 if order == "chosen_first" else 1
        p_rej = _probability(where, "p_rejected", obj.get("p_rejected"))
        p_first = None if p_rej is None else (1.0 - p_rej if first == 0 else p_rej)
        repeat = None
        if repeat_of and isinstance(obj.get("seed"), int):
            repeat = repeat_of.get(obj["seed"])
            if repeat is None:  # a mitigation's call with a seed of its own, not a repeat
                skipped["a mitigation's extra call"] = skipped.get("a mitigation's extra call", 0) + 1
                continue
        i = b.pair(pair_id, str(obj.get("domain") or "unknown"))
        b.add(where, i, first, picked, repeat, p_first)
    if data is not None:
        _join_data(b.pairs, data, data_dir, path)
    model = side.get("model") if isinstance(side.get("model"), str) else None
    return LoadedLog(
        path, "judgments", b.pairs, b.verdicts, True, model, seed if isinstance(seed, int) else None, skipped, rows
    )


def _join_data(pairs: list[LogPair], data: str, data_dir: Path | None, path: Path) -> None:
    """Lengths, texts and response models of the log's pairs from the data it judged."""
    by_id = {p.id: p for p in load_pairs(data, data_dir=data_dir)}
    missing = [p.pair_id for p in pairs if p.pair_id not in by_id]
    if missing:
        raise DataError(f"{path}: {len(missing)} pair id(s) of the log are not in the data {data}, e.g. {missing[0]!r}")
    for p in pairs:
        pair = by_id[p.pair_id]
        p.texts = (pair.chosen, pair.rejected)
        p.lengths = (count_tokens(pair.chosen), count_tokens(pair.rejected))
        model = pair.meta.get("response_model")
        models = pair.meta.get("response_models")
        if isinstance(models, (list, tuple)) and len(models) == 2:
            p.models = (str(models[0]), str(models[1]))
        elif isinstance(model, str) and model:
            p.models = (model, model)


# -- inspect_ai eval logs -------------------------------------------------------------------


def _archive_json(path: Path, archive: zipfile.ZipFile, name: str) -> dict[str, Any]:
    """One JSON object member of an .eval archive (its header); malformed: a DataError naming it."""
    try:
        value = json.loads(archive.read(name))
    except (ValueError, zipfile.BadZipFile, OSError) as exc:
        raise DataError(f"{path}: {name}: malformed JSON ({exc})") from None
    if not isinstance(value, dict):
        raise DataError(f"{path}: {name}: expected a JSON object, got {type(value).__name__}")
    eval_spec = value.get("eval")
    if eval_spec is not None and not isinstance(eval_spec, dict):
        raise DataError(f"{path}: {name}: field 'eval' is not an object")
    return value


def _inspect_samples(path: Path) -> tuple[dict[str, Any], Iterator[tuple[str, dict[str, Any]]]]:
    """(the log's `eval` header, its samples) from a .eval file (a zip: header.json and
    samples/*.json) or a .json log (one object with `eval` and `samples`)."""
    if path.suffix == ".eval":
        try:
            archive = zipfile.ZipFile(path)
        except (OSError, zipfile.BadZipFile) as exc:
            raise DataError(f"{path}: not an inspect_ai .eval file ({exc})") from None
        names = archive.namelist()
        header = _archive_json(path, archive, "header.json") if "header.json" in names else {}
        start = _archive_json(path, archive, "_journal/start.json") if "_journal/start.json" in names else {}

        def samples() -> Iterator[tuple[str, dict[str, Any]]]:
            for name in sorted(n for n in names if n.startswith("samples/") and n.endswith(".json")):
                try:
                    sample = json.loads(archive.read(name))
                except ValueError:
                    raise DataError(f"{path}: {name}: malformed JSON") from None
                if not isinstance(sample, dict):
                    raise DataError(f"{path}: {name}: expected a JSON object, got {type(sample).__name__}")
                yield f"{path}: {name}", sample

        return (header.get("eval") or start.get("eval") or {}), samples()
    try:
        log = json.loads(read_utf8(path, what="inspect log"))
    except ValueError as exc:
        raise DataError(f"{path}: malformed JSON ({exc})") from None
    items = log.get("samples") or []
    return log.get("eval") or {}, ((f"{path}: samples[{k}]", s) for k, s in enumerate(items))


def _inspect_answer(where: str, sample: Mapping[str, Any]) -> str | None:
    """The verdict letter the scorer read (its `answer`); None when the sample has none."""
    scores = sample.get("scores") or {}
    if not isinstance(scores, dict):
        raise DataError(f"{where}: field 'scores' is not an object")
    for score in scores.values():
        answer = (score or {}).get("answer")
        if isinstance(answer, str) and answer.strip().upper() in ("A", "B"):
            return answer.strip().upper()
    return None


_INSPECT_ORDERS = ("::original", "::swapped")


def _inspect_pair_key(sample: Mapping[str, Any], meta: Mapping[str, Any]) -> str:
    """The key of a sample's pair: `export inspect`'s ``sample_id`` (one per exported row, so
    one per bias variant: the variants of a source pair share its ``pair_id`` but not their
    responses), else ``pair_id``, else the sample's id without its order suffix."""
    for key in ("sample_id", "pair_id"):
        if meta.get(key):
            return str(meta[key])
    sample_id = str(sample.get("id") or "")
    for suffix in _INSPECT_ORDERS:
        if sample_id.endswith(suffix):
            return sample_id[: -len(suffix)]
    return sample_id


def _read_inspect(path: Path) -> LoadedLog:
    header, samples = _inspect_samples(path)
    b, rows = _Builder(), 0
    for where, sample in samples:
        rows += 1
        if not isinstance(sample, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(sample).__name__}")
        meta = sample.get("metadata") or {}
        if not isinstance(meta, dict):
            raise DataError(f"{where}: field 'metadata' is not an object")
        pair_id = _inspect_pair_key(sample, meta)
        target, choices = sample.get("target"), sample.get("choices")
        if not pair_id:
            raise DataError(f"{where}: no pair id (metadata.pair_id, metadata.sample_id or id)")
        if isinstance(target, list):
            target = target[0] if len(target) == 1 else None
        if target not in ("A", "B"):
            raise DataError(
                f"{where}: field 'target' has value {sample.get('target')!r}; expected A or B (the better response)"
            )
        if not (isinstance(choices, list) and len(choices) == 2 and all(isinstance(c, str) for c in choices)):
            raise DataError(f"{where}: field 'choices' must hold the two responses as shown")
        first: Response = 0 if target == "A" else 1
        epoch = sample.get("epoch", 1)
        if not isinstance(epoch, int) or epoch < 1:
            raise DataError(f"{where}: field 'epoch' has value {epoch!r}; expected 1, 2, ...")
        i = b.pair(str(pair_id), str(meta.get("domain") or "unknown"))
        better, worse = (choices[0], choices[1]) if first == 0 else (choices[1], choices[0])
        _set_texts(b.pairs[i], where, (better, worse))
        b.add(where, i, first, _picked(_inspect_answer(where, sample), first), epoch - 1, None)
    model = header.get("model") if isinstance(header.get("model"), str) else None
    return LoadedLog(path, "inspect", b.pairs, b.verdicts, True, model, None, {}, rows)


def _set_texts(pair: LogPair, where: str, texts: tuple[str, str]) -> None:
    if pair.texts is not None and pair.texts != texts:
        raise DataError(f"{where}: pair {pair.pair_id!r} has other responses than in its earlier rows")
    pair.texts = texts
    pair.lengths = (count_tokens(texts[0]), count_tokens(texts[1]))


# -- generic JSONL / CSV / parquet ----------------------------------------------------------


def _check_columns(where: str, what: str, present: list[str], cols: ColumnMap | None) -> None:
    """Every column the map names is in the file (CSV: its header; parquet: its schema; JSONL:
    each row, whose value may be null): a map naming a column the file lacks would audit rows
    that measure nothing. None: a reader that checks its own columns (`correct`'s)."""
    if cols is None:
        return
    have = set(present)
    for key, column in cols.columns().items():
        if column not in have:
            raise DataError(
                f"{where}: no column {column!r} (the column map's {key}); {what} has: {', '.join(present) or 'nothing'}"
            )


def _check_csv_row(where: str, row: Mapping[Any, Any], n_columns: int) -> None:
    """A CSV row has a cell for every column of the header (an empty one is a value; a
    missing one is not), and no more."""
    if None in row:
        raise DataError(f"{where}: more cells than the header's {n_columns} columns")
    missing = [str(column) for column, value in row.items() if value is None]
    if missing:
        raise DataError(f"{where}: field {missing[0]!r} is missing (the row has fewer cells than the header)")


def _generic_rows(path: Path, cols: ColumnMap | None = None) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(where, row) of each row of a generic log, every row holding every mapped column (none
    checked without a map)."""
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        for line, obj, problem in scan_jsonl(path):
            if problem is not None or obj is None:
                raise DataError(problem or f"{path}:{line}: not a JSON object")
            where = f"{path}:{line}"
            _check_columns(where, "the row", list(obj), cols)
            yield where, obj
    elif suffix == ".csv":
        # the reader gets the text itself, not its lines: a quoted cell keeps its newlines
        reader = csv.DictReader(io.StringIO(read_utf8(path, what="log"), newline=""))
        try:
            _check_columns(f"{path}:1", "the header", list(reader.fieldnames or []), cols)
            start = reader.line_num + 1
            for row in reader:
                _check_csv_row(f"{path}:{start}", row, len(reader.fieldnames or []))
                yield f"{path}:{start}", row
                start = reader.line_num + 1
        except csv.Error as exc:
            raise DataError(f"{path}:{reader.line_num}: malformed CSV ({exc})") from None
    elif suffix == ".parquet":
        try:
            import pyarrow.parquet as pq

            table = pq.read_table(path)
        except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ...
            raise DataError(f"{path}: cannot read parquet ({type(exc).__name__}: {exc})") from None
        _check_columns(str(path), "its schema", table.column_names, cols)
        for index, obj in enumerate(table.to_pylist()):
            yield f"{path} row {index}", obj
    else:
        raise DataError(f"{path}: a generic log is .jsonl, .csv or .parquet (inspect logs: .eval or .json)")


def _cell(where: str, row: Mapping[str, Any], column: str | None, *, required: bool = False) -> Any:
    if column is None:
        return None
    value = row.get(column)
    if required and (value is None or value == ""):
        raise DataError(f"{where}: column {column!r} is missing or empty")
    return None if value == "" else value


def _letter(where: str, column: str, value: Any, allowed: Mapping[str, str]) -> str:
    letter = allowed.get(str(value).strip().lower())
    if letter is None:
        raise DataError(
            f"{where}: column {column!r} has value {value!r}; expected one of {', '.join(sorted(set(allowed)))}"
        )
    return letter


def _orientation(
    where: str, row: Mapping[str, Any], cols: ColumnMap, pair: LogPair
) -> tuple[Response, tuple[str, str] | None]:
    """Which response (0/1) was shown first, and the texts of responses 0 and 1 when given."""
    a, b = _cell(where, row, cols.response_a), _cell(where, row, cols.response_b)
    if cols.label is not None:
        label = _letter(where, cols.label, _cell(where, row, cols.label, required=True), _LABELS)
        first: Response = 0 if label == "A" else 1
    elif cols.order is not None:
        first = _ORDERS.get(str(_cell(where, row, cols.order, required=True)).strip().lower(), None)  # type: ignore[assignment]
        if first is None:
            raise DataError(
                f"{where}: column {cols.order!r} has value {row.get(cols.order)!r}; expected AB/original/0 or BA/swapped/1"
            )
    elif a is not None and b is not None:
        reference = pair.texts[0] if pair.texts is not None else str(a)
        if str(a) == reference:
            first = 0
        elif str(b) == reference:
            first = 1
        else:
            raise DataError(f"{where}: pair {pair.pair_id!r} has other responses than in its earlier rows")
    else:
        raise DataError(
            f"{where}: cannot tell which response was shown first: map a label, an order or the two responses"
        )
    texts = None
    if a is not None and b is not None:
        texts = (str(a), str(b)) if first == 0 else (str(b), str(a))
    return first, texts


def _both(
    where: str, row: Mapping[str, Any], first_col: str | None, second_col: str | None, first: Response
) -> tuple[Any, Any] | None:
    x, y = _cell(where, row, first_col), _cell(where, row, second_col)
    if x is None or y is None:
        return None
    return (x, y) if first == 0 else (y, x)


def _generic_row(b: _Builder, where: str, row: Mapping[str, Any], cols: ColumnMap) -> str | None:
    pair_id = str(_cell(where, row, cols.pair_id, required=True))
    raw_verdict = _cell(where, row, cols.verdict)
    i = b.pair(pair_id, str(_cell(where, row, cols.domain) or "unknown"))
    pair = b.pairs[i]
    first, texts = _orientation(where, row, cols, pair)
    if texts is not None:
        _set_texts(pair, where, texts)
    lengths = _both(where, row, cols.length_a, cols.length_b, first)
    if lengths is not None:
        try:
            pair.lengths = (int(lengths[0]), int(lengths[1]))
        except (TypeError, ValueError):
            raise DataError(f"{where}: columns {cols.length_a!r} and {cols.length_b!r} must be whole numbers") from None
    models = _both(where, row, cols.model_a, cols.model_b, first)
    if models is not None:
        pair.models = (str(models[0]), str(models[1]))
    verdict = (
        None
        if raw_verdict is None
        else _letter(
            where, cols.verdict, raw_verdict, {**_VERDICTS, **{k.lower(): v for k, v in cols.verdict_values.items()}}
        )
    )
    repeat = _cell(where, row, cols.repeat)
    if repeat is not None:
        try:
            repeat = int(repeat)
        except (TypeError, ValueError):
            raise DataError(f"{where}: column {cols.repeat!r} has value {repeat!r}; expected 0, 1, ...") from None
    b.add(
        where,
        i,
        first,
        _picked(verdict, first),
        repeat,
        _probability(where, str(cols.probability), _cell(where, row, cols.probability)),
    )
    judge = _cell(where, row, cols.judge_model)
    return None if judge is None else str(judge)


def _read_generic(path: Path, cols: ColumnMap) -> LoadedLog:
    b, rows, judges = _Builder(), 0, set()
    for where, row in _generic_rows(path, cols):
        rows += 1
        judge = _generic_row(b, where, row, cols)
        if judge is not None:
            judges.add(judge)
    if len(judges) > 1:
        raise DataError(
            f"{path}: column {cols.judge_model!r} names {len(judges)} judges ({', '.join(sorted(judges))}); audit one judge per log"
        )
    return LoadedLog(
        path, "generic", b.pairs, b.verdicts, cols.label is not None, next(iter(judges), None), None, {}, rows
    )


# -- dispatch -------------------------------------------------------------------------------


def _is_judgments(path: Path) -> bool:
    if path.suffix != ".jsonl":
        return False
    for _, obj, problem in scan_jsonl(path):
        if problem is not None:  # a broken first line is named as a broken third line is
            raise DataError(problem)
        return obj is not None and {"pair_id", "order", "picked"} <= set(obj)
    return False


def _is_inspect(path: Path) -> bool:
    if path.suffix == ".eval":
        return True
    if path.suffix != ".json":
        return False
    try:
        head = json.loads(read_utf8(path, what="log"))
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: malformed JSON ({json_problem(exc)})") from None
    return isinstance(head, dict) and "eval" in head and "samples" in head


def _is_empty(path: Path) -> bool:
    """No content but whitespace (a CSV's header alone is content)."""
    with path.open("rb") as handle:
        return not handle.read(1 << 16).strip() and not handle.read(1)


def read_log(
    path: Path | str, columns: ColumnMap | None = None, *, data: str | None = None, data_dir: Path | None = None
) -> LoadedLog:
    """Read a log of judge verdicts. A column map makes it a generic log; without one an
    inspect_ai log (.eval, or .json with `eval` and `samples`) or our judgments.jsonl is
    recognised; `data` (judgments.jsonl only) supplies the responses' lengths and models."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: log file not found")
    if path.suffix != ".parquet" and _is_empty(path):
        raise DataError(f"{path}: the log file is empty")
    if columns is not None:
        log = _read_generic(path, columns)
    elif _is_inspect(path):
        log = _read_inspect(path)
    elif _is_judgments(path):
        log = _read_judgments(path, data, data_dir)
    else:
        raise DataError(
            f"{path}: not a judgments.jsonl (pair_id, order, picked) nor an inspect_ai log (.eval, or .json with "
            "eval and samples); for another log give a column map (--columns pair_id=...,verdict=...)"
        )
    if data is not None and log.format != "judgments":
        raise DataError(
            f"{path}: --data joins a judgments.jsonl with its pairs; a {log.format} log carries its own responses"
        )
    if not log.verdicts:
        raise DataError(f"{path}: the log holds no verdict to audit")
    return log
