"""Structured planning on the wire: the real `openai` and `anthropic` SDKs on the loopback server.

OpenAI gets the plan's schema as a strict `json_schema` response format; Anthropic a forced
`submit_plan` tool whose call carries the plan; `auto` falls back to text when the server
answers 400 to the option, and remembers it; `text` sends neither.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from pes_agent import (
    AgentCore,
    AgentProps,
    PlanningMode,
    ProviderConfig,
    RetryPolicy,
    create_agent,
    tool,
)
from pes_agent.planning.structured import SUBMIT_PLAN, plan_schema

from .helpers import API_KEY
from .model_server import Call, Fault, ModelServer, RecordedRequest, Reply

PROVIDERS = ["openai", "anthropic"]

ran: list[str] = []


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    ran.append(city)
    return f"sunny in {city}"


# The plan as the submit_plan input (a free-form schema: args an object).
PLAN: dict[str, Any] = {
    "calls": [{"tool": "get_weather", "args": {"city": "Paris"}}],
    "intent": "the weather in Paris",
}
# What a strict json_schema server returns for PLAN: every field, args as a JSON string.
STRICT_PLAN: dict[str, Any] = {
    "calls": [{"tool": "get_weather", "args": '{"city": "Paris"}', "after": []}],
    "intent": "the weather in Paris",
}
# Schema-valid but unusable: the first call refers to a later step.
FORWARD_PLAN: dict[str, Any] = {
    **PLAN,
    "toolCalls": [
        {"callId": "call_1", "toolName": "get_weather", "arguments": {"city": "{step_2_result}"}},
        {"callId": "call_2", "toolName": "get_weather", "arguments": {"city": "Lima"}},
    ],
}
# What a server that does not take the option answers, per API.
REFUSALS = {
    "openai": "Unrecognized request argument supplied: response_format",
    "anthropic": "tool_choice: forcing a tool is not supported by this model",
}


@pytest.fixture(autouse=True)
def _clear_ran() -> None:
    ran.clear()


def agent_on(
    server: ModelServer, name: str, *, planning_mode: PlanningMode = "auto", **options: Any
) -> AgentCore:
    """An agent on the loopback server with `get_weather`, retrying without waits."""
    config = ProviderConfig(
        name, "test-model", api_key=API_KEY, base_url=server.base_url_for(name), options=options
    )
    return create_agent(
        provider=config,
        tools=[get_weather],
        planning_mode=planning_mode,
        retry_policy=RetryPolicy(initial_backoff_s=0, jitter_s=0),
    )


def structured_fields(request: RecordedRequest) -> dict[str, Any]:
    """The structured-output fields a request carried (absent ones left out)."""
    fields = ("response_format", "tools", "tool_choice", "output_config")
    return {key: request.body[key] for key in fields if key in request.body}


def last_message(request: RecordedRequest) -> dict[str, Any]:
    message: dict[str, Any] = request.body["messages"][-1]
    return message


async def test_openai_structured_planning_sends_a_strict_json_schema_and_runs_the_reply(
    model_server: ModelServer,
) -> None:
    """The planning request's response_format is the strict plan schema; the JSON reply runs."""
    model_server.script(Reply(json.dumps(STRICT_PLAN)), Reply("Sunny in Paris."))
    async with agent_on(model_server, "openai") as agent:
        result = await agent.process(AgentProps("Weather in Paris?", "t"))

    assert result.metadata.status == "success", result.metadata.error
    planning, synthesis = model_server.requests
    assert structured_fields(planning) == {
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": "plan",
                "schema": plan_schema(["get_weather"], strict=True),
                "strict": True,
            },
        }
    }
    arguments = planning.body["response_format"]["json_schema"]["schema"]["properties"]["calls"][
        "items"
    ]["properties"]["args"]
    assert arguments["type"] == "string"
    assert structured_fields(synthesis) == {}
    assert ran == ["Paris"]
    assert result.response.content == "Sunny in Paris."


async def test_anthropic_structured_planning_forces_submit_plan_and_runs_its_input(
    model_server: ModelServer,
) -> None:
    """tools=[submit_plan], tool_choice names it, and the plan comes from the tool call's input."""
    model_server.script(
        Reply(tool_calls=(Call(SUBMIT_PLAN, PLAN, fragments=5),)), Reply("Sunny in Paris.")
    )
    async with agent_on(model_server, "anthropic") as agent:
        result = await agent.process(AgentProps("Weather in Paris?", "t"))

    assert result.metadata.status == "success", result.metadata.error
    planning, synthesis = model_server.requests
    fields = structured_fields(planning)
    assert fields["tool_choice"] == {"type": "tool", "name": SUBMIT_PLAN}
    (offered,) = fields["tools"]
    assert offered["name"] == SUBMIT_PLAN
    assert offered["input_schema"] == plan_schema(["get_weather"])
    assert "output_config" not in fields
    assert structured_fields(synthesis) == {}
    assert ran == ["Paris"]


async def test_anthropic_with_extended_thinking_offers_submit_plan_without_forcing_it(
    model_server: ModelServer,
) -> None:
    """The API refuses a forced tool with thinking on, so tool_choice is auto then."""
    thinking = {"type": "enabled", "budget_tokens": 1024}
    model_server.script(
        Reply(thinking="Paris, then.", tool_calls=(Call(SUBMIT_PLAN, PLAN),)), Reply("Sunny.")
    )
    async with agent_on(model_server, "anthropic", thinking=thinking) as agent:
        result = await agent.process(AgentProps("Weather in Paris?", "t"))

    assert result.metadata.status == "success", result.metadata.error
    planning = model_server.requests[0]
    assert planning.body["thinking"] == thinking
    assert planning.body["tool_choice"] == {"type": "auto"}
    assert [tool["name"] for tool in planning.body["tools"]] == [SUBMIT_PLAN]
    assert ran == ["Paris"]


async def test_anthropic_repair_answers_the_submit_plan_call_with_a_tool_result(
    model_server: ModelServer,
) -> None:
    """An unusable submitted plan goes back as the tool_result of that call, the tool forced."""
    model_server.script(
        Reply(tool_calls=(Call(SUBMIT_PLAN, FORWARD_PLAN, id="toolu_first"),)),
        Reply(tool_calls=(Call(SUBMIT_PLAN, PLAN, id="toolu_second"),)),
        Reply("Sunny."),
    )
    async with agent_on(model_server, "anthropic") as agent:
        result = await agent.process(AgentProps("Weather in Paris?", "t"))

    assert result.metadata.status == "success", result.metadata.error
    repair = model_server.requests[1]
    assert repair.body["tool_choice"] == {"type": "tool", "name": SUBMIT_PLAN}
    assistant = repair.body["messages"][-2]
    assert assistant["role"] == "assistant"
    assert assistant["content"] == [
        {"type": "tool_use", "id": "toolu_first", "name": SUBMIT_PLAN, "input": FORWARD_PLAN}
    ]
    answer = last_message(repair)
    assert answer["role"] == "user"
    (block,) = answer["content"]
    assert (block["type"], block["tool_use_id"]) == ("tool_result", "toolu_first")
    assert "step_2_result" in block["content"]
    assert ran == ["Paris"]


async def test_a_submit_plan_input_that_is_not_json_is_repaired(
    model_server: ModelServer,
) -> None:
    """Garbled tool input is no crash: the parser's complaint goes back and the fix runs."""
    model_server.script(
        Reply(tool_calls=(Call(SUBMIT_PLAN, '{"intent": "weather", "toolCalls": [{"callId":'),)),
        Reply(tool_calls=(Call(SUBMIT_PLAN, PLAN),)),
        Reply("Sunny."),
    )
    async with agent_on(model_server, "anthropic") as agent:
        result = await agent.process(AgentProps("Weather in Paris?", "t"))

    assert result.metadata.status == "success", result.metadata.error
    (block,) = last_message(model_server.requests[1])["content"]
    assert block["type"] == "tool_result"
    assert "could not be used" in block["content"]
    assert ran == ["Paris"]


async def test_openai_repair_resends_the_schema_with_the_problems(
    model_server: ModelServer,
) -> None:
    """A schema-valid but unusable plan is repaired once, the schema sent again."""
    model_server.script(
        Reply(json.dumps(FORWARD_PLAN)), Reply(json.dumps(STRICT_PLAN)), Reply("Sunny.")
    )
    async with agent_on(model_server, "openai") as agent:
        result = await agent.process(AgentProps("Weather in Paris?", "t"))

    assert result.metadata.status == "success", result.metadata.error
    planning, repair, _ = model_server.requests
    assert repair.body["response_format"] == planning.body["response_format"]
    assert repair.body["messages"][-2] == {"role": "assistant", "content": json.dumps(FORWARD_PLAN)}
    assert "step_2_result" in last_message(repair)["content"]
    assert ran == ["Paris"]


@pytest.mark.parametrize("name", PROVIDERS)
async def test_auto_falls_back_to_text_when_the_server_refuses_and_remembers_it(
    model_server: ModelServer, name: str
) -> None:
    """A 400 naming the option: the run plans in text, and the next run sends no option at all."""
    model_server.script(
        Fault(400, REFUSALS[name]),
        Reply(json.dumps(PLAN)),
        Reply("Sunny."),
        Reply(json.dumps(PLAN)),
        Reply("Sunny again."),
    )
    async with agent_on(model_server, name) as agent:
        first = await agent.process(AgentProps("Weather in Paris?", "t1"))
        second = await agent.process(AgentProps("Weather in Paris again?", "t2"))

    assert first.metadata.status == "success", first.metadata.error
    assert second.metadata.status == "success", second.metadata.error
    refused, retried, _, later, _ = model_server.requests
    assert structured_fields(refused) != {}
    assert structured_fields(retried) == {}
    assert structured_fields(later) == {}, "the refusal is remembered"
    assert ran == ["Paris", "Paris"]
    assert first.metadata.llm_calls == 3


@pytest.mark.parametrize("name", PROVIDERS)
async def test_structured_mode_reports_a_refusal_instead_of_falling_back(
    model_server: ModelServer, name: str
) -> None:
    """planning_mode='structured' ends the run in error on a refusal; nothing is sent in text."""
    model_server.script(Fault(400, REFUSALS[name]))
    async with agent_on(model_server, name, planning_mode="structured") as agent:
        result = await agent.process(AgentProps("Weather in Paris?", "t"))

    assert result.metadata.status == "error"
    assert "400" in (result.metadata.error or "")
    assert len(model_server.requests) == 1
    assert ran == []


@pytest.mark.parametrize("name", PROVIDERS)
async def test_text_mode_sends_neither_schema_nor_tools(
    model_server: ModelServer, name: str
) -> None:
    """planning_mode='text' is today's protocol: no response_format, tools or tool_choice."""
    model_server.script(Reply("Sure. " + json.dumps(PLAN)), Reply("Sunny."))
    async with agent_on(model_server, name, planning_mode="text") as agent:
        result = await agent.process(AgentProps("Weather in Paris?", "t"))

    assert result.metadata.status == "success", result.metadata.error
    assert [structured_fields(request) for request in model_server.requests] == [{}, {}]
    assert ran == ["Paris"]


# Streaming dispatch through the real SDKs ----------------------------------------------------

TWO_CITIES: dict[str, Any] = {
    "calls": [
        {"tool": "get_weather", "args": {"city": "Paris"}},
        {"tool": "get_weather", "args": {"city": "Lima"}},
    ],
    "intent": "the weather in two cities",
}


@pytest.mark.parametrize("api", PROVIDERS)
async def test_a_structured_plan_starts_its_calls_while_it_streams(
    model_server: ModelServer, api: str
) -> None:
    """The plan streams slowly (OpenAI's response_format JSON as content, Anthropic's
    submit_plan input as input_json_delta pieces): the first call starts before the planning
    stream ends."""
    if api == "openai":
        strict = {
            "calls": [
                {"tool": c["tool"], "args": json.dumps(c["args"]), "after": []}
                for c in TWO_CITIES["calls"]
            ],
            "intent": TWO_CITIES["intent"],
        }
        planning = Reply(json.dumps(strict), chunk_chars=8, chunk_delay_s=0.01)
    else:
        call = Call(SUBMIT_PLAN, TWO_CITIES, fragments=24)
        planning = Reply(tool_calls=(call,), chunk_delay_s=0.01)
    model_server.script(planning, Reply("Sunny in both."))
    seen: list[tuple[str, object]] = []
    async with agent_on(model_server, api) as agent:
        agent.observations.subscribe(
            lambda o: seen.append((o.type.value, o.content.get("phase") or o.content.get("callId")))
        )
        result = await agent.process(AgentProps("Weather in Paris and Lima?", "t"))
    assert result.metadata.status == "success", result.metadata.error
    assert sorted(ran) == ["Lima", "Paris"]
    first_call = seen.index(("TOOL_CALL", "call_1"))
    stream_end = seen.index(("LLM_STREAM_END", "planning"))
    assert first_call < stream_end, seen
