"""RunRecorder: the observations it builds without validation are the ones validation builds."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from pes_agent.observing.manager import ObservationManager
from pes_agent.observing.types import Observation, ObservationType
from pes_agent.pes.recorder import RunRecorder
from pes_agent.storage.memory import InMemoryStorage


def _validated(observation: Observation) -> Observation:
    return Observation(**{name: getattr(observation, name) for name in Observation.model_fields})


async def test_built_observation_equals_the_validated_one() -> None:
    storage = InMemoryStorage()
    recorder = RunRecorder(ObservationManager(storage), "thread-1", "trace-1")
    content: dict[str, Any] = {"callId": "call_1", "arguments": {"x": [1, 2]}}
    metadata: dict[str, Any] = {"source": "test"}
    observation = await recorder.record(
        ObservationType.TOOL_CALL, "Calling f", content, metadata=metadata, parent_id="p"
    )
    same = _validated(observation)
    assert observation == same
    assert observation.model_fields_set == same.model_fields_set
    assert observation.model_dump_json() == same.model_dump_json()
    # The dicts are copies, as validation makes them: changing the caller's leaves it as is.
    assert observation.content is not content
    assert observation.metadata is not metadata
    content["callId"] = "changed"
    assert observation.content["callId"] == "call_1"
    stored = await storage.get_observations("thread-1")
    assert stored == [observation]
    with pytest.raises(ValidationError):
        observation.title = "frozen"  # type: ignore[misc]


async def test_values_validation_would_convert_or_refuse_are_validated() -> None:
    recorder = RunRecorder(ObservationManager(InMemoryStorage()), "thread-1", "trace-1")
    converted = await recorder.record("PLAN", "Plan", {})  # type: ignore[arg-type]
    assert converted.type is ObservationType.PLAN
    with pytest.raises(ValidationError):
        await recorder.record(ObservationType.PLAN, "Plan", {1: "not a str key"})  # type: ignore[dict-item]
    with pytest.raises(ValidationError):
        await recorder.record(ObservationType.PLAN, 3, {})  # type: ignore[arg-type]
