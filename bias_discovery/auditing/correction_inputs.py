"""What `correct` reads: one value of the judge and, on some items, one human label per item,
from a verdict log (pairwise) or a table of scores (pointwise), and the labels from a column
of the same file or a second file keyed by item id.

Pairwise, an item is a pair of the log (any format `audit --from-log` reads, `logs.read_log`)
and its value is the share of the judge's valid verdicts that pick response A (ties count
half): response A is the log's response 0, the pair's own first response in a generic log
with an `order` column, the labelled better response in our judgments.jsonl and inspect logs.
A label says which response humans found better: A / 1 (response A), B / 0, tie / 0.5.

Pointwise, an item is a row of a JSONL / CSV / parquet table with an id, the judge's score
(or a text the judge model scores) and the columns named as covariates, flags or the group
(the model that wrote the response). A label is a score on the scale.

Every bad row is a DataError naming the file, line and field; nothing is computed, and
nothing is written, from input with one bad row.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from ..errors import DataError
from ..io import atomic_write_text
from ..pointwise import Scale, parse_scale
from .logs import ColumnMap, LoadedLog, _generic_rows, read_log

__all__ = ["CorrectionInput", "Item", "ScoreColumns", "pairwise_items", "pointwise_items", "read_labels", "write_ids"]

Mode = Literal["pairwise", "pointwise"]
_PAIR_LABELS = {"a": 1.0, "1": 1.0, "1.0": 1.0, "b": 0.0, "0": 0.0, "0.0": 0.0, "tie": 0.5, "0.5": 0.5}


@dataclass
class Item:
    """One unit of the aggregate: the judge's value, the human label (None: unlabelled)."""

    item_id: str
    judge: float | None
    label: float | None = None
    label_where: str = ""
    group: str | None = None
    text: str | None = None
    question: str | None = None
    texts: tuple[str, str] | None = None
    """Pairwise: responses A and B as the log holds them (what the checker model flags)."""
    covariates: dict[str, float] = field(default_factory=dict)
    flags: dict[str, float] = field(default_factory=dict)
    """Per bias: 0/1, the item carries its trait; from the checker model on a pairwise item,
    A's trait minus B's (-1, 0 or 1)."""


@dataclass
class CorrectionInput:
    path: Path
    mode: Mode
    items: list[Item]
    scale: Scale | None
    """Pointwise: the scale labels are checked against (None: pairwise, 0 to 1)."""
    log_format: str
    covariates: list[str]
    flags: list[str]


class ScoreColumns(BaseModel):
    """Which column of a pointwise table holds what (`--columns id=essay_id,score=...`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = "id"
    """The item's id (labels in a second file are joined on it)."""
    score: str | None = "score"
    """The judge's score; None (or a column absent from the table) with a judge model: the
    model scores `text`."""
    label: str | None = None
    """The human label, empty on unlabelled rows."""
    group: str | None = None
    """The model that wrote the response: one estimate per model, and X minus Y."""
    text: str | None = None
    """The response the judge model scores, when the table has no score."""
    question: str | None = None
    """The question the response answers (else the instruction given)."""

    @classmethod
    def parse(cls, text: str) -> ScoreColumns:
        values: dict[str, str] = {}
        for part in (p.strip() for p in text.split(",") if p.strip()):
            key, sep, value = part.partition("=")
            if not sep or not key.strip() or not value.strip():
                raise DataError(f"--columns {text!r}: entry {part!r} is not of the form key=column")
            values[key.strip()] = value.strip()
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise DataError(f"--columns {text!r}: {problems}; keys: {', '.join(cls.model_fields)}") from None


def _rows(path: Path) -> Iterator[tuple[str, Mapping[str, Any]]]:
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    return _generic_rows(path)


def _number(where: str, column: str, value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise DataError(f"{where}: column {column!r} has value {value!r}; expected a number") from None
    if not math.isfinite(number):
        raise DataError(f"{where}: column {column!r} has value {value!r}; expected a finite number")
    return number


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def parse_label(where: str, column: str, value: Any, scale: Scale | None) -> float:
    """A label on the scale (pointwise) or A / B / tie (pairwise); outside it: a DataError."""
    if scale is None:
        number = _PAIR_LABELS.get(str(value).strip().lower())
        if number is None:
            raise DataError(f"{where}: column {column!r} has value {value!r}; expected A, B or tie (or 1, 0, 0.5)")
        return number
    text = str(value).strip()
    number = scale.value(text)
    if number is None:
        number = _number(where, column, value)
        if not scale.low <= number <= scale.high:
            raise DataError(f"{where}: column {column!r} has value {value!r}, outside the scale {scale.describe()}")
    return number


def read_labels(path: Path, id_column: str, label_column: str, scale: Scale | None) -> dict[str, tuple[float, str]]:
    """Labels from a second file (JSONL / CSV / parquet) keyed by item id: {id: (label, where)}."""
    labels: dict[str, tuple[float, str]] = {}
    for where, row in _rows(path):
        if id_column not in row or label_column not in row:
            raise DataError(f"{where}: the labels need columns {id_column!r} and {label_column!r}")
        item_id, value = row.get(id_column), row.get(label_column)
        if _empty(item_id):
            raise DataError(f"{where}: column {id_column!r} is empty")
        if _empty(value):
            continue
        key = str(item_id)
        if key in labels:
            raise DataError(f"{where}: item {key!r} is labelled twice (first at {labels[key][1]})")
        labels[key] = (parse_label(where, label_column, value, scale), where)
    return labels


def join_labels(items: Sequence[Item], labels: Mapping[str, tuple[float, str]], path: Path) -> None:
    """Put each label on its item; a label for an id the log does not hold is an error."""
    by_id = {item.item_id: item for item in items}
    for item_id, (value, where) in labels.items():
        item = by_id.get(item_id)
        if item is None:
            raise DataError(f"{where}: item {item_id!r} of the labels ({path}) is not in the log")
        if item.label is not None and item.label != value:
            raise DataError(f"{where}: item {item_id!r} has another label in the log ({item.label_where})")
        item.label, item.label_where = value, where


def _extras(where: str, row: Mapping[str, Any], item: Item, covariates: Sequence[str], flags: Sequence[str]) -> None:
    for name in covariates:
        if name not in row:
            raise DataError(f"{where}: covariate column {name!r} is missing")
        item.covariates[name] = _number(where, name, row.get(name))
    for name in flags:
        if name not in row:
            raise DataError(f"{where}: flag column {name!r} is missing")
        value = _number(where, name, row.get(name))
        if value not in (0.0, 1.0):
            raise DataError(f"{where}: flag column {name!r} has value {row.get(name)!r}; expected 0 or 1")
        item.flags[name] = value


def pointwise_items(
    path: Path, columns: ScoreColumns, scale: str, *, covariates: Sequence[str] = (), flags: Sequence[str] = ()
) -> CorrectionInput:
    """The rows of a pointwise table as items (one row per item)."""
    spec = parse_scale(scale)
    items: list[Item] = []
    seen: dict[str, str] = {}
    for where, row in _rows(path):
        item_id = row.get(columns.id)
        if _empty(item_id):
            raise DataError(f"{where}: column {columns.id!r} is missing or empty")
        key = str(item_id)
        if key in seen:
            raise DataError(f"{where}: item {key!r} appears twice (first at {seen[key]})")
        seen[key] = where
        raw = row.get(columns.score) if columns.score is not None else None
        judge = None if _empty(raw) else _number(where, str(columns.score), raw)
        if judge is not None and not spec.low <= judge <= spec.high:
            raise DataError(f"{where}: column {columns.score!r} has value {raw!r}, outside the scale {spec.describe()}")
        item = Item(item_id=key, judge=judge)
        if columns.label is not None and not _empty(row.get(columns.label)):
            item.label, item.label_where = parse_label(where, columns.label, row.get(columns.label), spec), where
        if columns.group is not None:
            item.group = None if _empty(row.get(columns.group)) else str(row.get(columns.group))
        if columns.text is not None:
            item.text = None if _empty(row.get(columns.text)) else str(row.get(columns.text))
        if columns.question is not None:
            item.question = None if _empty(row.get(columns.question)) else str(row.get(columns.question))
        _extras(where, row, item, covariates, flags)
        items.append(item)
    if not items:
        raise DataError(f"{path}: no rows")
    return CorrectionInput(path, "pointwise", items, spec, "generic", list(covariates), list(flags))


def _pair_values(log: LoadedLog) -> list[float | None]:
    """Per pair: the share of valid verdicts picking response A (response 0), ties half."""
    totals = [0.0] * len(log.pairs)
    counts = [0] * len(log.pairs)
    for verdict in log.verdicts:
        if verdict.picked is None:
            continue
        totals[verdict.pair_index] += {"chosen": 1.0, "rejected": 0.0, "tie": 0.5}[verdict.picked]
        counts[verdict.pair_index] += 1
    return [t / c if c else None for t, c in zip(totals, counts)]


def _pair_rows(path: Path, id_column: str) -> dict[str, tuple[str, Mapping[str, Any]]]:
    """The first row of each pair of a generic log: where the label and extra columns are read."""
    first: dict[str, tuple[str, Mapping[str, Any]]] = {}
    for where, row in _generic_rows(path):
        first.setdefault(str(row.get(id_column)), (where, row))
    return first


def pairwise_items(
    path: Path,
    columns: ColumnMap | None,
    *,
    label_column: str | None = None,
    label_required: bool = True,
    covariates: Sequence[str] = (),
    flags: Sequence[str] = (),
) -> CorrectionInput:
    """The pairs of a verdict log as items; with a generic log, `label_column` (the human
    label; a log without that column has no labels unless `label_required`), the covariates
    and the flags are read from each pair's first row."""
    log = read_log(path, columns)
    values = _pair_values(log)
    items = [Item(item_id=p.pair_id, judge=v, texts=p.texts) for p, v in zip(log.pairs, values)]
    for item, pair in zip(items, log.pairs):
        if "length" in covariates and pair.lengths is not None:
            item.covariates["length"] = float(pair.lengths[0] - pair.lengths[1])
    extra = [c for c in covariates if c != "length"]
    if (label_required and label_column or extra or flags) and (columns is None or log.format != "generic"):
        raise DataError(
            f"{path}: a {log.format} log has no user columns; give the labels as a second file (`labels`) "
            "and covariates or flags with a generic log"
        )
    if columns is not None:
        rows = _pair_rows(path, columns.pair_id)
        for item in items:
            where, row = rows[item.item_id]
            if label_column is not None and (label_required or label_column in row):
                if label_column not in row:
                    raise DataError(f"{where}: label column {label_column!r} is missing")
                if not _empty(row.get(label_column)):
                    item.label = parse_label(where, label_column, row.get(label_column), None)
                    item.label_where = where
            _extras(where, row, item, extra, flags)
    if "length" in covariates and any("length" not in i.covariates for i in items):
        raise DataError(f"{path}: covariate 'length' needs the responses' lengths in the log (length_a/length_b)")
    return CorrectionInput(path, "pairwise", items, None, log.format, list(covariates), list(flags))


def write_ids(path: Path, ids: Sequence[str]) -> None:
    """The items to label, one id a line under an `id` header (CSV), written atomically."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["id"])
    writer.writerows([item_id] for item_id in ids)
    atomic_write_text(path, buffer.getvalue())
