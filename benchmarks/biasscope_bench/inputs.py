"""The sides' inputs: the same pairs for both (the peer's parquet layout, our JSONL), the peer's
seed library in our format, and a fresh working copy of the peer's code per run."""

from __future__ import annotations

import json
import random
import shutil
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from bias_discovery.api import Bias, BiasLibrary, BiasOrigin, PreferencePair, load_data, slugify

PEER_REPO = "github:sustech-nlp/BiasScope"
PEER_STAGE1 = "attack_judge_and_analysis.py"
PEER_STAGE2 = "synthesis_bias_verification.py"
PEER_FILES = (
    "attack_judge_and_analysis.py",
    "synthesis_bias_verification.py",
    "bias_detector.py",
    "prompts.py",
    "utils.py",
)
"""The peer's code: copied (unchanged) into each repetition's directory, which it writes into."""
PEER_SEED_LIBRARY = Path("data/bias/basic_biases.json")

SEED = 42
TARGET_MAX_CHARS = 1200
"""Target pairs are drawn among RewardBench pairs whose question and two responses hold at most
this many characters (1,438 of 2,985): SmolLM2 on 2 CPU cores reads only some hundreds of
prompt tokens a second, and the peer sends every prompt once per engine call."""
TEST_MAX_CHARS = 2500
"""Test pairs are drawn among JudgeBench pairs of at most this many characters (107 of 620)."""


def pair_chars(pair: PreferencePair) -> int:
    """A pair's length in characters: what the prompt costs on both sides."""
    return len(pair.question) + len(pair.chosen) + len(pair.rejected)


def select_pairs(
    pairs: Sequence[PreferencePair], n: int, *, max_chars: int, seed: int, exclude: Iterable[str] = ()
) -> list[PreferencePair]:
    """A seeded sample of `n` pairs among those of at most `max_chars` characters (not in
    `exclude`), in file order: the same pairs on every machine for the same data and seed."""
    skip = set(exclude)
    eligible = [p for p in pairs if pair_chars(p) <= max_chars and p.id not in skip]
    if len(eligible) < n:
        raise SystemExit(f"only {len(eligible)} pairs of at most {max_chars} characters; asked for {n}")
    keep = sorted(random.Random(seed).sample(range(len(eligible)), n))
    return [eligible[i] for i in keep]


def peer_rows(pairs: Sequence[PreferencePair]) -> list[dict[str, Any]]:
    """The pairs in the peer's parquet layout: `response_A`/`response_B` in the data's own
    order (JudgeBench's), chosen first when the data has none (the peer's RewardBench file has
    label 1 on every row), `label` 1 or 2 = the better response, and `domain`."""
    rows = []
    for p in pairs:
        chosen_first = p.data_order != "rejected_first"
        rows.append(
            {
                "id": p.id,
                "question": p.question,
                "response_A": p.chosen if chosen_first else p.rejected,
                "response_B": p.rejected if chosen_first else p.chosen,
                "label": 1 if chosen_first else 2,
                "domain": p.domain,
                "source": p.source,
            }
        )
    return rows


def write_peer_parquet(pairs: Sequence[PreferencePair], path: Path) -> Path:
    """The pairs as the peer reads them (`label` an int64, as its own files have it)."""
    import pandas as pd

    path.parent.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(peer_rows(pairs)).astype({"label": "int64"})
    frame.to_parquet(path, index=False)
    return path


def write_our_jsonl(pairs: Sequence[PreferencePair], path: Path) -> Path:
    """The same rows for our loader (label style: "A>B" when response_A is the better one), so
    both sides read the same pairs in the same order."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as stream:
        for row in peer_rows(pairs):
            stream.write(json.dumps({**row, "label": "A>B" if row["label"] == 1 else "B>A"}, ensure_ascii=False) + "\n")
    return path


def peer_seed_library(peer_json: Path) -> BiasLibrary:
    """The peer's seed library (name -> {Definition, Manifestations}) as our library: same
    names (trimmed) and definitions, its manifestations paragraph as one manifestation."""
    raw = json.loads(peer_json.read_text(encoding="utf-8"))
    if not isinstance(raw, dict) or not raw:
        raise SystemExit(f"{peer_json}: expected a JSON object of biases, name -> {{Definition, Manifestations}}")
    biases = []
    for name, entry in raw.items():
        if not isinstance(entry, dict) or not str(entry.get("Definition") or "").strip():
            raise SystemExit(f"{peer_json}: bias {name!r} has no Definition")
        manifestations = str(entry.get("Manifestations") or "").strip()
        biases.append(
            Bias(
                id=slugify(name),
                name=name.strip(),
                definition=str(entry["Definition"]).strip(),
                manifestations=[manifestations] if manifestations else [],
                origin=BiasOrigin(kind="seed", seed_library="biasscope-official"),
            )
        )
    return BiasLibrary(name="biasscope-official", iteration=0, biases=biases)


class Subsets(BaseModel):
    """The pairs both sides use, and where each side reads them."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    target: list[PreferencePair]
    test: list[PreferencePair]
    fresh_test: list[PreferencePair]
    """Test pairs disjoint from `test`, for our test of the peer's kept biases."""


def load_named(name: str, data_dir: Path) -> list[PreferencePair]:
    """A named set of the shared data as the library loads it (a published set's refused rows
    are skipped and counted: JudgeBench has one pair of identical responses)."""
    pairs, _ = load_data(name, data_dir=data_dir, limit=None, skip_bad_rows=False, warn=lambda message: None)
    return pairs


def make_subsets(data_dir: Path, n_target: int, n_test: int, n_fresh: int, seed: int = SEED) -> Subsets:
    """The fixed target, test and fresh test pairs of one benchmark (seeded, length-bounded)."""
    rewardbench = load_named("rewardbench", data_dir)
    judgebench = load_named("judgebench", data_dir)
    target = select_pairs(rewardbench, n_target, max_chars=TARGET_MAX_CHARS, seed=seed)
    test = select_pairs(judgebench, n_test, max_chars=TEST_MAX_CHARS, seed=seed)
    fresh = select_pairs(judgebench, n_fresh, max_chars=TEST_MAX_CHARS, seed=seed + 1, exclude=[p.id for p in test])
    return Subsets(target=target, test=test, fresh_test=fresh)


def peer_layout(work: Path, subsets: Subsets, peer_dir: Path, seeds_json: Path | None = None) -> dict[str, Path]:
    """A fresh working copy of the peer: its code (unchanged), its seed library and our pairs
    in its parquet layout. Returns the paths its flags name."""
    work.mkdir(parents=True, exist_ok=True)
    for name in PEER_FILES:
        shutil.copy2(peer_dir / name, work / name)
    bias_json = work / "data" / "bias" / "basic_biases.json"
    bias_json.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(seeds_json or peer_dir / PEER_SEED_LIBRARY, bias_json)
    return {
        "bias_json": bias_json,
        "target": write_peer_parquet(subsets.target, work / "data" / "target" / "rewardbench_subset.parquet"),
        "test": write_peer_parquet(subsets.test, work / "data" / "test" / "judgebench_subset.parquet"),
    }


def peer_seed_check_layout(work: Path, paths: dict[str, Path], model_dir: Path) -> Path:
    """Inputs that make the peer's stage 2 verify the 7 seed biases, through the files it reads
    (no code changed): stage 2 verifies the biases of `temporary_extended_biases.json` that are
    not in its per-model library; here that library is empty and the extended one holds the
    seeds. Returns the `--bias-json` to pass."""
    bias_json = work / "data" / "seedcheck" / "seeds_as_candidates.json"
    slug = bias_json.parent / model_dir.name / paths["target"].stem / bias_json.stem
    slug.mkdir(parents=True, exist_ok=True)
    empty = json.dumps({})
    bias_json.write_text(empty, encoding="utf-8")
    (slug / bias_json.name).write_text(empty, encoding="utf-8")
    shutil.copy2(paths["bias_json"], slug / "temporary_extended_biases.json")
    return bias_json


def check_peer(peer_dir: Path) -> None:
    """Stop before any work when `peer_dir` is not a BiasScope checkout."""
    missing = [name for name in (*PEER_FILES, str(PEER_SEED_LIBRARY)) if not (peer_dir / name).is_file()]
    if missing:
        raise SystemExit(f"--peer {peer_dir}: not a BiasScope checkout ({PEER_REPO}); missing {', '.join(missing)}")


class Setting(BaseModel):
    """What both sides share in one benchmark."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    peer_dir: Path
    model_dir: Path
    work: Path
    subsets: Subsets
    max_tokens: int
    eager: bool
    dtype: str = "bfloat16"  # both sides' weights and activations in vLLM
    python: str = sys.executable


def our_files(setting: Setting) -> dict[str, Path]:
    """The pairs for our loader and the peer's seed library in our format (written once)."""
    root = setting.work / "ours-data"
    files = {
        "target": root / "target.jsonl",
        "test": root / "test.jsonl",
        "fresh": root / "fresh_test.jsonl",
        "library": root / "seed_library.json",
    }
    if not files["library"].exists():
        write_our_jsonl(setting.subsets.target, files["target"])
        write_our_jsonl(setting.subsets.test, files["test"])
        write_our_jsonl(setting.subsets.fresh_test, files["fresh"])
        library = peer_seed_library(setting.peer_dir / PEER_SEED_LIBRARY)
        files["library"].write_text(library.model_dump_json(indent=1), encoding="utf-8")
    return files
