"""The default plan reviser: its prompt, and how it reads the model's answer."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from pes_agent.errors import PlanParseError
from pes_agent.execution.revision import PlanProgress
from pes_agent.planning.plan import ParsedToolCall
from pes_agent.planning.reviser import LLMPlanReviser, build_reevaluation_messages, read_revision
from pes_agent.protocols import LLMResponse
from pes_agent.providers.base import LLMPhase, PromptMessage, ToolChoice
from pes_agent.tools.base import ToolResult, ToolSchema


def _call(call_id: str, tool_name: str = "search", **arguments: Any) -> ParsedToolCall:
    return ParsedToolCall(call_id=call_id, tool_name=tool_name, arguments=arguments)


PROGRESS = PlanProgress(
    calls=(
        _call("call_1", q="tides"),
        _call("call_2", "fetch", url="{step_1_result.url}"),
        ParsedToolCall(call_id="call_3", instruction="Summarise {step_2_result}."),
        _call("call_4", q="moon"),
        _call("call_5", "slow"),
    ),
    results={
        1: ToolResult(call_id="call_1", tool_name="search", status="success", output="x" * 5000),
        2: ToolResult(call_id="call_2", tool_name="fetch", status="error", error="HTTP 503"),
    },
    running=(5,),
    pending=(3,),
    replaced=(4,),
    wave=(2,),
    revisions=1,
    max_revisions=2,
    max_tool_calls=32,
)


def _prompt(**options: Any) -> str:
    messages = build_reevaluation_messages(
        PROGRESS,
        system_prompt="Be careful.",
        query="When is high tide? {step_1_result}",
        intent="find the tide",
        plan="1. search\n2. fetch",
        tools=[ToolSchema(name="search", description="Search.", input_schema={})],
        **options,
    )
    assert [m.role for m in messages] == ["system", "user"]
    assert messages[0].content.startswith("Be careful.\n\n# Re-evaluating the plan")
    assert "# Tools\nsearch() — Search." in messages[0].content
    return messages[1].content


def test_prompt_shows_goal_plan_each_step_and_the_calls_not_yet_run() -> None:
    """The user message has the goal, plan, every step with its status, and what is pending."""
    text = _prompt()
    # The query is model-facing text inserted as it is: braces in it stay literal.
    assert "# Goal\nWhen is high tide? {step_1_result}\nIntent: find the tide" in text
    assert "# Plan\n1. search\n2. fetch" in text
    assert 'Step 1 ("call_1") search {"q": "tides"} — success:' in text
    assert 'Step 2 ("call_2") fetch {"url": "{step_1_result.url}"} — error: HTTP 503' in text
    assert 'Step 4 ("call_4") search {"q": "moon"} — replaced by an earlier revision' in text
    assert 'Step 5 ("call_5") slow {} — still running; its result will be step_5_result' in text
    pending = text.split("# Not run yet (your answer replaces these)\n")[1]
    assert pending.startswith('Step 3 ("call_3") language step: "Summarise {step_2_result}."')
    assert "Your first call is step 6. Revisions left after this one: 0." in text


def test_prompt_bounds_each_result() -> None:
    """A long result is cut to `result_chars` characters in the prompt."""
    text = _prompt(result_chars=100)
    assert "x" * 100 + "… [truncated 4900 more characters]" in text
    assert "x" * 101 not in text


def test_keep_answers_keep_the_plan() -> None:
    """`{"keep": true}`, a bare KEEP and keep with empty toolCalls all keep the plan."""
    assert read_revision('{"keep": true}') is None
    assert read_revision('```json\n{ "Keep" : true }\n```') is None
    assert read_revision("KEEP") is None
    assert read_revision('{"keep": true, "toolCalls": []}') is None
    assert read_revision('<think>{"toolCalls": [1]}</think>{"keep": true}') is None


def test_tool_calls_answer_is_read_with_the_planning_parser() -> None:
    """New calls are read in the planning protocol, language steps included."""
    calls = read_revision(
        json.dumps(
            {
                "toolCalls": [
                    {"callId": "call_6", "toolName": "search", "arguments": {"keep": True}},
                    {"callId": "call_7", "instruction": "Compare {step_6_result}."},
                ]
            }
        )
    )
    assert calls is not None
    assert [(c.call_id, c.kind) for c in calls] == [("call_6", "tool"), ("call_7", "language")]
    assert calls[0].arguments == {"keep": True}  # a "keep" inside a call does not keep the plan


def test_empty_tool_calls_drop_the_remaining_calls() -> None:
    """`{"toolCalls": []}` is a revision that replaces the remaining calls with none."""
    assert read_revision('{"toolCalls": []}') == []


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("I think the plan is fine.", 'neither "toolCalls" nor "keep"'),
        ('{"toolCalls": [{"callId": "c"}]}', "has no tool name"),
        ('{"toolCalls": [{"toolName": "a", "arguments": ', "not valid JSON"),
    ],
)
def test_unusable_answers_raise_plan_parse_error(text: str, problem: str) -> None:
    """An answer that cannot be used raises PlanParseError carrying the problems and the text."""
    with pytest.raises(PlanParseError) as raised:
        read_revision(text)
    assert any(problem in error for error in raised.value.errors)
    assert raised.value.raw_output == text


async def test_llm_reviser_makes_one_reevaluation_call() -> None:
    """`LLMPlanReviser.revise` calls the model once, in phase "reevaluation", and reads it."""
    phases: list[LLMPhase] = []

    async def llm(
        messages: Sequence[PromptMessage],
        *,
        phase: LLMPhase,
        tools: Sequence[ToolSchema] = (),
        tool_choice: ToolChoice | None = None,
        response_format: dict[str, Any] | None = None,
    ) -> LLMResponse:
        phases.append(phase)
        return LLMResponse(text='{"toolCalls": [{"toolName": "search", "arguments": {}}]}')

    reviser = LLMPlanReviser(llm=llm, query="q")
    calls = await reviser.revise(PROGRESS)
    assert phases == ["reevaluation"]
    assert calls == [ParsedToolCall(call_id="call_1", tool_name="search")]
