"""Closing an agent: what it closes, and what becomes of the runs still under way."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pes_agent import (
    AgentProps,
    ObservationType,
    ProviderConfig,
    SQLiteStorage,
    UsageError,
    create_agent,
    tool,
)
from pes_agent.providers import registry as registry_module
from pes_agent.providers.registry import register_provider
from pes_agent.testing import ScriptedProvider

from .conftest import Events, call, plan_json


class _ClosingProbe(ScriptedProvider):
    """A scripted provider that notes whether it was closed, and may fail to close."""

    closed = False
    fail_on_close = False

    async def aclose(self) -> None:
        self.closed = True
        if self.fail_on_close:
            raise RuntimeError("close failed")


@pytest.fixture
def built() -> Iterator[list[_ClosingProbe]]:
    """Registers the provider name 'probe'; yields the providers it builds."""
    made: list[_ClosingProbe] = []

    def factory(config: ProviderConfig) -> _ClosingProbe:
        probe = _ClosingProbe([plan_json(), "ok"], model=config.model)
        probe.fail_on_close = config.model == "failing"
        made.append(probe)
        return probe

    saved = dict(registry_module._REGISTRY)
    register_provider("probe", factory)
    try:
        yield made
    finally:
        registry_module._REGISTRY.clear()
        registry_module._REGISTRY.update(saved)


async def test_closing_one_agent_leaves_a_shared_storage_working_for_another(
    tmp_path: Path,
) -> None:
    """Two agents share one SQLiteStorage; closing the first leaves the second able to run."""
    storage = SQLiteStorage(tmp_path / "agent.db")
    first = create_agent(provider=ScriptedProvider([plan_json(), "one"]), storage=storage)
    second = create_agent(provider=ScriptedProvider([plan_json(), "two"]), storage=storage)
    try:
        assert (await first.process(AgentProps("q1", "a"))).metadata.status == "success"
        await first.aclose()
        result = await second.process(AgentProps("q2", "b"))
        assert result.metadata.status == "success", result.metadata.error
        assert [m.content for m in await storage.get_messages("b")] == ["q2", "two"]
    finally:
        await second.aclose()
        await storage.aclose()


async def test_a_provider_object_passed_in_is_left_open() -> None:
    """aclose() does not close a provider object the caller created and passed in."""
    provider = _ClosingProbe([plan_json(), "ok"])
    agent = create_agent(provider=provider)
    await agent.process(AgentProps("q", "t"))
    await agent.aclose()
    assert not provider.closed


@pytest.mark.parametrize("spec", ["probe:model", ProviderConfig("probe", "model")])
async def test_a_provider_built_from_a_string_or_config_is_closed(
    spec: str | ProviderConfig, built: list[_ClosingProbe]
) -> None:
    """aclose() closes the provider create_agent built from 'NAME:MODEL' or a ProviderConfig."""
    agent = create_agent(provider=spec)
    assert (await agent.process(AgentProps("q", "t"))).metadata.status == "success"
    await agent.aclose()
    assert len(built) == 1
    assert built[0].closed


async def test_a_storage_built_from_a_url_is_closed(tmp_path: Path) -> None:
    """aclose() closes the store create_agent opened from a sqlite:/// URL."""
    agent = create_agent(
        provider=ScriptedProvider([plan_json(), "ok"]),
        storage=f"sqlite:///{tmp_path / 'agent.db'}",
    )
    await agent.process(AgentProps("q", "t"))
    await agent.aclose()
    with pytest.raises(UsageError, match="closed"):
        await agent.state.list_threads()


async def test_a_resource_failing_to_close_does_not_leave_the_others_open(
    tmp_path: Path, built: list[_ClosingProbe]
) -> None:
    """A built provider whose aclose raises does not leave the store open; the error is raised."""
    agent = create_agent(provider="probe:failing", storage=f"sqlite:///{tmp_path / 'agent.db'}")
    await agent.state.list_threads()
    with pytest.raises(RuntimeError, match="close failed"):
        await agent.aclose()
    with pytest.raises(UsageError, match="closed"):
        await agent.state.list_threads()


def _started(agent: Any, kind: ObservationType = ObservationType.PLAN) -> asyncio.Event:
    """An event set once the agent records an observation of `kind`."""
    seen = asyncio.Event()
    agent.observations.subscribe(lambda o: seen.set(), types=[kind])
    return seen


async def test_aclose_waits_for_runs_in_progress_which_keep_their_turns(tmp_path: Path) -> None:
    """aclose() during a run lets it finish and save its turn before closing the store."""
    path = tmp_path / "agent.db"
    agent = create_agent(
        provider=ScriptedProvider([plan_json(), "the answer"], latency_s=0.2),
        storage=f"sqlite:///{path}",
    )
    started = _started(agent)
    task = asyncio.create_task(agent.process(AgentProps("q", "t")))
    await started.wait()
    await agent.aclose()
    result = await task
    assert result.metadata.status == "success", result.metadata.error
    assert result.response.content == "the answer"
    async with SQLiteStorage(path) as storage:
        assert [m.content for m in await storage.get_messages("t")] == ["q", "the answer"]


async def test_process_after_aclose_started_raises_while_the_run_under_way_finishes(
    tmp_path: Path,
) -> None:
    """Once aclose() has begun, a new process() raises UsageError; the earlier run completes."""
    agent = create_agent(
        provider=ScriptedProvider([plan_json(), "done"], latency_s=0.2),
        storage=f"sqlite:///{tmp_path / 'agent.db'}",
    )
    started = _started(agent)
    running = asyncio.create_task(agent.process(AgentProps("q", "t")))
    await started.wait()
    closing = asyncio.create_task(agent.aclose())
    await asyncio.sleep(0)
    with pytest.raises(UsageError, match="closed"):
        await agent.process(AgentProps("late", "other"))
    assert not closing.done()
    assert (await running).metadata.status == "success"
    await closing


async def test_aclose_timeout_cancels_runs_still_going_and_keeps_their_observations(
    tmp_path: Path, tools: list[Any], events: Events
) -> None:
    """After the timeout, a running run and one waiting for its thread end 'cancelled', no turn."""
    path = tmp_path / "agent.db"
    model = ScriptedProvider(
        [lambda r: plan_json(call(1, "sleepy", seconds=30)) if r.phase == "planning" else "x"],
        repeat=True,
    )
    agent = create_agent(provider=model, tools=tools, storage=f"sqlite:///{path}")
    sleeping = _started(agent, ObservationType.TOOL_CALL)
    first = asyncio.create_task(agent.process(AgentProps("q1", "t")))
    await sleeping.wait()
    # The second run waits for the thread the first one holds.
    second = asyncio.create_task(agent.process(AgentProps("q2", "t")))
    await asyncio.sleep(0.01)
    await agent.aclose(timeout=0.1)
    results = [await first, await second]
    assert [r.metadata.status for r in results] == ["cancelled", "cancelled"]
    assert all("aclose" in (r.metadata.error or "") for r in results)
    assert "sleepy:cancelled" in events.log
    async with SQLiteStorage(path) as storage:
        assert await storage.get_messages("t") == []
        for result in results:
            kinds = [
                o.type
                for o in await storage.get_observations("t", trace_id=result.metadata.trace_id)
            ]
            assert kinds[-1] is ObservationType.ERROR
        errors = await storage.get_observations("t", types=[ObservationType.ERROR])
        assert [o.content["phase"] for o in errors] == ["cancelled", "cancelled"]
        calls = await storage.get_observations("t", types=[ObservationType.TOOL_CALL])
        assert [o.trace_id for o in calls] == [results[0].metadata.trace_id]


async def test_a_caller_cancelling_its_run_still_gets_cancelled_error_after_aclose_begins(
    tools: list[Any],
) -> None:
    """A run its own caller cancels raises CancelledError, even while aclose() waits for it."""
    model = ScriptedProvider([plan_json(call(1, "sleepy", seconds=30)), "x"])
    agent = create_agent(provider=model, tools=tools)
    sleeping = _started(agent, ObservationType.TOOL_CALL)
    task = asyncio.create_task(agent.process(AgentProps("q", "t")))
    await sleeping.wait()
    closing = asyncio.create_task(agent.aclose())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await closing


async def test_aclose_from_inside_a_run_is_refused_instead_of_waiting_forever(
    tmp_path: Path,
) -> None:
    """A tool calling aclose() on its own agent gets a UsageError; the run still saves its turn."""
    holder: list[Any] = []

    @tool
    async def shut_down() -> str:
        """Close the agent."""
        await holder[0].aclose()
        return "closed"

    agent = create_agent(
        provider=ScriptedProvider([plan_json(call(1, "shut_down")), "tried"]),
        tools=[shut_down],
        storage=f"sqlite:///{tmp_path / 'agent.db'}",
    )
    holder.append(agent)
    result = await asyncio.wait_for(agent.process(AgentProps("q", "t")), 5)
    assert result.metadata.status == "partial", result.metadata.error
    executions = await agent.observations.get_observations(
        "t", types=[ObservationType.TOOL_EXECUTION]
    )
    assert "inside a run" in executions[0].content["error"]
    assert len(await agent.conversation.get_messages("t")) == 2
    await agent.aclose()


@pytest.mark.parametrize("bad", [-1, "5", True])
async def test_aclose_rejects_a_bad_timeout(bad: Any) -> None:
    """aclose(timeout=...) takes a number of seconds >= 0 and says so otherwise."""
    agent = create_agent(provider=ScriptedProvider([]))
    with pytest.raises(UsageError, match="timeout"):
        await agent.aclose(timeout=bad)
    await agent.aclose()
