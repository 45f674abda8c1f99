"""Subscription filters: one name or many, and a clear error for names that match nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pes_agent import (
    AgentProps,
    InMemoryStorage,
    Observation,
    ObservationManager,
    ObservationType,
    StreamEvent,
    StreamSocket,
)
from pes_agent.testing import ScriptedProvider

from ...helpers import AgentBuilder

PHASES = ("planning", "repair", "synthesis")


def _event(phase: Any) -> StreamEvent:
    return StreamEvent(thread_id="t", trace_id="tr", phase=phase, kind="token", text=phase)


def _observation(kind: ObservationType) -> Observation:
    return Observation(thread_id="t", trace_id="tr", type=kind, title=kind.value)


async def test_one_phase_name_as_a_string_receives_the_answer_tokens(
    build_agent: AgentBuilder,
) -> None:
    """stream.subscribe(phases="synthesis") streams the answer, not a filter on its letters."""
    plan = json.dumps({"intent": "i", "plan": "p", "toolCalls": []})
    agent = build_agent(provider=ScriptedProvider([plan, "Forty-two."], chunk_size=4))
    seen: list[StreamEvent] = []
    agent.stream.subscribe(seen.append, phases="synthesis")
    await agent.process(AgentProps("q", "t"))
    assert "".join(e.text for e in seen if e.kind == "token") == "Forty-two."
    assert {e.phase for e in seen} == {"synthesis"}


async def test_phase_names_are_accepted_in_any_case_and_as_any_iterable() -> None:
    """A tuple or generator of phase names in any case selects exactly those phases."""
    socket = StreamSocket()
    single: list[str] = []
    several: list[str] = []
    socket.subscribe(lambda e: single.append(e.phase), phases="Planning")
    socket.subscribe(lambda e: several.append(e.phase), phases=(p for p in ("REPAIR", "synthesis")))
    for phase in PHASES:
        await socket.publish(_event(phase))
    assert single == ["planning"]
    assert several == ["repair", "synthesis"]


@pytest.mark.parametrize(
    ("phases", "named"),
    [("synth", "'synth'"), (["synthesis", "answer"], "'answer'"), ([3], "3")],
)
def test_unknown_phase_is_a_value_error_listing_the_phases(phases: Any, named: str) -> None:
    """A phase name that no stream has is refused, naming it and every valid phase."""
    with pytest.raises(ValueError, match=f"unknown phase {named}") as raised:
        StreamSocket().subscribe(print, phases=phases)
    assert all(phase in str(raised.value) for phase in PHASES)


@pytest.mark.parametrize("phases", [[], 7, b"synthesis"])
def test_phases_that_can_match_nothing_are_refused(phases: Any) -> None:
    """An empty list, or a value that is neither a name nor names, lists the valid phases."""
    with pytest.raises(ValueError, match="planning, repair, synthesis"):
        StreamSocket().subscribe(print, phases=phases)


async def test_observation_types_accept_one_name_in_any_case() -> None:
    """subscribe(types="tool_execution") gets only TOOL_EXECUTION observations."""
    manager = ObservationManager(InMemoryStorage())
    seen: list[ObservationType] = []
    manager.subscribe(lambda o: seen.append(o.type), types="tool_execution")
    for kind in (ObservationType.PLAN, ObservationType.TOOL_EXECUTION):
        await manager.record(_observation(kind))
    assert seen == [ObservationType.TOOL_EXECUTION]
    found = await manager.get_observations("t", types="Plan")
    assert [o.type for o in found] == [ObservationType.PLAN]


@pytest.mark.parametrize("types", [["PLAN", "PLANS"], 5, []])
def test_observation_types_that_can_match_nothing_are_a_value_error(types: Any) -> None:
    """An unknown type name, a non-iterable or an empty list is refused, listing the types."""
    manager = ObservationManager(InMemoryStorage())
    with pytest.raises(ValueError, match="observation type") as raised:
        manager.subscribe(print, types=types)
    assert all(kind.value in str(raised.value) for kind in ObservationType)


async def test_get_observations_refuses_an_unknown_type_but_allows_none_selected() -> None:
    """A misspelt type in a query is an error; an empty selection simply finds nothing."""
    manager = ObservationManager(InMemoryStorage())
    await manager.record(_observation(ObservationType.PLAN))
    with pytest.raises(ValueError, match="unknown observation type 'PLN'"):
        await manager.get_observations("t", types=["PLN"])
    assert await manager.get_observations("t", types=[]) == []


async def test_sync_subscribers_are_called_at_once_and_async_ones_in_their_turn() -> None:
    """`record_soon` hands an observation to sync subscribers without awaiting; at the first
    async one it returns the rest, which keeps the subscription order; a raising subscriber is
    skipped; one that unsubscribes itself mid-delivery leaves the others their turn."""
    manager = ObservationManager(InMemoryStorage())
    calls: list[str] = []

    def first(observation: Observation) -> None:
        calls.append("first")

    def failing(observation: Observation) -> None:
        calls.append("failing")
        raise RuntimeError("subscriber bug")

    def leaving(observation: Observation) -> None:
        calls.append("leaving")
        stop_leaving()

    async def slow(observation: Observation) -> None:
        calls.append("slow")

    def last(observation: Observation) -> None:
        calls.append("last")

    manager.subscribe(first)
    manager.subscribe(failing)
    stop_leaving = manager.subscribe(leaving)
    observation = _observation(ObservationType.PLAN)

    # Sync ones only, so far: all called before record_soon returns, nothing to await.
    assert manager.record_soon(observation) is None
    assert calls == ["first", "failing", "leaving"]

    calls.clear()
    manager.subscribe(slow)
    manager.subscribe(last)
    pending = manager.record_soon(_observation(ObservationType.TOOL_CALL))
    assert calls == ["first", "failing"]  # up to the async one, whose coroutine is pending
    assert pending is not None
    await pending
    assert calls == ["first", "failing", "slow", "last"]
    stored = await manager.get_observations("t")
    assert [o.type for o in stored] == [ObservationType.PLAN, ObservationType.TOOL_CALL]
