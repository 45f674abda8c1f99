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


async def test_a_subscriber_gets_every_observation_recorded_while_it_is_subscribed() -> None:
    """The in-memory shortcut still hands each observation to the subscribers of the moment:
    one subscribed mid-run gets what follows, in order, and nothing after it unsubscribes."""
    storage = InMemoryStorage()
    manager = ObservationManager(storage)
    recorder = RunRecorder(manager, "thread-1", "trace-1")
    await recorder.record(ObservationType.PLAN, "before", {})
    seen: list[Observation] = []
    unsubscribe = manager.subscribe(seen.append)
    first = await recorder.record(ObservationType.TOOL_CALL, "one", {"n": 1})
    second = await recorder.record(ObservationType.TOOL_EXECUTION, "two", {"n": 2})
    unsubscribe()
    await recorder.record(ObservationType.SYNTHESIS, "after", {})
    assert seen == [first, second]
    assert [o.title for o in await storage.get_observations("thread-1")] == [
        "before",
        "one",
        "two",
        "after",
    ]


async def test_a_value_json_cannot_hold_is_stored_as_its_repr() -> None:
    """A tool output that is not JSON is kept as its repr; the observation handed back keeps
    the value itself."""
    storage = InMemoryStorage()
    recorder = RunRecorder(ObservationManager(storage), "thread-1", "trace-1")
    odd = ValueError("not JSON")
    observation = await recorder.record(
        ObservationType.TOOL_EXECUTION, "odd", {"output": odd}, metadata={"also": odd}
    )
    assert observation.content["output"] is odd
    [stored] = await storage.get_observations("thread-1")
    assert stored.id == observation.id
    assert stored.content == {"output": repr(odd)}
    assert stored.metadata == {"also": repr(odd)}


async def test_a_store_that_fails_is_logged_and_the_run_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A store that refuses the observation (here: closed) costs the log entry, not the run:
    the failure is logged with the run's ids, and subscribers still get the observation."""
    storage = InMemoryStorage()
    manager = ObservationManager(storage)
    recorder = RunRecorder(manager, "thread-1", "trace-1")
    seen: list[Observation] = []
    manager.subscribe(seen.append)
    await storage.aclose()
    observation = await recorder.record(ObservationType.PLAN, "Plan", {})
    assert seen == [observation]
    [record] = [r for r in caplog.records if "observation_store_failed" in r.getMessage()]
    assert record.levelname == "ERROR"
    assert "trace-1" in record.getMessage()
