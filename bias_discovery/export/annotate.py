"""Human verification of a Pro set: read the annotation sheet, apply it, measure agreement.

The sheet (``annotation.csv`` or ``annotation.jsonl`` as written by the export, or any CSV /
JSONL with the same columns) has one row per sample. Verdict fields:

- ``annotator_1``, ``annotator_2``: ``keep`` or ``reject`` (case and surrounding spaces are
  ignored). ``keep``: the new rejected response is still wrong (its final answer differs from
  the chosen one) and the label is right, so a judge that prefers it errs because of the
  presentation. ``reject``: anything else.
- ``adjudication``: ``keep`` or ``reject``; required where the two annotators disagree; where
  given it is the final verdict (a reviewer may overrule an agreement), else the agreed
  verdict is.
- ``reason``: free text, recommended when rejecting; kept in ``annotations_applied.jsonl``.

Any other value, an empty verdict, a row for a sample the set does not have, a sample without
a row, or a duplicate row is an error naming the row (1-based data row of a CSV, line of a
JSONL) and the field; nothing is written then.

Applying keeps the pre-annotation rows in ``pre_annotation.jsonl``, so a corrected sheet can be
applied again (it is always applied to the set as the filter left it).
"""

from __future__ import annotations

import csv
import math
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..errors import DataError, ExportError
from ..io import (
    atomic_write_json,
    atomic_write_jsonl,
    atomic_write_text,
    iter_jsonl,
    read_jsonl,
)
from ..stats import cohens_kappa
from .common import length_stats, string_schema, write_data_files
from .pro import data_columns
from .pro_card import render_pro_card
from .pro_stats import ProStats, read_pro_stats

VERDICTS = ("keep", "reject")


class SheetRow(BaseModel):
    where: str
    sample_id: str
    annotator_1: str
    annotator_2: str
    adjudication: str | None
    reason: str
    final: str


def _read_sheet(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """(location, record) per row of a CSV or JSONL sheet."""
    if not path.is_file():
        raise ExportError(f"annotation sheet {path}: file not found")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        with path.open(newline="", encoding="utf-8-sig") as handle:  # -sig: a BOM from spreadsheet tools
            reader = csv.DictReader(handle)
            if reader.fieldnames is None:
                raise ExportError(f"{path}: empty CSV (no header row)")
            return [(f"{path} row {i}", dict(row)) for i, row in enumerate(reader, start=1)]
    if suffix in (".jsonl", ".json"):
        try:
            return [(f"{path}:{line}", obj) for line, obj in iter_jsonl(path)]
        except DataError as exc:
            raise ExportError(str(exc)) from None
    raise ExportError(f"annotation sheet {path}: expected a .csv or .jsonl file")


def _verdict(where: str, sample: str, record: dict[str, Any], field: str, *, required: bool) -> str | None:
    value = record.get(field)
    text = "" if value is None else str(value).strip().lower()
    if not text:
        if required:
            raise ExportError(
                f"{where} (sample {sample}): field {field!r} is missing; expected one of: {', '.join(VERDICTS)}"
            )
        return None
    if text not in VERDICTS:
        raise ExportError(
            f"{where} (sample {sample}): field {field!r} has unknown verdict {value!r}; expected one of: "
            f"{', '.join(VERDICTS)}"
        )
    return text


def parse_sheet(path: Path, sample_ids: list[str]) -> list[SheetRow]:
    """Validate every row of the sheet against the samples of the set; see the module docstring."""
    known = set(sample_ids)
    rows: list[SheetRow] = []
    seen: dict[str, str] = {}
    for where, record in _read_sheet(path):
        sid = str(record.get("sample_id") or "").strip()
        if not sid:
            raise ExportError(f"{where}: field 'sample_id' is missing")
        if sid not in known:
            raise ExportError(f"{where}: sample_id {sid!r} is not a sample of this set")
        if sid in seen:
            raise ExportError(f"{where}: sample {sid} already has a row ({seen[sid]})")
        seen[sid] = where
        a1 = _verdict(where, sid, record, "annotator_1", required=True)
        a2 = _verdict(where, sid, record, "annotator_2", required=True)
        adjudication = _verdict(where, sid, record, "adjudication", required=False)
        assert a1 is not None and a2 is not None
        if a1 != a2 and adjudication is None:
            raise ExportError(
                f"{where} (sample {sid}): the annotators disagree ({a1} / {a2}) and field 'adjudication' "
                f"is missing; expected one of: {', '.join(VERDICTS)}"
            )
        final = adjudication or a1
        rows.append(
            SheetRow(
                where=where,
                sample_id=sid,
                annotator_1=a1,
                annotator_2=a2,
                adjudication=adjudication,
                reason=str(record.get("reason") or ""),
                final=final,
            )
        )
    missing = [s for s in sample_ids if s not in seen]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ExportError(f"{path}: no row for sample {shown}; every sample of the set needs a row")
    return rows


def apply_annotations(directory: Path | str, sheet: Path | str) -> ProStats:
    """Apply `sheet` to the Pro set in `directory`; returns the updated stats.json content
    (a `ProStats`, its `annotation` the verification's agreement and counts)."""
    directory, sheet = Path(directory), Path(sheet)
    stats_path = directory / "stats.json"
    if not stats_path.is_file():
        raise ExportError(f"{directory}: not an exported Pro set (no stats.json)")
    stats = read_pro_stats(directory, label=str(directory)).model_dump(mode="json")
    pre_path = directory / "pre_annotation.jsonl"
    base_path = pre_path if pre_path.is_file() else directory / "data.jsonl"
    try:
        base = read_jsonl(base_path)
    except DataError as exc:
        raise ExportError(str(exc)) from None
    ids = [str(r.get("sample_id", "")) for r in base]
    rows = parse_sheet(sheet, ids)

    final = {r.sample_id: r.final for r in rows}
    kept = [r for r in base if final[str(r["sample_id"])] == "keep"]
    a1 = [r.annotator_1 for r in rows]
    a2 = [r.annotator_2 for r in rows]
    kappa = cohens_kappa(a1, a2)
    n_agreed = sum(1 for x, y in zip(a1, a2) if x == y)
    annotation = {
        "sheet": sheet.name,
        "applied_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "n_annotated": len(rows),
        "n_agreed": n_agreed,
        "observed_agreement": n_agreed / len(rows) if rows else None,
        "kappa": None if math.isnan(kappa) else kappa,
        "kappa_method": "cohen (annotator_1 vs annotator_2)",
        "n_disagreements": len(rows) - n_agreed,
        "n_adjudicated": sum(1 for r in rows if r.adjudication is not None and r.annotator_1 != r.annotator_2),
        "n_overruled": sum(
            1 for r in rows if r.adjudication is not None and r.annotator_1 == r.annotator_2 != r.adjudication
        ),
        "n_kept": len(kept),
        "n_rejected": len(rows) - len(kept),
        "verdict_values": list(VERDICTS),
    }
    stats["counts"]["after_annotation"] = len(kept)
    stats["annotation"] = annotation
    # Lengths of what is left, from the original rejected responses in variants.jsonl.
    variants_path = directory / "variants.jsonl"
    if variants_path.is_file():
        originals = {v["sample_id"]: v for v in read_jsonl(variants_path)}
        triples = [
            (
                originals[s["sample_id"]]["chosen"],
                originals[s["sample_id"]]["original_rejected"],
                originals[s["sample_id"]]["new_rejected"],
            )
            for s in kept
            if s["sample_id"] in originals
        ]
        stats["length"] = length_stats(triples).model_dump()

    # Everything validated and computed: write, each file atomically.
    if not pre_path.is_file():
        atomic_write_jsonl(pre_path, base)
    write_data_files(directory, kept, string_schema(data_columns(stats.get("judge_mode"))))
    atomic_write_jsonl(directory / "annotations_applied.jsonl", [r.model_dump() for r in rows])
    atomic_write_json(stats_path, stats)
    result = ProStats.model_validate(stats)
    atomic_write_text(directory / "README.md", render_pro_card(result, directory))
    return result
