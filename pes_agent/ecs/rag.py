"""`RAGSystem` [-10]: a trigger query becomes retrieved passages in the conversation, before
the model's turn.

```python
world.register_system(RAGSystem(), priority=-10)
agent = world.create_entity(
    LLMComponent(model),
    ConversationComponent([ChatMessage("user", "How long is the warranty?")]),
    RAGTriggerComponent(query="warranty period", top_k=3),
    EmbeddingComponent(HashingEmbeddings(256)),
    VectorStoreComponent(store),
)
```

The passages go into one system message (named ``"retrieved_passages"``) placed just before
the last user message, so the model reads them with the question they serve. Retrieved text is
data, not instructions: the message is the delimited block of
`pes_agent.retrieval.passages.render_passages` (a header saying so, each passage quoted in a
`<passage id=...>` block that its text cannot close), bounded by `max_chars`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from ecs_core import EntityId, ErrorComponent, World
from pes_agent.ecs._model import recorder_for
from pes_agent.ecs.components import (
    ConversationComponent,
    EmbeddingComponent,
    RAGTriggerComponent,
    VectorStoreComponent,
)
from pes_agent.ecs.events import RAGRetrievalCompletedEvent
from pes_agent.ecs.messages import ChatMessage
from pes_agent.errors import UsageError
from pes_agent.observing.logs import get_logger
from pes_agent.observing.types import ObservationType
from pes_agent.retrieval._observation import RETRIEVED_TITLE, retrieved_content
from pes_agent.retrieval.base import ScoredDocument
from pes_agent.retrieval.passages import DEFAULT_MAX_CHARS, clip_passages, render_passages

__all__ = ["PASSAGES_NAME", "RAGSystem"]

#: The `name` of the system message that carries retrieved passages.
PASSAGES_NAME = "retrieved_passages"

_log = get_logger("pes_agent.ecs.rag")


class RAGSystem:
    """Retrieves passages for every entity whose `RAGTriggerComponent.query` is not empty.

    The entity needs an `EmbeddingComponent` (an `EmbeddingProvider`) and a
    `VectorStoreComponent` (a `VectorStore`). For each, concurrently: the query is embedded,
    the store searched for `top_k` passages, and the passages (texts clipped to `max_chars`
    in all) stored in `retrieved_docs` and, with a `ConversationComponent`, inserted as one
    system message just before the last user message (appended when there is none). Then the
    query is cleared and `RAGRetrievalCompletedEvent(entity_id, query, document_ids, scores)`
    published; with observations attached, a RETRIEVAL observation records the query, ids,
    scores and timing.

    A failure (embedding or search) leaves an `ErrorComponent` on the entity, the conversation
    as it was, and the query cleared, so a broken store is not asked again every tick.
    """

    def __init__(self, *, max_chars: int = DEFAULT_MAX_CHARS) -> None:
        if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 100:
            raise UsageError(f"max_chars must be an int >= 100 (characters), got {max_chars!r}")
        self.max_chars = max_chars

    async def process(self, world: World) -> None:
        """Retrieve for every triggered entity, concurrently."""
        due = [
            (entity, trigger, embedding, store)
            for entity, (trigger, embedding, store) in world.query(
                RAGTriggerComponent, EmbeddingComponent, VectorStoreComponent
            )
            if trigger.query.strip()
        ]
        if not due:
            return
        async with asyncio.TaskGroup() as group:
            for entity, trigger, embedding, store in due:
                group.create_task(self._retrieve(world, entity, trigger, embedding, store))

    async def _retrieve(
        self,
        world: World,
        entity: EntityId,
        trigger: RAGTriggerComponent,
        embedding: EmbeddingComponent,
        store: VectorStoreComponent,
    ) -> None:
        query = trigger.query
        # Cleared first: whatever happens below, this query is never retried by the next tick.
        trigger.query = ""
        started = time.perf_counter()
        try:
            if isinstance(trigger.top_k, bool) or not isinstance(trigger.top_k, int):
                raise UsageError(f"RAGTriggerComponent.top_k must be an int, got {trigger.top_k!r}")
            if trigger.top_k < 1:
                raise UsageError(f"RAGTriggerComponent.top_k must be >= 1, got {trigger.top_k}")
            vectors = await embedding.provider.embed([query])
            found: Sequence[ScoredDocument] = await store.store.search(vectors[0], trigger.top_k)
        except Exception as error:
            message = str(error)
            _log.warning("retrieval_failed", entity=entity, error=message)
            world.add_component(entity, ErrorComponent(error, type(self).__name__))
            return
        documents = clip_passages(found, self.max_chars)
        elapsed_ms = (time.perf_counter() - started) * 1000
        trigger.retrieved_docs = list(documents)
        conversation = world.get_component(entity, ConversationComponent)
        if conversation is not None and documents:
            block = ChatMessage(
                "system", render_passages(documents, max_chars=self.max_chars), name=PASSAGES_NAME
            )
            messages = conversation.messages
            last_user = next(
                (i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "user"),
                len(messages),
            )
            messages.insert(last_user, block)
        await recorder_for(world, entity).record(
            ObservationType.RETRIEVAL,
            RETRIEVED_TITLE,
            retrieved_content(query, documents, elapsed_ms),
        )
        await world.events.publish(
            RAGRetrievalCompletedEvent(
                entity,
                query,
                tuple(document.id for document in documents),
                tuple(document.score for document in documents),
            )
        )
