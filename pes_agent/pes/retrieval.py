"""RetrievalSystem [-10]: passages for the query, searched before the plan is made."""

from __future__ import annotations

import time
from typing import ClassVar

from pes_agent.observing.logs import get_logger
from pes_agent.observing.types import ObservationType
from pes_agent.pes.base import PhaseRun, PhaseSystem
from pes_agent.pes.components import Phase, Retrieved
from pes_agent.pes.resources import ResourceTable
from pes_agent.retrieval._observation import RETRIEVED_TITLE, retrieved_content
from pes_agent.retrieval.retriever import Retriever

__all__ = ["RetrievalSystem"]

_log = get_logger("pes_agent.pes")


class RetrievalSystem(PhaseSystem[()]):
    """Asks the agent's retriever for passages and records a RETRIEVAL observation.

    The observation holds the query, the passage ids and scores, and the time taken in ms.
    A failing retriever does not fail the run: the RETRIEVAL observation (status `failed`)
    and an ERROR observation (phase `retrieval`) hold the error, planning goes on without
    passages, and the run ends `partial`.
    """

    phase: ClassVar[Phase] = "retrieval"
    done_when = (Retrieved,)

    def __init__(self, resources: ResourceTable, retriever: Retriever) -> None:
        super().__init__(resources)
        self._retriever = retriever

    async def run(self, run: PhaseRun) -> None:
        query = run.spec.props.query
        started = time.perf_counter()
        try:
            documents = await self._retriever.retrieve(query)
        except Exception as error:
            elapsed_ms = (time.perf_counter() - started) * 1000
            message = str(error)
            message = message or type(error).__name__
            _log.warning(
                "retrieval_failed",
                thread_id=run.spec.thread_id,
                trace_id=run.spec.trace_id,
                error_type=type(error).__name__,
                error=message,
            )
            await run.resources.recorder.record(
                ObservationType.RETRIEVAL,
                "Retrieval failed",
                {"status": "failed", "query": query, "error": message, "durationMs": elapsed_ms},
            )
            await run.resources.recorder.record(
                ObservationType.ERROR,
                "Retrieval failed",
                {"phase": "retrieval", "error": "retrieval failed: " + message},
            )
            run.add(Retrieved(documents=[], error=message))
            return
        elapsed_ms = (time.perf_counter() - started) * 1000
        await run.resources.recorder.record(
            ObservationType.RETRIEVAL,
            RETRIEVED_TITLE,
            retrieved_content(query, documents, elapsed_ms),
        )
        run.add(Retrieved(documents=documents))
