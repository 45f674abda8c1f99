"""`agent.override(...)`: context-local swaps of provider, tools and storage."""

from __future__ import annotations

import asyncio

import pytest

from pes_agent import AgentProps, ObservationType, UsageError, create_agent, tool
from pes_agent.storage.memory import InMemoryStorage
from pes_agent.testing import ScriptedProvider, plan_json


def answering(text: str) -> ScriptedProvider:
    return ScriptedProvider([plan_json(intent="answer"), text], repeat=True)


async def test_override_is_seen_only_by_runs_started_inside_the_block() -> None:
    """Two concurrent runs: the one in the block gets the override, the other the original."""
    agent = create_agent(provider=answering("original"))

    async def inside() -> str:
        with agent.override(provider=answering("inside")):
            result = await agent.process(AgentProps("q", "t-in"))
        return result.response.content

    async def outside() -> str:
        result = await agent.process(AgentProps("q", "t-out"))
        return result.response.content

    assert await asyncio.gather(inside(), outside()) == ["inside", "original"]
    await agent.aclose()


async def test_nested_overrides_restore_in_order() -> None:
    """Leaving the inner block brings back the outer override, then the original."""
    agent = create_agent(provider=answering("original"))
    seen = []
    with agent.override(provider=answering("outer")):
        with agent.override(provider=answering("inner")):
            seen.append((await agent.process(AgentProps("q", "t1"))).response.content)
        seen.append((await agent.process(AgentProps("q", "t1"))).response.content)
    seen.append((await agent.process(AgentProps("q", "t1"))).response.content)
    assert seen == ["inner", "outer", "original"]
    await agent.aclose()


async def test_exception_inside_the_block_restores_the_original() -> None:
    """An error leaving the block still restores the agent's own provider."""
    agent = create_agent(provider=answering("original"))
    with pytest.raises(RuntimeError), agent.override(provider=answering("inside")):
        raise RuntimeError("boom")
    assert (await agent.process(AgentProps("q", "t1"))).response.content == "original"
    await agent.aclose()


@tool
async def only_in_the_override(key: str) -> str:
    """A tool the agent itself does not have."""
    return f"found {key}"


async def test_tools_override_gives_the_runs_in_the_block_their_tools() -> None:
    """A plan calling a tool only the override has runs it in the block, and the same plan
    outside the block is refused (the agent has no such tool)."""
    call = {"callId": "call_1", "toolName": "only_in_the_override", "arguments": {"key": "k"}}
    model = ScriptedProvider([plan_json(call, intent="look"), "done"], repeat=True)
    agent = create_agent(provider=model)
    with agent.override(tools=[only_in_the_override]):
        inside = await agent.process(AgentProps("q", "t1"))
        assert list(agent.tools.names) == ["only_in_the_override"]
    outside = await agent.process(AgentProps("q", "t2"))
    assert list(agent.tools.names) == []
    executed = [
        o.content
        for o in await agent.observations.get_observations(
            "t1", types=[ObservationType.TOOL_EXECUTION]
        )
    ]
    assert inside.metadata.tool_calls == 1
    assert [e["status"] for e in executed] == ["success"], executed
    assert outside.metadata.tool_calls == 0 or outside.metadata.status != "success"
    await agent.aclose()


async def test_storage_override_keeps_the_blocks_turns_and_leaves_the_original_alone() -> None:
    """The turn of a run in the block is saved in the override's store; the agent's own store
    has none of it, and after the block the agent's store is used again."""
    original = InMemoryStorage()
    other = InMemoryStorage()
    agent = create_agent(provider=answering("saved"), storage=original)
    with agent.override(storage=other):
        await agent.process(AgentProps("q", "t1"))
        assert [m.content for m in await agent.conversation.get_messages("t1")] == ["q", "saved"]
    assert await original.get_messages("t1") == []
    assert [m.content for m in await other.get_messages("t1")] == ["q", "saved"]
    assert await other.get_observations("t1")  # its observations went there too
    assert await original.get_observations("t1") == []
    await agent.process(AgentProps("again", "t2"))
    assert [m.content for m in await original.get_messages("t2")] == ["again", "saved"]
    await agent.aclose()


async def test_bad_arguments_raise_at_once_with_the_fix() -> None:
    agent = create_agent(provider=answering("x"))
    with pytest.raises(UsageError, match="needs something to swap"):
        agent.override()
    with pytest.raises(UsageError):
        agent.override(tools="search")  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        agent.override(storage=42)  # type: ignore[arg-type]
    # It builds a store to close: `async with` only.
    with pytest.raises(UsageError, match="async with"), agent.override(storage="memory"):
        pass
    async with agent.override(storage="memory"):
        assert (await agent.process(AgentProps("q", "t1"))).response.content == "x"
    await agent.aclose()
