"""Adaptive PES runs through `create_agent`: language steps and re-evaluation of the plan."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from pes_agent import AgentProps, ObservationType, RunOptions, UsageError, create_agent
from pes_agent.providers.base import LLMRequest
from pes_agent.testing import ScriptedProvider

from .conftest import Events, Recorder, call, plan_json


def by_phase(**answers: str | Callable[[LLMRequest], str]) -> Callable[[LLMRequest], str]:
    """A script entry that answers each phase with its own text (or function of the request)."""

    def answer(request: LLMRequest) -> str:
        reply = answers[request.phase]
        return reply if isinstance(reply, str) else reply(request)

    return answer


def step(n: int, instruction: str) -> dict[str, Any]:
    """Language step number `n` (its callId is call_n)."""
    return {"callId": f"call_{n}", "instruction": instruction}


def phases(model: ScriptedProvider) -> list[str]:
    return [request.phase for request in model.requests]


async def test_language_step_result_reaches_a_later_tool_as_text(
    tools: list[Any], events: Events, recorder: Recorder
) -> None:
    """A language step runs as one model call; a later tool receives its text; both observed."""
    model = ScriptedProvider(
        [
            by_phase(
                planning=plan_json(
                    call(1, "get_city", name="Oslo"),
                    step(2, "Name the biggest district of {step_1_result}."),
                    call(3, "slow_echo", text="{step_2_result}", delay=0),
                ),
                language_step="north",
                synthesis="North.",
            )
        ],
        repeat=True,
    )
    agent = create_agent(provider=model, tools=tools)
    agent.observations.subscribe(recorder)
    result = await agent.process(AgentProps("Biggest district of Oslo?", "t1"))

    assert result.metadata.status == "success"
    assert (result.metadata.llm_calls, result.metadata.tool_calls) == (3, 3)
    assert phases(model) == ["planning", "language_step", "synthesis"]
    instruction = model.requests[1].messages[-1].content
    assert instruction.startswith('Name the biggest district of {"name": "Oslo"')
    assert events.log == ["start:north", "end:north"]

    started = [o.content for o in recorder.of(ObservationType.TOOL_CALL)]
    assert [(c["callId"], c["kind"], c["toolName"]) for c in started] == [
        ("call_1", "tool", "get_city"),
        ("call_2", "language", "language_step"),
        ("call_3", "tool", "slow_echo"),
    ]
    assert started[1]["instruction"] == instruction
    ended = {o.content["callId"]: o.content for o in recorder.of(ObservationType.TOOL_EXECUTION)}
    assert (ended["call_2"]["kind"], ended["call_2"]["output"]) == ("language", "north")
    assert ended["call_1"]["kind"] == "tool"
    await agent.aclose()


async def test_failing_language_step_makes_the_run_partial(tools: list[Any]) -> None:
    """A language step whose model call cannot be answered is an error result, not a crash."""
    answers = iter(
        [
            plan_json(step(1, "Write a haiku."), call(2, "add", a=1, b=2)),
            "",  # the language step answers nothing
            "Here is what worked.",
        ]
    )
    model = ScriptedProvider([lambda request: next(answers)], repeat=True)
    agent = create_agent(provider=model, tools=tools)
    result = await agent.process(AgentProps("Haiku and a sum", "t1"))
    assert result.metadata.status == "partial"
    assert result.response.content == "Here is what worked."
    await agent.aclose()


def _revise_after_failure(request: LLMRequest) -> str:
    return json.dumps({"toolCalls": [call(4, "add", a="{step_1_result}", b=100)]})


async def test_reevaluation_replaces_the_call_that_would_have_used_a_failed_result(
    tools: list[Any], events: Events, recorder: Recorder
) -> None:
    """On failure the model replaces the remaining call; it never runs; a PLAN says so."""
    model = ScriptedProvider(
        [
            by_phase(
                planning=plan_json(
                    call(1, "add", a=1, b=2),
                    call(2, "explode", reason="backend down"),
                    call(3, "slow_echo", text="{step_2_result}"),
                ),
                reevaluation=_revise_after_failure,
                synthesis="Recovered: 103.",
            )
        ],
        repeat=True,
    )
    agent = create_agent(provider=model, tools=tools, reevaluate="on_failure")
    agent.observations.subscribe(recorder)
    result = await agent.process(AgentProps("Do things", "t1"))

    assert phases(model) == ["planning", "reevaluation", "synthesis"]
    assert not any(entry.startswith("start:") for entry in events.log)  # call_3 never ran
    assert events.log == ["add:1+2", "add:3+100"]
    assert result.metadata.status == "partial"  # call_2 still failed
    assert result.metadata.tool_calls == 3  # call_1, call_2 and the new call_4
    prompt = model.requests[1].messages[-1].content
    assert 'Step 2 ("call_2") explode' in prompt
    assert "backend down" in prompt
    assert 'Step 3 ("call_3") slow_echo' in prompt
    assert "Your first call is step 4." in prompt

    plans = [o for o in recorder.of(ObservationType.PLAN) if o.content["status"] == "revised"]
    assert [o.title for o in plans] == ["Plan revised (1)"]
    assert plans[0].content["replaced"] == ["call_3"]
    assert [c["call_id"] for c in plans[0].content["toolCalls"]] == ["call_4"]
    synthesis = model.requests[-1].messages[-1].content
    assert '\n4. add(a="{step_1_result}", b=100) →\n103' in synthesis  # its real step number
    assert '\n2. explode(reason="backend down") → error' in synthesis
    assert "call_3" not in synthesis
    await agent.aclose()


async def test_a_model_that_always_revises_is_bounded_by_max_revisions(
    tools: list[Any], events: Events
) -> None:
    """each_wave with a model that always adds a call makes max_revisions revisions only."""
    counter = iter(range(5, 100))

    def always_more(request: LLMRequest) -> str:
        n = next(counter)
        return json.dumps(
            {
                "toolCalls": [
                    call(n, "add", a=n, b=0),
                    {**call(n + 100, "add", a=0, b=n), "dependsOn": [f"call_{n}"]},
                ]
            }
        )

    model = ScriptedProvider(
        [
            by_phase(
                planning=plan_json(
                    call(1, "add", a=1, b=1), call(2, "add", a="{step_1_result}", b=1)
                ),
                reevaluation=always_more,
                synthesis="Done.",
            )
        ],
        repeat=True,
    )
    agent = create_agent(provider=model, tools=tools, reevaluate="each_wave", max_revisions=3)
    result = await agent.process(AgentProps("Keep adding", "t1"))
    assert phases(model).count("reevaluation") == 3
    assert result.metadata.llm_calls == 5  # planning, three re-evaluations, synthesis
    # Each revision replaces the call not yet run, so the tool calls stay bounded too: call_1,
    # the first call of each revision, and the second call of the last one.
    assert events.log == ["add:1+1", "add:5+0", "add:6+0", "add:7+0", "add:0+7"]
    assert result.metadata.tool_calls == 5
    await agent.aclose()


async def test_an_unusable_revision_keeps_the_plan_and_says_so(
    tools: list[Any], events: Events, recorder: Recorder
) -> None:
    """A reply naming a missing step keeps the remaining calls, with a PLAN saying why."""
    model = ScriptedProvider(
        [
            by_phase(
                planning=plan_json(call(1, "explode", reason="x"), call(2, "add", a=2, b=2)),
                reevaluation=json.dumps({"toolCalls": [call(3, "add", a="{step_9_result}", b=1)]}),
                synthesis="Partly done.",
            )
        ],
        repeat=True,
    )
    agent = create_agent(provider=model, tools=tools, reevaluate="on_failure", max_revisions=1)
    agent.observations.subscribe(recorder)
    result = await agent.process(AgentProps("Go", "t1"))
    assert events.log == ["add:2+2"]
    assert result.metadata.status == "partial"
    [kept] = [o for o in recorder.of(ObservationType.PLAN) if o.content["status"] == "unusable"]
    assert kept.title == "Plan kept: revision unusable"
    assert any("step_9_result" in problem for problem in kept.content["problems"])
    await agent.aclose()


async def test_reevaluate_per_call_option_overrides_the_agent(tools: list[Any]) -> None:
    """`RunOptions(reevaluate="never")` turns re-evaluation off for one call."""
    model = ScriptedProvider(
        [
            by_phase(
                planning=plan_json(call(1, "explode", reason="x"), call(2, "add", a=1, b=1)),
                reevaluation='{"keep": true}',
                synthesis="ok",
            )
        ],
        repeat=True,
    )
    agent = create_agent(provider=model, tools=tools, reevaluate="on_failure")
    await agent.process(AgentProps("Go", "t1", options=RunOptions(reevaluate="never")))
    assert "reevaluation" not in phases(model)
    await agent.process(AgentProps("Go", "t1"))
    assert phases(model).count("reevaluation") == 1
    await agent.aclose()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"reevaluate": "sometimes"}, "reevaluate must be 'never', 'on_failure' or 'each_wave'"),
        ({"max_revisions": -1}, "max_revisions must be an int >= 0"),
        ({"max_revisions": True}, "max_revisions must be an int >= 0"),
    ],
)
def test_create_agent_checks_the_reevaluation_arguments(
    options: dict[str, Any], message: str
) -> None:
    """A bad reevaluate or max_revisions fails at once with the fix in the message."""
    with pytest.raises(UsageError, match=message):
        create_agent(provider=ScriptedProvider(["x"]), **options)
