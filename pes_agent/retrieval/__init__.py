"""Retrieval: embedding providers and vector stores (DESIGN section 10).

```python
from pes_agent.retrieval import HashingEmbeddings, InMemoryVectorStore

embeddings = HashingEmbeddings(dimension=256)
store = InMemoryVectorStore(dimension=embeddings.dimension)
await store.add(["a"], await embeddings.embed(["Paris is in France"]), ["Paris is in France"])
hits = await store.search((await embeddings.embed(["Where is Paris?"]))[0], top_k=4)
```

The contracts are `EmbeddingProvider` and `VectorStore` (`pes_agent.retrieval.base`). Optional
dependencies are imported only when an implementation that needs them is created: NumPy and
sqlite-vec (`pes-agent[retrieval]`), asyncpg (`pes-agent[postgres]`), the local model
(`pes-agent[local]`).
"""

from __future__ import annotations

from pes_agent.retrieval.base import (
    DimensionMismatchError,
    EmbeddingProvider,
    Metadata,
    MetadataValue,
    ScoredDocument,
    VectorStore,
)
from pes_agent.retrieval.hashing import HashingEmbeddings
from pes_agent.retrieval.ingest import IngestProgress, chunk_text, store_documents
from pes_agent.retrieval.local import LocalEmbeddings
from pes_agent.retrieval.memory import InMemoryVectorStore
from pes_agent.retrieval.openai import OpenAIEmbeddings
from pes_agent.retrieval.passages import render_passages
from pes_agent.retrieval.postgres import PostgresVectorStore, VectorBackend
from pes_agent.retrieval.retriever import Retriever
from pes_agent.retrieval.sqlite import SQLiteVectorStore

__all__ = [
    "DimensionMismatchError",
    "EmbeddingProvider",
    "HashingEmbeddings",
    "InMemoryVectorStore",
    "IngestProgress",
    "LocalEmbeddings",
    "Metadata",
    "MetadataValue",
    "OpenAIEmbeddings",
    "PostgresVectorStore",
    "Retriever",
    "SQLiteVectorStore",
    "ScoredDocument",
    "VectorBackend",
    "VectorStore",
    "chunk_text",
    "render_passages",
    "store_documents",
]
