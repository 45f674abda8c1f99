"""The content of the RETRIEVAL observation a successful search leaves, one shape for both
the PES phase (`pes_agent.pes.retrieval`) and the ECS system (`pes_agent.ecs.rag`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pes_agent.retrieval.base import ScoredDocument

__all__ = ["RETRIEVED_TITLE", "retrieved_content"]

#: The title of the RETRIEVAL observation for a search that succeeded.
RETRIEVED_TITLE = "Passages retrieved"


def retrieved_content(
    query: str, documents: Sequence[ScoredDocument], elapsed_ms: float
) -> dict[str, Any]:
    """Record this as the RETRIEVAL observation's content: the query, ids, scores and time."""
    return {
        "status": "done",
        "query": query,
        "ids": [document.id for document in documents],
        "scores": [document.score for document in documents],
        "durationMs": elapsed_ms,
    }
