"""Recording the observations of one run, with its thread and trace filled in."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from pes_agent.observing.types import Observation, ObservationType
from pes_agent.protocols import ObservationRecorder

__all__ = ["RunRecorder"]


class RunRecorder:
    """Records observations of one run (one thread, one trace) through an ObservationRecorder."""

    __slots__ = ("_observations", "thread_id", "trace_id")

    def __init__(self, observations: ObservationRecorder, thread_id: str, trace_id: str) -> None:
        self._observations = observations
        self.thread_id = thread_id
        self.trace_id = trace_id

    async def record(
        self,
        type: ObservationType,
        title: str,
        content: dict[str, Any],
        *,
        metadata: dict[str, Any] | None = None,
        parent_id: str | None = None,
    ) -> Observation:
        """Record an observation of this run and return it."""
        # Every field is produced by the library itself, so pydantic's validation is skipped
        # on this hot path (a run records about twenty of these).
        observation = Observation.model_construct(
            id=uuid.uuid4().hex,
            thread_id=self.thread_id,
            trace_id=self.trace_id,
            timestamp=datetime.now(UTC),
            type=type,
            title=title,
            content=content,
            metadata=metadata,
            parent_id=parent_id,
        )
        return await self._observations.record(observation)
