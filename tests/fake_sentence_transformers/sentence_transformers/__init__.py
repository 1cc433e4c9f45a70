"""A sentence-transformers stand-in for child processes of tests that exercise the CLI many
times (tests/test_kill_anywhere.py): hashed bag-of-words vectors, as tests/fakes.py's
BagOfWordsEmbedder, without torch's seconds of import. Put this directory first on a child's
PYTHONPATH; the model path is accepted and not read."""

import hashlib
import re

import numpy as np

__version__ = "0.0-fake"


class SentenceTransformer:
    def __init__(self, model_name_or_path, device=None, **kwargs):
        self.dim = 64

    def encode(self, sentences, normalize_embeddings=False, show_progress_bar=False, **kwargs):
        out = np.zeros((len(sentences), self.dim), dtype=np.float32)
        for i, text in enumerate(sentences):
            for word in re.findall(r"[a-z]+", text.lower()):
                out[i, int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1, norms)
