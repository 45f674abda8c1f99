"""The retrieval contracts: `EmbeddingProvider`, `VectorStore` and what a search returns.

An embedding provider turns texts into vectors of one fixed `dimension`; a vector store keeps
(id, vector, text, metadata) rows and finds the rows nearest to a query vector by cosine
similarity. Implementations:

- embeddings: `HashingEmbeddings` (deterministic, no model), `OpenAIEmbeddings` (any
  OpenAI-compatible `/v1/embeddings`), `LocalEmbeddings` (a small sentence model, offline);
- stores: `InMemoryVectorStore` (NumPy), `SQLiteVectorStore` (sqlite-vec, the embedded
  default), `PostgresVectorStore` (pgvector when the server has it, plain SQL otherwise).

Rules every store keeps, so they can be swapped without a change in results:

- `add` is an upsert by id: a second add with an id replaces its vector, text and metadata.
- `search` ranks by cosine similarity, highest first; `score` is that similarity (-1..1).
- `where` is an exact match on metadata keys, all of them: a row matches when it has every
  key with an equal value. Values are JSON scalars (str, int, float, bool, None); numbers
  compare by value (1 == 1.0), a float being the number its JSON text says (1e23 == 10**23),
  ints of any size; a bool is not a number, `None` matches only a stored null.
- A vector of another length than the store's `dimension` is a `DimensionMismatchError`; a
  zero or non-finite vector is a `UsageError` (cosine similarity has no meaning for it).
- A stored row whose metadata cannot be read (damaged by another program) is left out of every
  search with a warning naming the table and the row; `top_k` counts the rows that can be read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeAlias, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from pes_agent.errors import ConfigurationError

__all__ = [
    "DimensionMismatchError",
    "EmbeddingProvider",
    "Metadata",
    "MetadataValue",
    "ScoredDocument",
    "VectorStore",
]

MetadataValue: TypeAlias = str | int | float | bool | None
"""A metadata value: a JSON scalar, so every store can filter on it the same way."""

Metadata: TypeAlias = Mapping[str, MetadataValue]
"""One document's metadata, or a `where` filter: key -> scalar value."""


class DimensionMismatchError(ConfigurationError):
    """A vector's length differs from the dimension a store or embedding provider was made for.

    `expected` is the store's (or table's) dimension, `actual` the one offered. Build the store
    with `dimension=` equal to the embedding provider's `dimension`, or use another table.
    """

    def __init__(self, message: str, *, expected: int, actual: int) -> None:
        super().__init__(message)
        self.expected = expected
        self.actual = actual


class ScoredDocument(BaseModel):
    """One search hit: the stored document, its metadata and its cosine similarity to the query."""

    model_config = ConfigDict(frozen=True)

    id: str
    text: str
    score: float
    metadata: dict[str, Any] = Field(default_factory=dict)


@runtime_checkable
class EmbeddingProvider(Protocol):
    """Turns texts into vectors of `dimension` floats, one per text, in the order given.

    `embed([])` returns `[]` without any work. `aclose()` releases clients or models; the
    provider is not used after it.
    """

    @property
    def dimension(self) -> int:
        """The length of every vector `embed` returns."""
        ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed `texts`, one vector per text.

        Args:
            texts: The texts to embed; `[]` returns `[]` without any work.

        Returns:
            One vector of `dimension` floats per text, in the order of `texts`.
        """
        ...

    async def aclose(self) -> None:
        """Release what the provider holds (HTTP clients, models)."""
        ...


@runtime_checkable
class VectorStore(Protocol):
    """Keeps (id, vector, text, metadata) rows and finds those nearest to a vector by cosine.

    See the module docstring for the rules every implementation keeps (upsert, ranking,
    `where`, dimension checks). All methods are safe to call concurrently.
    """

    @property
    def dimension(self) -> int:
        """The length of every vector this store keeps."""
        ...

    async def add(
        self,
        ids: Sequence[str],
        vectors: Sequence[Sequence[float]],
        documents: Sequence[str],
        metadata: Sequence[Metadata] | None = None,
    ) -> None:
        """Insert the rows, replacing any row with the same id (an upsert).

        Args:
            ids: One id per row.
            vectors: One vector of `dimension` floats per row.
            documents: One text per row.
            metadata: One mapping of scalars per row, to filter on; None for none.

        Raises:
            UsageError: The sequences differ in length, or a metadata value is not a scalar.
            DimensionMismatchError: A vector's length is not `dimension`.
        """
        ...

    async def search(
        self, vector: Sequence[float], top_k: int, where: Metadata | None = None
    ) -> list[ScoredDocument]:
        """Find the rows nearest to `vector` by cosine similarity.

        Args:
            vector: The query's vector, of `dimension` floats.
            top_k: How many rows to return at most.
            where: Only rows whose metadata has these values; None for all.

        Returns:
            At most `top_k` rows matching `where`, best first.

        Raises:
            DimensionMismatchError: The vector's length is not `dimension`.
        """
        ...

    async def delete(self, ids: Sequence[str]) -> None:
        """Remove the rows with these ids.

        Args:
            ids: The rows to remove; ids not stored are ignored.
        """
        ...

    async def count(self) -> int:
        """Count the rows, e.g. to see whether an index was built.

        Returns:
            How many rows the store holds.
        """
        ...

    async def aclose(self) -> None:
        """Release connections; the store is not used after it."""
        ...
