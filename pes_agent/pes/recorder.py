"""Recording the observations of one run, with its thread and trace filled in."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pes_agent.durable.effects import RunEffects
from pes_agent.observing.types import Observation, ObservationType, new_id
from pes_agent.protocols import ObservationRecorder

if TYPE_CHECKING:
    from pes_agent.durable.effects import RunEffects

__all__ = ["RunRecorder"]


class RunRecorder:
    """Records observations of one run (one thread, one trace) through an ObservationRecorder;
    on a durable engine, through the run's `RunEffects.record` (the engine says when)."""

    __slots__ = ("_effects", "_observations", "thread_id", "trace_id")

    def __init__(
        self,
        observations: ObservationRecorder,
        thread_id: str,
        trace_id: str,
        effects: RunEffects | None = None,
    ) -> None:
        self._observations = observations
        self._effects = effects
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
        # A run records about twenty of these: the plain constructor is the cheapest way to a
        # model (model_construct is slower in pydantic 2.x), and the id the cheapest random one.
        observation = Observation(
            id=new_id(),
            thread_id=self.thread_id,
            trace_id=self.trace_id,
            timestamp=datetime.now(UTC),
            type=type,
            title=title,
            content=content,
            metadata=metadata,
            parent_id=parent_id,
        )
        if self._effects is not None:
            # On a durable engine the engine writes it (or leaves out what a run taken over
            # had recorded in its earlier life).
            return await self._effects.record(observation, self._observations.record)
        return await self._observations.record(observation)
