"""A ReAct entity on the real OpenAI and Anthropic SDKs, against the loopback model server."""

from __future__ import annotations

from typing import Any

import pytest

from ecs_core import Runner, World
from pes_agent import ProviderConfig
from pes_agent.ecs.components import (
    ConversationComponent,
    LLMComponent,
    SystemPromptComponent,
    ToolRegistryComponent,
)
from pes_agent.ecs.messages import ChatMessage
from pes_agent.ecs.reasoning import ReasoningSystem
from pes_agent.ecs.services import close_services, services_of
from pes_agent.ecs.tool_execution import ToolExecutionSystem
from tests.pes_agent.providers.model_server import Call, ModelServer, Reply, model_server

from .conftest import Calls

__all__ = ["model_server"]  # the fixture, imported for the tests below


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_two_round_react_run_sends_the_result_as_a_real_tool_message(
    model_server: ModelServer, add_tool: Any, calls: Calls, api: str
) -> None:
    """Round 1 streams a native call, the tool runs, round 2 carries its result as the API's
    own tool message; the system prompt goes as a system prompt, never stored."""
    model_server.script(
        Reply("Adding.", tool_calls=(Call("add", {"a": 2, "b": 40}, fragments=4),)),
        Reply("2 + 40 = 42."),
    )
    config = ProviderConfig(
        api, "test-model", api_key="sk-test", base_url=model_server.base_url_for(api)
    )
    world = World()
    world.register_system(ReasoningSystem(), priority=0)
    world.register_system(ToolExecutionSystem(), priority=5)
    entity = world.create_entity(
        LLMComponent(config),
        SystemPromptComponent("You add."),
        ConversationComponent([ChatMessage("user", "2 + 40?")]),
        ToolRegistryComponent([add_tool]),
    )
    try:
        result = await Runner().run(world, until=entity, max_ticks=5)
        assert services_of(world).providers.get(config) is services_of(world).providers.get(config)
    finally:
        await close_services(world)

    assert result.terminals[entity].reason == "reasoning_complete"
    assert calls.log == [("add", {"a": 2, "b": 40})]
    history = world.require_component(entity, ConversationComponent).messages
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
    assert history[-1].content == "2 + 40 = 42."
    call_id = "call_1" if api == "openai" else "toolu_1"
    assert history[2].tool_call_id == call_id

    first, second = (r.body for r in model_server.requests)
    if api == "openai":
        assert first["messages"][0] == {"role": "system", "content": "You add."}
        assert [t["function"]["name"] for t in first["tools"]] == ["add"]
        assert second["messages"][-1] == {"role": "tool", "tool_call_id": call_id, "content": "42"}
        assert second["messages"][-2]["tool_calls"][0]["id"] == call_id
    else:
        assert first["system"] in ("You add.", [{"type": "text", "text": "You add."}])
        assert [t["name"] for t in first["tools"]] == ["add"]
        assert second["messages"][-1] == {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call_id, "content": "42"}],
        }
        assert second["messages"][-2]["content"][-1]["type"] == "tool_use"
