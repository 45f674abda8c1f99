"""`HashingEmbeddings`: deterministic vectors from hashed words and character trigrams, no model.

For tests and offline demos: the same text gives the same vector in every process and on every
machine (blake2b, never Python's salted `hash()`), and texts sharing words or word fragments
land closer than texts that share none. It knows no synonyms; use `LocalEmbeddings` or
`OpenAIEmbeddings` for meaning.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import math
import re
from collections.abc import Sequence

from pes_agent.retrieval._common import check_dimension

__all__ = ["HashingEmbeddings"]

_WORD = re.compile(r"\w+", re.UNICODE)
# Each kind of feature gets its own weight: whole words say most, fragments help with
# inflections ("index" / "indexing"), word pairs with phrases.
_WORD_WEIGHT = 1.0
_PAIR_WEIGHT = 0.5
_TRIGRAM_WEIGHT = 0.25
# Embedding a large batch inline would hold the event loop for a noticeable time.
_INLINE_CHARS = 20_000


class HashingEmbeddings:
    """Embeds text by the hashing trick: each feature adds ±weight to one of `dimension` buckets.

    Features: lower-cased words, adjacent word pairs and the character trigrams of each word
    (with boundary marks). A feature's bucket and sign come from its blake2b digest; the
    vector is L2-normalised. Text without any word (empty, punctuation only) hashes one fixed
    feature, so every vector has a direction.
    """

    def __init__(self, dimension: int = 256) -> None:
        """Hash texts into vectors of `dimension` floats.

        Args:
            dimension: The length of every vector; the store must keep the same.

        Raises:
            ConfigurationError: `dimension` is not a positive int.
        """
        self._dimension = check_dimension(dimension, "HashingEmbeddings")

    @property
    def dimension(self) -> int:
        """The length of every vector."""
        return self._dimension

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed `texts`; large batches are hashed in a worker thread.

        Args:
            texts: The texts to embed (one string counts as one text).

        Returns:
            One unit vector per text, in order.
        """
        if isinstance(texts, str):
            texts = [texts]
        if sum(len(text) for text in texts) > _INLINE_CHARS:
            return await asyncio.to_thread(self.embed_sync, texts)
        return self.embed_sync(texts)

    def embed_sync(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed `texts` as `embed` does, without the event loop (for scripts and benchmarks).

        Args:
            texts: The texts to embed.

        Returns:
            One unit vector per text, in order.
        """
        return [self._vector(text) for text in texts]

    async def aclose(self) -> None:
        """Nothing to release."""

    def _vector(self, text: str) -> list[float]:
        buckets = [0.0] * self._dimension
        words = _WORD.findall(text.lower())
        for feature, weight in _features(words):
            digest = int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest())
            sign = 1.0 if digest >> 63 else -1.0
            buckets[digest % self._dimension] += sign * weight
        norm = math.sqrt(sum(value * value for value in buckets))
        if norm == 0.0:
            # Features cancelled out exactly (rare): fall back to the fixed empty-text feature.
            return self._vector("") if words else _unit(self._dimension)
        return [value / norm for value in buckets]


def _features(words: list[str]) -> list[tuple[str, float]]:
    if not words:
        return [("\x00empty", 1.0)]
    features = [(f"w:{word}", _WORD_WEIGHT) for word in words]
    features += [(f"p:{a} {b}", _PAIR_WEIGHT) for a, b in itertools.pairwise(words)]
    for word in words:
        marked = f"<{word}>"
        features += [(f"c:{marked[i : i + 3]}", _TRIGRAM_WEIGHT) for i in range(len(marked) - 2)]
    return features


def _unit(dimension: int) -> list[float]:
    vector = [0.0] * dimension
    vector[0] = 1.0
    return vector
