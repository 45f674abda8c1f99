"""Recording the observations of one run, with its thread and trace filled in."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from pes_agent.durable.effects import RunEffects
from pes_agent.observing.manager import ObservationManager
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
        timestamp = _now(UTC)
        if (
            type.__class__ is ObservationType
            and title.__class__ is str
            and self.thread_id.__class__ is str
            and self.trace_id.__class__ is str
            and (parent_id is None or parent_id.__class__ is str)
            # dicts with only `str` keys, what `dict[str, Any]` validation keeps (written out
            # here rather than called: a 3-call run records 18 observations)
            and content.__class__ is dict
            and _STR.issuperset(map(_type_of, content))
            and (
                metadata is None
                or (metadata.__class__ is dict and _STR.issuperset(map(_type_of, metadata)))
            )
        ):
            # Every field is already what validation would make of it: build the model
            # directly, as validation would (the dicts copied), at half its cost. A run records
            # two observations per tool call.
            observation = _built(
                {
                    "id": new_id(),
                    "thread_id": self.thread_id,
                    "trace_id": self.trace_id,
                    "timestamp": timestamp,
                    "type": type,
                    "title": title,
                    "content": dict(content),
                    "metadata": None if metadata is None else dict(metadata),
                    "parent_id": parent_id,
                }
            )
        else:
            # Anything else goes through validation, which converts or refuses it.
            observation = Observation(
                id=new_id(),
                thread_id=self.thread_id,
                trace_id=self.trace_id,
                timestamp=timestamp,
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
        observations = self._observations
        if observations.__class__ is ObservationManager:
            # Stored in memory and handed to sync subscribers without a coroutine.
            pending = observations.record_soon(observation)
            if pending is not None:
                await pending
            return observation
        return await observations.record(observation)


_FIELDS: frozenset[str] = frozenset(Observation.model_fields)
_FIELDS_SET: set[str] = set(_FIELDS)
_now = datetime.now
_new = object.__new__
_type_of = type
_STR = frozenset({str})
# BaseModel's slots, set through their descriptors: what `object.__setattr__` finds for each
# name, without looking for it (a fifth of `_built`'s cost).
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


def _built(fields: dict[str, Any]) -> Observation:
    """The `Observation` of `fields` (every field, each already valid), unvalidated: what its
    constructor would return for them, `model_fields_set` included."""
    observation: Observation = _new(Observation)
    _set_dict(observation, fields)
    # One set for all: an Observation is frozen, so nothing adds to (or takes from) it.
    _set_fields_set(observation, _FIELDS_SET)
    _set_extra(observation, None)
    _set_private(observation, None)
    return observation
