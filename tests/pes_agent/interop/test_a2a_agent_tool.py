"""A2AAgent: a remote pes-agent service, reached over A2A, planned like any local tool."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from pes_agent import AgentProps, ToolExecutionError, create_agent, tool
from pes_agent.interop.a2a import A2AAgent
from pes_agent.providers.base import LLMRequest
from pes_agent.testing import ScriptedProvider, plan_call, plan_json
from pes_agent.tools.base import Tool, ToolContext
from tests.pes_agent.server.conftest import TOKENS, make_agent

from .a2a_support import serving

SECRET = "alice-token"


@tool
async def shout(text: str) -> str:
    """Say `text` loudly."""
    return text.upper() + "!"


def local_model(remote: str) -> ScriptedProvider:
    """Plans the remote call then `shout` on its answer, and answers with the last result."""

    def script(request: LLMRequest) -> str:
        if request.phase == "planning":
            return plan_json(
                plan_call(1, remote, message="what is it?"),
                plan_call(2, "shout", text="{step_1_result}"),
            )
        return "Done."

    return ScriptedProvider([script], repeat=True)


async def test_a_plan_feeds_the_remote_agents_answer_into_a_local_tool(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The remote service's answer is step 1's result, which `{step_1_result}` hands to the
    local `shout`; the token never shows in the logs or the observations."""
    caplog.set_level(logging.DEBUG)
    async with make_agent(tmp_path / "remote.db") as remote, serving(remote, tokens=TOKENS) as url:
        researcher = A2AAgent(url, headers={"Authorization": f"Bearer {SECRET}"}, name="remote")
        assert isinstance(researcher, Tool)
        card = await researcher.read_card()
        assert card.name == "pes-agent"
        assert researcher.schema.input_schema["required"] == ["message"]
        async with create_agent(provider=local_model("remote"), tools=[researcher, shout]) as agent:
            response = await agent.process(AgentProps("ask the other agent", "local"))
            observations = await agent.observations.get_observations("local")
    assert response.metadata.status == "success"
    outputs = [o.content.get("output") for o in observations if "output" in o.content]
    assert "The answer is 42." in outputs
    assert "THE ANSWER IS 42.!" in outputs
    assert SECRET not in caplog.text
    assert SECRET not in str([o.model_dump() for o in observations])
    assert SECRET not in repr(researcher)


async def test_remote_errors_are_error_results_naming_the_agent(tmp_path: Any) -> None:
    """A refused token, an unreachable agent and a timeout are ToolExecutionErrors naming
    the agent, never holding the token."""
    context = ToolContext(thread_id="t", trace_id="r", call_id="c")
    async with make_agent(tmp_path / "remote.db") as remote, serving(remote, tokens=TOKENS) as url:
        wrong = A2AAgent(url, headers={"Authorization": "Bearer wrong-secret"}, name="remote")
        with pytest.raises(ToolExecutionError, match=r"A2A agent 'remote'.*HTTP 401") as refused:
            await wrong.execute({"message": "hi"}, context)
        assert "wrong-secret" not in str(refused.value)
        slow = A2AAgent(url, headers={"Authorization": f"Bearer {SECRET}"}, timeout_s=0.2)
        with pytest.raises(ToolExecutionError, match=r"no answer within 0\.2 s"):
            await slow.execute({"message": "nap please"}, context)
    gone = A2AAgent(url, name="gone")
    with pytest.raises(ToolExecutionError, match=r"A2A agent 'gone'.*card could not be read"):
        await gone.execute({"message": "hi"}, context)
