"""What the loop's stages work with: the models by role (and by stage, for streamed stages
that run at once), the target and test data with their overlap check, and the embedder."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property

from ..config import RunConfig
from ..data.loaders import bad_rows_for, describe_source, load_pairs
from ..data.overlap import DataOverlap, check_overlap, find_overlap, pair_keys
from ..data.pairs import PreferencePair
from ..embeddings import Embedder
from ..llm.base import Engine
from ..llm.budget import Budget, Spend
from ..llm.roles import ModelRoles
from ..run import RunDir
from .bookkeeping import RunBook, state_or_none


def loop_roles(
    config: RunConfig,
    run: RunDir,
    engines: Mapping[str, Engine] | None = None,
    spent: Mapping[str, Spend] | None = None,
) -> ModelRoles:
    """The loop's roles, through the run's call cache: target, teacher, and the checker of
    answers in validation (`RunConfig.answer_checker`: not the teacher unless it is the only
    model); one engine per model. Every role keeps the run's budget (`config.budget`), counted
    on from `spent` (run.json's, on a resume)."""
    models = {"target": config.target, "teacher": config.teacher, "checker": config.answer_checker()}
    budget = Budget(config.budget, {role: model.price for role, model in models.items()}, spent)
    return ModelRoles(models, cache_path=run.cache_path, engines=engines, budget=budget)


def check_data_overlap(
    config: RunConfig, target_pairs: list[PreferencePair], test_pairs: list[PreferencePair]
) -> DataOverlap:
    """Test pairs that are also target pairs (by id or content): refused unless
    `data.allow_overlap` (validating a bias on the pairs it was found on is circular)."""
    d = config.data
    overlap = find_overlap(
        pair_keys(target_pairs),
        pair_keys(test_pairs),
        discovery_name=f"data.target {describe_source(d.target, d.data_dir, portable=True)}",
        validation_name=f"data.test {describe_source(d.test, d.data_dir, portable=True)}",
    )
    return check_overlap(overlap, allow=d.allow_overlap, how_to_allow="pass `allow_overlap` (data.allow_overlap: true)")


class LoopResources:
    """The models, data and embedder of one run, each loaded on first use."""

    def __init__(
        self, run: RunDir, config: RunConfig, roles: ModelRoles, book: RunBook, embedder: Embedder | None = None
    ) -> None:
        """`embedder` replaces the configured sentence-transformers model (tests pass a fake)."""
        self.run = run
        self.config = config
        self.roles = roles
        self.book = book
        if embedder is not None:
            self.__dict__["embedder"] = embedder

    @property
    def target(self) -> Engine:
        return self.roles["target"]

    @property
    def teacher(self) -> Engine:
        return self.roles["teacher"]

    @property
    def checker(self) -> Engine | None:
        """The answer checker of validation, None when `validate.answer_check` is off."""
        return self.roles["checker"] if self.config.validate_.answer_check else None

    def booked(self, role: str, stage: str) -> Engine:
        """`role`'s engine with its calls booked to `stage` (streamed stages run at once)."""
        return self.roles[role].booked_to(stage)

    @cached_property
    def embedder(self) -> Embedder:
        from ..embeddings import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder(self.config.embedder)

    @cached_property
    def target_pairs(self) -> list[PreferencePair]:
        d = self.config.data
        return self._load_pairs("target", d.target, d.target_limit)

    @cached_property
    def test_pairs(self) -> list[PreferencePair]:
        d = self.config.data
        return self._load_pairs("test", d.test, d.test_limit)

    def _load_pairs(self, role: str, source: str, limit: int | None) -> list[PreferencePair]:
        """The `role` data; with `data.skip_bad_rows` the skipped rows are counted in run.json
        (`status` shows them) and named in events.jsonl."""
        bad_rows = bad_rows_for(source, self.config.data.skip_bad_rows)
        pairs = load_pairs(
            source, data_dir=self.config.data.data_dir, limit=limit, seed=self.config.seed, bad_rows=bad_rows
        )
        if bad_rows:
            state = state_or_none(self.run)
            skipped = {**(state.skipped_rows if state else {}), role: len(bad_rows)}
            self.book.update_state(skipped_rows=skipped)
            self.run.event("skipped_rows", role=role, source=source, count=len(bad_rows), rows=bad_rows[:20])
        return pairs

    @property
    def seed(self) -> int:
        return self.config.seed

    @cached_property
    def data_overlap(self) -> DataOverlap:
        """The target/test overlap, checked (`check_data_overlap`)."""
        return check_data_overlap(self.config, self.target_pairs, self.test_pairs)
