"""`planning_mode`: what the default planner sends and reads in each mode, and the auto fallback.

A `Structured` provider is a `ScriptedProvider` that declares a `structured_output`, so the
planner's side is tested here without a server; the wire forms are in
`tests/pes_agent/providers/test_structured_planning.py`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pydantic
import pytest

from pes_agent import (
    AgentProps,
    LLMParams,
    LLMPlanner,
    ObservationType,
    ProviderConfig,
    RunOptions,
    UsageError,
    create_agent,
    tool,
)
from pes_agent.errors import ProviderError
from pes_agent.planning.structured import SUBMIT_PLAN, plan_schema
from pes_agent.providers.base import LLMRequest, ProviderEvent, StructuredOutput
from pes_agent.testing import ScriptedProvider, ScriptedResponse
from pes_agent.tools.calls import ToolCall

ran: list[str] = []


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    ran.append(city)
    return f"sunny in {city}"


PLAN: dict[str, Any] = {
    "title": "Weather",
    "intent": "the weather in Paris",
    "plan": "1. look it up",
    "toolCalls": [{"callId": "call_1", "toolName": "get_weather", "arguments": {"city": "Paris"}}],
}
STRICT_PLAN: dict[str, Any] = {
    **PLAN,
    "toolCalls": [
        {
            "callId": "call_1",
            "toolName": "get_weather",
            "instruction": None,
            "arguments": '{"city": "Paris"}',
            "dependsOn": [],
        }
    ],
}
# Refers to a later step: schema-valid, but unusable.
FORWARD_PLAN: dict[str, Any] = {
    **PLAN,
    "toolCalls": [
        {"callId": "call_1", "toolName": "get_weather", "arguments": {"city": "{step_2_result}"}},
        {"callId": "call_2", "toolName": "get_weather", "arguments": {"city": "Lima"}},
    ],
}


class Structured:
    """A scripted provider that declares a `structured_output` (and optionally a config)."""

    def __init__(
        self,
        responses: Sequence[Any],
        structured_output: StructuredOutput,
        *,
        options: dict[str, Any] | None = None,
    ) -> None:
        self.scripted = ScriptedProvider(responses)
        self.structured_output = structured_output
        self.config = ProviderConfig("scripted", "scripted-model", options=options or {})

    @property
    def name(self) -> str:
        return "scripted"

    @property
    def model(self) -> str:
        return "scripted-model"

    @property
    def requests(self) -> list[LLMRequest]:
        return self.scripted.requests

    def stream(self, request: LLMRequest) -> AsyncIterator[ProviderEvent]:
        return self.scripted.stream(request)

    async def aclose(self) -> None:
        await self.scripted.aclose()


def submit(plan: dict[str, Any], *, text: str = "", call_id: str = "toolu_1") -> ScriptedResponse:
    """A turn that calls submit_plan with `plan` as its input."""
    return ScriptedResponse(text, tool_calls=[ToolCall(call_id, SUBMIT_PLAN, plan)])


def refuse(status: int, message: str) -> Any:
    """A scripted step that fails the call as a server refusing it would."""

    def step(request: LLMRequest) -> str:
        raise ProviderError(message, provider="scripted", status_code=status)

    return step


async def run(provider: Any, query: str = "Weather in Paris?", **options: Any) -> Any:
    async with create_agent(provider=provider, tools=[get_weather]) as agent:
        props = AgentProps(query, "t", options=RunOptions(**options) if options else None)
        return await agent.process(props)


@pytest.fixture(autouse=True)
def _clear_ran() -> None:
    ran.clear()


# choosing the mode ---------------------------------------------------------------------------


def test_an_unknown_planning_mode_is_a_usage_error() -> None:
    """create_agent names the valid modes when given another."""
    with pytest.raises(UsageError, match="'auto', 'structured', 'text'"):
        create_agent(provider=ScriptedProvider([]), planning_mode="json")  # type: ignore[arg-type]


def test_planning_mode_with_a_custom_planner_is_a_usage_error() -> None:
    """planning_mode configures the default planner only, and the error says how to combine."""
    with pytest.raises(UsageError, match=r"LLMPlanner\(planning_mode='text'\)"):
        create_agent(provider=ScriptedProvider([]), planner=LLMPlanner(), planning_mode="text")


def test_structured_on_a_provider_without_structured_output_is_a_usage_error() -> None:
    """'structured' on a scripted provider fails at create_agent, pointing at 'auto'."""
    with pytest.raises(UsageError, match="planning_mode='auto'"):
        create_agent(provider=ScriptedProvider([]), planning_mode="structured")


def test_run_options_accept_only_the_planning_modes() -> None:
    """RunOptions validates planning_mode like the other per-call options."""
    with pytest.raises(pydantic.ValidationError):
        RunOptions(planning_mode="json")  # type: ignore[arg-type]


async def test_auto_on_a_provider_without_structured_output_asks_in_text() -> None:
    """A scripted provider in auto mode gets today's text request: no schema, no tools."""
    model = ScriptedProvider([json.dumps(PLAN), "Sunny."])
    result = await run(model)
    assert result.metadata.status == "success", result.metadata.error
    planning = model.requests[0]
    assert (planning.response_format, planning.tools, planning.tool_choice) == (None, (), None)
    assert "Structured reply" not in planning.messages[0].content
    assert ran == ["Paris"]


async def test_structured_per_call_on_a_text_only_provider_ends_the_run_in_error() -> None:
    """RunOptions(planning_mode='structured') on a provider without it is a failed run."""
    model = ScriptedProvider([])
    result = await run(model, planning_mode="structured")
    assert result.metadata.status == "error"
    assert "planning_mode='structured' needs a provider" in (result.metadata.error or "")
    assert model.calls == 0


async def test_text_per_call_sends_no_schema_to_a_structured_provider() -> None:
    """RunOptions(planning_mode='text') overrides the agent's mode for that call."""
    model = Structured([json.dumps(PLAN), "Sunny."], "response_format")
    result = await run(model, planning_mode="text")
    assert result.metadata.status == "success", result.metadata.error
    assert model.requests[0].response_format is None
    assert model.requests[0].tools == ()


# response_format -----------------------------------------------------------------------------


async def test_response_format_sends_the_strict_plan_schema_and_executes_the_reply() -> None:
    """The planning call carries the strict schema for the offered tools; the JSON reply runs."""
    model = Structured([json.dumps(STRICT_PLAN), "Sunny."], "response_format")
    result = await run(model)
    assert result.metadata.status == "success", result.metadata.error
    planning, synthesis = model.requests
    assert planning.response_format == plan_schema(["get_weather"], strict=True)
    assert planning.tools == ()
    assert "its arguments as one JSON object in a string" in planning.messages[0].content
    assert synthesis.response_format is None
    assert ran == ["Paris"]


async def test_response_format_repair_resends_the_schema_with_the_problems() -> None:
    """An unusable schema-valid plan is repaired once, in the same structured channel."""
    model = Structured(
        [json.dumps(FORWARD_PLAN), json.dumps(STRICT_PLAN), "Sunny."], "response_format"
    )
    result = await run(model)
    assert result.metadata.status == "success", result.metadata.error
    repair = model.requests[1]
    assert repair.phase == "repair"
    assert repair.response_format == plan_schema(["get_weather"], strict=True)
    assert repair.messages[-2].content == json.dumps(FORWARD_PLAN)
    assert "step_2_result" in repair.messages[-1].content
    assert ran == ["Paris"]


# forced tool ---------------------------------------------------------------------------------


async def test_forced_tool_offers_only_submit_plan_and_forces_it() -> None:
    """The planning call offers submit_plan (input: the plan schema) and forces that tool."""
    model = Structured([submit(PLAN), "Sunny."], "forced_tool")
    result = await run(model)
    assert result.metadata.status == "success", result.metadata.error
    planning = model.requests[0]
    assert [schema.name for schema in planning.tools] == [SUBMIT_PLAN]
    assert planning.tools[0].input_schema == plan_schema(["get_weather"])
    assert planning.tool_choice == SUBMIT_PLAN
    assert planning.response_format is None
    assert "submit_plan tool" in planning.messages[0].content
    assert ran == ["Paris"]


async def test_the_plan_observation_shows_the_submit_plan_call_as_raw_output() -> None:
    """A plan that came only as a tool call is still shown as what the model sent."""
    model = Structured([submit(PLAN), "Sunny."], "forced_tool")
    async with create_agent(provider=model, tools=[get_weather]) as agent:
        seen: list[Any] = []
        agent.observations.subscribe(seen.append, types=[ObservationType.PLAN])
        result = await agent.process(AgentProps("Weather in Paris?", "t"))
    assert result.metadata.status == "success", result.metadata.error
    (ready,) = [o for o in seen if o.content.get("status") == "ready"]
    (sent,) = json.loads(ready.content["raw"])
    assert (sent["name"], sent["arguments"]) == (SUBMIT_PLAN, PLAN)


async def test_the_plan_is_read_from_the_submit_plan_call_not_the_text() -> None:
    """Text beside the submit_plan call (here a different plan) is not what runs."""
    decoy = {**PLAN, "toolCalls": [{"toolName": "get_weather", "arguments": {"city": "Oslo"}}]}
    model = Structured([submit(PLAN, text=json.dumps(decoy)), "Sunny."], "forced_tool")
    result = await run(model)
    assert result.metadata.status == "success", result.metadata.error
    assert ran == ["Paris"]


async def test_forced_tool_repair_answers_the_submit_plan_call_with_the_problems() -> None:
    """The repair sends the problems as the submit_plan call's tool result and forces it again."""
    model = Structured(
        [submit(FORWARD_PLAN, call_id="toolu_9"), submit(PLAN, call_id="toolu_10"), "Sunny."],
        "forced_tool",
    )
    result = await run(model)
    assert result.metadata.status == "success", result.metadata.error
    repair = model.requests[1]
    assert repair.phase == "repair"
    assert repair.tool_choice == SUBMIT_PLAN
    assistant, answer = repair.messages[-2:]
    assert assistant.role == "assistant"
    assert [call.id for call in assistant.tool_calls] == ["toolu_9"]
    assert assistant.tool_calls[0].arguments == FORWARD_PLAN
    assert (answer.role, answer.tool_call_id) == ("tool", "toolu_9")
    assert "step_2_result" in answer.content
    assert "Call submit_plan again" in answer.content
    assert ran == ["Paris"]


async def test_with_extended_thinking_submit_plan_is_offered_not_forced() -> None:
    """Anthropic refuses a forced tool with thinking: submit_plan goes out with tool_choice auto."""
    thinking = {"thinking": {"type": "enabled", "budget_tokens": 1024}}
    model = Structured([submit(PLAN), "Sunny."], "forced_tool", options=thinking)
    result = await run(model)
    assert result.metadata.status == "success", result.metadata.error
    assert model.requests[0].tool_choice == "auto"
    assert [schema.name for schema in model.requests[0].tools] == [SUBMIT_PLAN]


async def test_thinking_in_the_call_parameters_also_unforces_the_tool() -> None:
    """Thinking switched on per call (llm_params.extra) is seen as well."""
    model = Structured([submit(PLAN), "Sunny."], "forced_tool")
    extra = {"thinking": {"type": "enabled", "budget_tokens": 1024}}
    result = await run(model, llm_params=LLMParams(extra=extra))
    assert result.metadata.status == "success", result.metadata.error
    assert model.requests[0].tool_choice == "auto"


async def test_a_plan_written_as_text_when_the_tool_was_not_forced_is_read_as_text() -> None:
    """With the tool only offered, a model that answers in text still gets its plan run."""
    thinking = {"thinking": {"type": "enabled", "budget_tokens": 1024}}
    model = Structured(
        ["Here it is: " + json.dumps(PLAN), "Sunny."], "forced_tool", options=thinking
    )
    result = await run(model)
    assert result.metadata.status == "success", result.metadata.error
    assert ran == ["Paris"]


# auto fallback -------------------------------------------------------------------------------


async def test_auto_falls_back_to_text_once_the_server_refuses_and_remembers_it() -> None:
    """A 400 naming response_format: the same run asks again in text, and later runs start there."""
    model = Structured(
        [
            refuse(400, "HTTP 400: Unrecognized request argument supplied: response_format"),
            json.dumps(PLAN),
            "Sunny.",
            json.dumps(PLAN),
            "Sunny again.",
        ],
        "response_format",
    )
    async with create_agent(provider=model, tools=[get_weather]) as agent:
        seen: list[Any] = []
        agent.observations.subscribe(seen.append, types=[ObservationType.PLAN])
        first = await agent.process(AgentProps("Weather in Paris?", "t1"))
        second = await agent.process(AgentProps("And now?", "t2"))

    assert first.metadata.status == "success", first.metadata.error
    assert second.metadata.status == "success", second.metadata.error
    refused, retried, _, later, _ = model.requests
    assert refused.response_format is not None
    assert retried.phase == "planning"
    assert retried.response_format is None
    assert "Structured reply" not in retried.messages[0].content
    assert later.response_format is None, "the refusal is remembered for later runs"
    fallbacks = [o for o in seen if o.content.get("status") == "structured_fallback"]
    assert len(fallbacks) == 1
    assert fallbacks[0].thread_id == "t1"
    assert "response_format" in fallbacks[0].content["reason"]
    assert ran == ["Paris", "Paris"]


async def test_auto_does_not_fall_back_on_a_failure_that_is_not_a_refusal() -> None:
    """A 400 about something else fails the run and is not remembered as a refusal."""
    model = Structured(
        [
            refuse(400, "HTTP 400: maximum context length exceeded"),
            json.dumps(STRICT_PLAN),
            "Sunny.",
        ],
        "response_format",
    )
    async with create_agent(provider=model, tools=[get_weather]) as agent:
        failed = await agent.process(AgentProps("Weather in Paris?", "t1"))
        later = await agent.process(AgentProps("Weather in Paris?", "t2"))
    assert failed.metadata.status == "error"
    assert "context length" in (failed.metadata.error or "")
    assert later.metadata.status == "success", later.metadata.error
    assert model.requests[1].response_format is not None


async def test_structured_mode_never_falls_back() -> None:
    """planning_mode='structured' reports the refusal as a failed run instead of using text."""
    model = Structured(
        [refuse(400, "HTTP 400: 'response_format' is not supported by this model")],
        "response_format",
    )
    async with create_agent(
        provider=model, tools=[get_weather], planning_mode="structured"
    ) as agent:
        result = await agent.process(AgentProps("Weather in Paris?", "t"))
    assert result.metadata.status == "error"
    assert "response_format" in (result.metadata.error or "")
    assert model.scripted.calls == 1
