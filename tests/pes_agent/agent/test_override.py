"""`agent.override(...)`: context-local swaps of provider, tools and storage."""

from __future__ import annotations

import asyncio

import pytest

from pes_agent import AgentProps, create_agent
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
