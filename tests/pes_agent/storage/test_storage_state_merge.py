"""Implicit state saving and compare-and-set saves racing other connections, on every backend."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pes_agent import AgentProps, StateManager, ToolContext, create_agent, tool
from pes_agent.config import AgentState
from pes_agent.errors import StateConflictError
from pes_agent.storage import Storage
from pes_agent.testing import ScriptedProvider

from .conftest import StorageFactory

PLAN = json.dumps(
    {"intent": "count", "toolCalls": [{"callId": "c1", "toolName": "visit", "arguments": {}}]}
)


@tool
def visit(context: ToolContext) -> str:
    """Count a visit in the thread state."""
    assert context.state is not None
    context.state.data["visits"] = context.state.data.get("visits", 0) + 1
    return "counted"


def race_before_each_commit(
    monkeypatch: pytest.MonkeyPatch, store: Storage, other: Storage, *, times: int
) -> list[int]:
    """Make `other` save the state (adding a key) right before each of `store`'s next `times`
    commits of a state, as another process could; returns the list counting those commits."""
    commits: list[int] = []
    real_commit = store.commit_turn

    async def racing_commit(thread_id: str, messages: Any, state: Any, **options: Any) -> Any:
        if state is not None:
            commits.append(len(commits) + 1)
            if len(commits) <= times:
                current = await other.get_agent_state(thread_id) or AgentState()
                data = {**current.data, f"saved_elsewhere_{len(commits)}": True}
                await other.set_agent_state(thread_id, AgentState(data=data))
        return await real_commit(thread_id, messages, state, **options)

    monkeypatch.setattr(store, "commit_turn", racing_commit)
    return commits


async def test_implicit_saving_merges_again_when_a_save_lands_before_its_commit(
    open_backend: StorageFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state saved through another connection between the run's merge and its commit is
    kept: the commit's compare-and-set misses and the run merges again on top of it."""
    store, other = open_backend(), open_backend()
    await store.set_agent_state("t", AgentState(data={"visits": 0, "plan": "free"}))
    commits = race_before_each_commit(monkeypatch, store, other, times=2)
    agent = create_agent(
        provider=ScriptedProvider([PLAN, "done"]),
        tools=[visit],
        storage=store,
        state_saving="implicit",
    )
    async with agent:
        result = await agent.process(AgentProps("q", "t"))
    assert result.metadata.status == "success", result.metadata.error
    state = await other.get_agent_state("t")
    assert state == AgentState(
        data={"visits": 1, "plan": "free", "saved_elsewhere_1": True, "saved_elsewhere_2": True},
        version=4,
    )
    assert len(commits) == 3
    assert [m.content for m in await other.get_messages("t")] == ["q", "done"]


async def test_implicit_saving_gives_up_after_a_bounded_number_of_conflicts(
    open_backend: StorageFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When every commit loses the race, the run stops after a few merges and ends with an
    error naming the conflict, saving nothing of the turn."""
    store, other = open_backend(), open_backend()
    commits = race_before_each_commit(monkeypatch, store, other, times=1000)
    agent = create_agent(
        provider=ScriptedProvider([PLAN, "done"]),
        tools=[visit],
        storage=store,
        state_saving="implicit",
    )
    async with agent:
        result = await agent.process(AgentProps("q", "t"))
    assert result.metadata.status == "error"
    assert "changed since it was read" in (result.metadata.error or "")
    assert 1 < len(commits) <= 10
    assert await other.get_messages("t") == []
    state = await other.get_agent_state("t")
    assert state is not None
    assert "visits" not in state.data


async def test_state_manager_saves_compare_and_set_with_expected_version(
    open_backend: StorageFactory,
) -> None:
    """Two StateManagers on two connections read version 1; the first save with
    expected_version=1 wins, the second gets StateConflictError and saves nothing."""
    first, second = StateManager(open_backend()), StateManager(open_backend())
    await first.set_agent_state("t", AgentState(data={"n": 0}))
    read_first = await first.get_agent_state("t")
    read_second = await second.get_agent_state("t")
    assert read_first is not None
    assert read_second is not None
    saved = await first.set_agent_state(
        "t", AgentState(data={"n": 1}), expected_version=read_first.version
    )
    assert saved == AgentState(data={"n": 1}, version=2)
    with pytest.raises(StateConflictError, match="get_agent_state"):
        await second.set_agent_state(
            "t", AgentState(data={"n": 100}), expected_version=read_second.version
        )
    assert await second.get_agent_state("t") == AgentState(data={"n": 1}, version=2)
