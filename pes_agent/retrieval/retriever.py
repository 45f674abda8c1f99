"""`Retriever`: an embedding provider and a vector store, asked together for passages.

```python
retriever = Retriever(HashingEmbeddings(256), InMemoryVectorStore(256), top_k=4)
await store_documents(retriever, [Path("docs/faq.md")])
agent = create_agent(provider="openai:gpt-4o-mini", retriever=retriever)
```

An agent given a retriever searches it for each query before planning and shows the passages
to the planning and synthesis calls as quoted data (see `pes_agent.retrieval.passages`).
"""

from __future__ import annotations

from collections.abc import Sequence

from pes_agent.errors import UsageError
from pes_agent.retrieval.base import EmbeddingProvider, Metadata, ScoredDocument, VectorStore
from pes_agent.retrieval.passages import DEFAULT_MAX_CHARS, PROMPT_MAX_CHARS, clip_passages

__all__ = ["Retriever"]


class Retriever:
    """Finds the `top_k` passages nearest to a query, their texts at most `max_chars` in all.

    The embedding provider and the store must agree on `dimension`. The retriever owns
    neither: `aclose()` closes both for the caller's convenience, and an agent given the
    retriever never closes it.
    """

    def __init__(
        self,
        embeddings: EmbeddingProvider,
        store: VectorStore,
        top_k: int = 4,
        *,
        max_chars: int = DEFAULT_MAX_CHARS,
    ) -> None:
        """Search `store` with the vectors `embeddings` makes.

        Args:
            embeddings: Embeds the query (and the documents `add` stores), e.g.
                `HashingEmbeddings(256)`.
            store: Holds the documents' vectors, e.g. `InMemoryVectorStore(256)`.
            top_k: How many passages a search returns at most.
            max_chars: The most characters of passage text a search returns in all (from 100
                to `PROMPT_MAX_CHARS`).

        Raises:
            UsageError: `embeddings` or `store` is not one, a number is out of range, or the
                two disagree on the vectors' dimension.
        """
        if not callable(getattr(embeddings, "embed", None)):
            raise UsageError(
                "embeddings must be an EmbeddingProvider (with dimension and async embed()), "
                f"e.g. HashingEmbeddings(256); got {type(embeddings).__name__}"
            )
        if not callable(getattr(store, "search", None)) or not callable(
            getattr(store, "add", None)
        ):
            raise UsageError(
                "store must be a VectorStore (with async add() and search()), e.g. "
                f"InMemoryVectorStore(256); got {type(store).__name__}"
            )
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise UsageError(f"top_k must be an int >= 1, got {top_k!r}; e.g. top_k=4")
        if (
            isinstance(max_chars, bool)
            or not isinstance(max_chars, int)
            or not 100 <= max_chars <= PROMPT_MAX_CHARS
        ):
            raise UsageError(
                f"max_chars must be an int from 100 to {PROMPT_MAX_CHARS} (characters of "
                f"passage text in a prompt), got {max_chars!r}; e.g. max_chars={DEFAULT_MAX_CHARS}"
            )
        store_dimension = getattr(store, "dimension", None)
        if isinstance(store_dimension, int) and store_dimension != embeddings.dimension:
            raise UsageError(
                f"the embeddings make vectors of {embeddings.dimension} floats but the store "
                f"keeps {store_dimension}; build the store with dimension="
                f"{embeddings.dimension}"
            )
        self.embeddings = embeddings
        self.store = store
        self.top_k = top_k
        self.max_chars = max_chars

    async def retrieve(self, query: str, *, where: Metadata | None = None) -> list[ScoredDocument]:
        """Find the passages nearest to `query`, as an agent does before planning.

        Args:
            query: The text to search for; an empty one finds nothing.
            where: Only documents whose metadata has these values; None for all.

        Returns:
            At most `top_k` passages, best first, their texts clipped to `max_chars` in all.

        Raises:
            StorageError: The store could not be searched.
        """
        if not query.strip():
            return []
        vectors = await self.embeddings.embed([query])
        found = await self.store.search(vectors[0], self.top_k, where)
        return clip_passages(found, self.max_chars)

    async def add(
        self,
        ids: Sequence[str],
        texts: Sequence[str],
        metadata: Sequence[Metadata] | None = None,
    ) -> None:
        """Embed `texts` and store them under `ids` (an upsert); see also `store_documents`.

        Args:
            ids: One id for each text; a text stored under an id already replaces it.
            texts: The texts to embed and store.
            metadata: One mapping of scalars for each text, to filter on; None for none.

        Raises:
            UsageError: The sequences differ in length, or a metadata value is not a scalar.
            StorageError: The store could not be written.
        """
        vectors = await self.embeddings.embed(list(texts))
        await self.store.add(ids, vectors, texts, metadata)

    async def aclose(self) -> None:
        """Close the embedding provider and the store."""
        try:
            await self.embeddings.aclose()
        finally:
            await self.store.aclose()
