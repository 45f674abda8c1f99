"""Streaming dispatch: a plan's calls start while the planner still writes it (DESIGN §13)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from pes_agent import (
    AgentProps,
    Observation,
    ObservationType,
    PendingApproval,
    PlanningOutput,
    RunOptions,
    create_agent,
)
from pes_agent.planning.plan import ParsedToolCall
from pes_agent.protocols import PlanningContext
from pes_agent.providers.base import (
    LLMRequest,
    ProviderEvent,
    StreamMetadata,
    StreamRestart,
    TokenDelta,
)
from pes_agent.testing import ScriptedProvider
from pes_agent.usage import Usage
from tests.helpers import AgentBuilder

from .conftest import Events, Recorder

# A model writing about a character every 2.5 ms: a plan line takes ~50 ms to stream.
SLOW = {"chunk_size": 4, "chunk_latency_s": 0.01}


def _index(seen: list[Observation], kind: ObservationType, **content: Any) -> int:
    for position, observation in enumerate(seen):
        if observation.type is kind and all(
            observation.content.get(key) == value for key, value in content.items()
        ):
            return position
    raise AssertionError(f"no {kind} with {content} in {[o.type.value for o in seen]}")


async def test_a_call_starts_before_the_planning_stream_ends(
    build_agent: AgentBuilder, tools: list[Any], recorder: Recorder, events: Events
) -> None:
    """The first TOOL_CALL is recorded while the plan still streams (before its
    LLM_STREAM_END), after PLAN "preparing"; the run's results are those of the whole plan."""
    plan = (
        '1. slow_echo(text="a")\n'
        '2. slow_echo(text="b")\n'
        '3. slow_echo(text="{step_1_result}{step_2_result}")\n'
        "Intent: echo things\n"
    )
    model = ScriptedProvider([plan, "ab"], **SLOW)
    agent = build_agent(provider=model, tools=tools)
    agent.observations.subscribe(recorder)
    result = await agent.process(AgentProps("echo", "t1"))
    assert result.metadata.status == "success", result.metadata.error
    seen = recorder.seen
    first_call = _index(seen, ObservationType.TOOL_CALL, callId="call_1")
    stream_end = _index(seen, ObservationType.LLM_STREAM_END, phase="planning")
    preparing = _index(seen, ObservationType.PLAN, status="preparing")
    assert preparing < first_call < stream_end
    # call_1 ran to its end while the model was still writing the plan.
    assert _index(seen, ObservationType.TOOL_EXECUTION, callId="call_1") < stream_end
    outputs = {
        o.content["callId"]: o.content["output"]
        for o in recorder.of(ObservationType.TOOL_EXECUTION)
    }
    assert outputs == {"call_1": "a", "call_2": "b", "call_3": "ab"}
    ready = recorder.of(ObservationType.PLAN)[-1].content
    assert ready["status"] == "ready"
    assert ready["plan"] is None  # the plan is its calls: no prose repeats them
    assert [c["call_id"] for c in ready["toolCalls"]] == ["call_1", "call_2", "call_3"]
    assert [o.content["title"] for o in recorder.of(ObservationType.TITLE)] == ["echo things"]
    assert result.metadata.phases.planning_ms > 0
    assert result.metadata.phases.execution_ms > 0


async def test_a_structured_plan_streams_its_calls_too(
    build_agent: AgentBuilder, tools: list[Any], recorder: Recorder
) -> None:
    """A JSON plan (here a response_format answer) starts each call when its object closes."""
    plan = {
        "calls": [
            {"tool": "slow_echo", "args": '{"text": "a"}', "after": []},
            {"tool": "slow_echo", "args": '{"text": "b"}', "after": [1]},
        ],
        "intent": "echo twice",
    }

    class Structured(ScriptedProvider):
        structured_output = "response_format"

    model = Structured([json.dumps(plan), "ok"], **SLOW)
    agent = build_agent(provider=model, tools=tools)
    agent.observations.subscribe(recorder)
    result = await agent.process(AgentProps("echo", "t1"))
    assert result.metadata.status == "success", result.metadata.error
    assert model.requests[0].response_format is not None
    seen = recorder.seen
    stream_end = _index(seen, ObservationType.LLM_STREAM_END, phase="planning")
    assert _index(seen, ObservationType.TOOL_CALL, callId="call_1") < stream_end
    # call_2 waits for call_1 ("after": [1]) even though it streamed before call_1 ended.
    assert _index(seen, ObservationType.TOOL_EXECUTION, callId="call_1") < _index(
        seen, ObservationType.TOOL_CALL, callId="call_2"
    )


async def test_a_gated_call_is_not_asked_about_before_the_plan_is_final(
    build_agent: AgentBuilder, tools: list[Any], recorder: Recorder
) -> None:
    """A call that needs approval waits for the final plan before anyone is asked, while the
    ungated calls around it start as they stream."""
    plan = '1. add(a=1, b=2)\n2. slow_echo(text="x")\n3. slow_echo(text="y")\nIntent: gate\n'
    asked: list[int] = []

    async def handler(pending: PendingApproval) -> bool:
        asked.append(len(recorder.seen))
        return True

    model = ScriptedProvider([plan, "done"], **SLOW)
    agent = build_agent(
        provider=model, tools=tools, require_approval=["add"], approval_handler=handler
    )
    agent.observations.subscribe(recorder)
    result = await agent.process(AgentProps("gate", "t1"))
    assert result.metadata.status == "success", result.metadata.error
    seen = recorder.seen
    stream_end = _index(seen, ObservationType.LLM_STREAM_END, phase="planning")
    assert _index(seen, ObservationType.TOOL_CALL, callId="call_2") < stream_end
    assert asked
    assert asked[0] > stream_end
    assert _index(seen, ObservationType.TOOL_CALL, callId="call_1") > stream_end


async def test_a_paused_run_streamed_its_plan_and_stores_it_whole(
    build_agent: AgentBuilder, tools: list[Any], events: Events
) -> None:
    """Without a handler a gated call pauses the run: it never ran, the other calls did, and
    the stored run holds the whole plan."""
    plan = '1. add(a=1, b=2)\n2. slow_echo(text="x")\nIntent: pause\n'
    model = ScriptedProvider([plan, "done"], **SLOW)
    agent = build_agent(provider=model, tools=tools, require_approval=["add"])
    result = await agent.process(AgentProps("pause", "t1"))
    assert result.metadata.status == "awaiting_approval"
    assert [p.call_id for p in result.metadata.pending_approvals] == ["call_1"]
    assert events.log == ["start:x", "end:x"]  # add never ran
    (paused,) = await agent.pending_runs("t1")
    assert [c.call_id for c in paused.calls] == ["call_1", "call_2"]


async def test_an_unusable_plan_cancels_the_calls_it_started_and_repairs(
    build_agent: AgentBuilder, tools: list[Any], recorder: Recorder, events: Events
) -> None:
    """A call already running when the plan turns out unusable is cancelled and recorded; the
    repair starts from a clean slate and only its calls' results count."""
    broken = '1. sleepy(seconds=10)\n2. add(a=1, b="{step_3_result}")\nIntent: broken\n'
    fixed = "1. add(a=1, b=2)\nIntent: fixed\n"
    model = ScriptedProvider([broken, fixed, "3"], **SLOW)
    agent = build_agent(provider=model, tools=tools)
    agent.observations.subscribe(recorder)
    result = await agent.process(AgentProps("add", "t1"))
    assert result.metadata.status == "success", result.metadata.error
    assert [r.phase for r in model.requests] == ["planning", "repair", "synthesis"]
    assert events.log == ["sleepy:start", "sleepy:cancelled", "add:1+2"]
    assert result.metadata.tool_calls == 1
    (discarded,) = [
        o for o in recorder.of(ObservationType.PLAN) if o.content["status"] == "discarded"
    ]
    assert discarded.content["cancelled"] == ["call_1"]
    # call_2 was submitted but never started: it names step 3, which the plan might still add.
    assert discarded.content["calls"] == ["call_1", "call_2"]
    assert "step_3_result" in discarded.content["reason"]
    cancelled = _index(recorder.seen, ObservationType.TOOL_EXECUTION, callId="call_1")
    assert recorder.seen[cancelled].content["error"].startswith("Cancelled: the plan could not")
    assert cancelled < recorder.seen.index(discarded)
    synthesis = model.requests[-1].messages[-1].content
    assert "sleepy" not in synthesis
    assert "1. add(a=1, b=2) →\n3" in synthesis


async def test_a_run_failing_to_plan_cancels_what_started(
    build_agent: AgentBuilder, tools: list[Any], events: Events
) -> None:
    """When the repaired plan is unusable too, the run fails and nothing is left running."""
    broken = '1. sleepy(seconds=10)\n2. add(a=1, b="{step_9_result}")\nIntent: broken\n'
    model = ScriptedProvider([broken, broken], **SLOW)
    agent = build_agent(provider=model, tools=tools)
    result = await agent.process(AgentProps("add", "t1"))
    assert result.metadata.status == "error"
    assert "unusable after one repair" in (result.metadata.error or "")
    assert events.log == ["sleepy:start", "sleepy:cancelled"] * 2
    leftover = [t for t in asyncio.all_tasks() if t.get_name().startswith("pes-")]
    assert leftover == []


async def test_cancelling_the_run_while_it_plans_cancels_the_started_calls(
    build_agent: AgentBuilder, tools: list[Any], events: Events
) -> None:
    """Cancelling process() mid-plan cancels the calls that started; no task is left over."""
    plan = "1. sleepy(seconds=10)\n2. add(a=1, b=2)\nIntent: long\n"
    model = ScriptedProvider([plan, "x"], chunk_size=4, chunk_latency_s=0.05)
    agent = build_agent(provider=model, tools=tools)
    started = asyncio.Event()
    agent.observations.subscribe(
        lambda _: started.set(), types=[ObservationType.TOOL_CALL], thread_id="t1"
    )
    task = asyncio.create_task(agent.process(AgentProps("go", "t1")))
    await asyncio.wait_for(started.wait(), 10)  # fails, not hangs, if no call starts
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert events.log == ["sleepy:start", "sleepy:cancelled"]
    leftover = [t for t in asyncio.all_tasks() if t.get_name().startswith("pes-")]
    assert leftover == []


async def test_limits_and_enabled_tools_hold_as_for_a_whole_plan(
    build_agent: AgentBuilder, tools: list[Any], events: Events
) -> None:
    """max_tool_calls and enabled_tools refuse the same calls with the same errors whether
    the plan streams or not."""
    plan = '1. add(a=1, b=1)\n2. explode(reason="no")\n3. add(a=2, b=2)\nIntent: limits\n'
    prompts = []
    for executor in (None, _NotStreaming()):
        events.log.clear()
        model = ScriptedProvider([plan, "x"], **SLOW)
        agent = build_agent(provider=model, tools=tools, max_tool_calls=2, executor=executor)
        options = RunOptions(enabled_tools=["add", "slow_echo"])
        result = await agent.process(AgentProps("go", "t1", options=options))
        assert result.metadata.status == "partial"
        assert events.log == ["add:1+1"]
        prompts.append(model.requests[-1].messages[-1].content)
    assert prompts[0] == prompts[1]
    assert 'Tool "explode" is not enabled for thread "t1".' in prompts[0]
    assert "Not run: the plan has 3 tool calls, more than the limit of 2 per plan." in prompts[0]


class _NotStreaming:
    """The default executor without `execute_stream`: it runs plans only once they are whole."""

    supports_approvals = True

    async def execute(self, calls: Any, ctx: Any) -> Any:
        from pes_agent.execution.executors import ConcurrentExecutor

        return await ConcurrentExecutor().execute(calls, ctx)


async def test_results_are_those_of_the_whole_plan_with_or_without_streaming(
    build_agent: AgentBuilder, tools: list[Any]
) -> None:
    """A plan with placeholders, dependsOn and a disabled tool gives the same synthesis prompt
    streamed (calls starting early) as executed whole."""
    plan = (
        '1. get_city(name="Paris")\n'
        '2. slow_echo(text="{step_1_result.districts[0]}")\n'
        "3. after 2: add(a=1, b=2)\n"
        '4. explode(reason="x")\n'
        '5. slow_echo(text="{step_4_result}")\n'
        '6. slow_echo(text="{step_1_result.name} has {step_2_result}")\n'
        "Intent: compare\n"
    )
    prompts = []
    for executor in (None, _NotStreaming()):
        model = ScriptedProvider([plan, "x"], **SLOW)
        agent = build_agent(provider=model, tools=tools, executor=executor)
        await agent.process(AgentProps("go", "t1"))
        prompts.append(model.requests[-1].messages[-1].content)
    assert prompts[0] == prompts[1]
    assert (
        '6. slow_echo(text="{step_1_result.name} has {step_2_result}") →\nParis has north'
        in (prompts[0])
    )


class _Restarting:
    """A provider whose first planning attempt breaks off after `cut` characters and is
    retried (a StreamRestart), then streams `retry` whole."""

    name = "restarting"
    model = "restarting-model"

    def __init__(self, first: str, cut: int, retry: str, answer: str) -> None:
        self._script = [(first, cut, retry), answer]
        self.requests: list[LLMRequest] = []

    async def stream(self, request: LLMRequest) -> AsyncIterator[ProviderEvent]:
        self.requests.append(request)
        entry = self._script.pop(0)
        if isinstance(entry, tuple):
            first, cut, retry = entry
            for start in range(0, cut, 4):
                await asyncio.sleep(0.01)
                yield TokenDelta(first[start : min(start + 4, cut)])
            yield StreamRestart("connection reset", 1)
            text = retry
        else:
            text = entry
        for start in range(0, len(text), 4):
            await asyncio.sleep(0.01)
            yield TokenDelta(text[start : start + 4])
        yield StreamMetadata(usage=Usage(requests=1))

    async def aclose(self) -> None:
        """Nothing to release."""


async def test_a_restarted_stream_keeps_the_calls_it_repeats(
    build_agent: AgentBuilder, tools: list[Any], events: Events
) -> None:
    """A call that started before the provider restarted its stream runs once, when the new
    answer repeats it."""
    plan = '1. slow_echo(text="a")\n2. add(a=1, b=2)\nIntent: again\n'
    model = _Restarting(plan, 28, plan, "done")
    agent = build_agent(provider=model, tools=tools)
    result = await agent.process(AgentProps("go", "t1"))
    assert result.metadata.status == "success", result.metadata.error
    assert events.log.count("start:a") == 1
    assert result.metadata.tool_calls == 2


async def test_a_restarted_stream_with_another_answer_discards_what_started(
    build_agent: AgentBuilder, tools: list[Any], events: Events, recorder: Recorder
) -> None:
    """When the retried answer plans something else, the calls the first answer started are
    cancelled and the new plan runs from a clean slate."""
    first = "1. sleepy(seconds=10)\n2. add(a=1, b=2)\nIntent: one\n"
    retry = '1. slow_echo(text="b")\nIntent: other\n'
    model = _Restarting(first, 24, retry, "done")
    agent = build_agent(provider=model, tools=tools)
    agent.observations.subscribe(recorder)
    result = await agent.process(AgentProps("go", "t1"))
    assert result.metadata.status == "success", result.metadata.error
    assert events.log[:2] == ["sleepy:start", "sleepy:cancelled"]
    assert "start:b" in events.log
    assert result.metadata.tool_calls == 1
    statuses = [o.content["status"] for o in recorder.of(ObservationType.PLAN)]
    assert "discarded" in statuses


class _SubmitsThenChanges:
    """A custom planner that submits calls as it goes, then returns a different plan."""

    async def plan(self, ctx: PlanningContext) -> PlanningOutput:
        assert ctx.dispatch is not None
        ctx.dispatch.submit(
            ParsedToolCall(call_id="c1", tool_name="sleepy", arguments={"seconds": 10})
        )
        await asyncio.sleep(0.05)
        return PlanningOutput(
            intent="changed",
            tool_calls=[ParsedToolCall(call_id="c1", tool_name="add", arguments={"a": 2, "b": 2})],
        )


async def test_the_final_plan_is_the_authority_over_what_started(
    tools: list[Any], events: Events, recorder: Recorder
) -> None:
    """Calls a planner submitted that its final plan does not start with are discarded; the
    final plan runs."""
    model = ScriptedProvider(["4"])
    async with create_agent(provider=model, tools=tools, planner=_SubmitsThenChanges()) as agent:
        agent.observations.subscribe(recorder)
        result = await agent.process(AgentProps("go", "t1"))
    assert result.metadata.status == "success", result.metadata.error
    assert events.log == ["sleepy:start", "sleepy:cancelled", "add:2+2"]
    (discarded,) = [
        o for o in recorder.of(ObservationType.PLAN) if o.content["status"] == "discarded"
    ]
    assert discarded.content["cancelled"] == ["c1"]


async def test_reevaluated_runs_wait_for_the_whole_plan(
    build_agent: AgentBuilder, tools: list[Any], recorder: Recorder
) -> None:
    """With re-evaluation after each wave no call starts before the plan is whole."""
    plan = '1. slow_echo(text="a")\n2. slow_echo(text="b")\nIntent: waves\n'
    model = ScriptedProvider([plan, '{"keep": true}', "ok"], repeat=True, **SLOW)
    agent = build_agent(provider=model, tools=tools, reevaluate="each_wave")
    agent.observations.subscribe(recorder)
    await agent.process(AgentProps("go", "t1"))
    seen = recorder.seen
    assert _index(seen, ObservationType.LLM_STREAM_END, phase="planning") < _index(
        seen, ObservationType.TOOL_CALL, callId="call_1"
    )
