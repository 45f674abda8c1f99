"""Runs side by side: different threads in parallel, one thread in turn, cancellation."""

from __future__ import annotations

import asyncio
from typing import Any

from pes_agent import AgentProps, MessageRole, ObservationType
from pes_agent.providers.base import LLMRequest
from pes_agent.testing import ScriptedProvider

from ...helpers import AgentBuilder
from .conftest import Events, Recorder, call, plan_json


def _echo_thread_id(request: LLMRequest) -> str:
    if request.phase == "planning":
        return plan_json(call(1, "slow_echo", text=request.thread_id))
    return "ok"


async def test_runs_on_different_threads_overlap(
    build_agent: AgentBuilder, tools: list[Any], events: Events
) -> None:
    """Two runs on distinct threads execute their slow tools at the same time."""
    model = ScriptedProvider([_echo_thread_id], repeat=True)
    agent = build_agent(provider=model, tools=tools)
    await asyncio.gather(agent.process(AgentProps("q", "A")), agent.process(AgentProps("q", "B")))
    assert events.index("start:B") < events.index("end:A")
    assert events.index("start:A") < events.index("end:B")


async def test_runs_on_one_thread_never_interleave(
    build_agent: AgentBuilder, tools: list[Any], recorder: Recorder
) -> None:
    """Three concurrent runs on one thread finish one after another with whole turns saved."""
    model = ScriptedProvider(
        [lambda r: plan_json(call(1, "slow_echo", text="x")) if r.phase == "planning" else "ok"],
        repeat=True,
        latency_s=0.01,
    )
    agent = build_agent(provider=model, tools=tools)
    agent.observations.subscribe(recorder)
    await asyncio.gather(*(agent.process(AgentProps(f"q{i}", "same")) for i in range(3)))
    traces = [o.trace_id for o in recorder.seen]
    # Each run's observations form one contiguous block: no run starts before the last ends.
    blocks = [trace for i, trace in enumerate(traces) if i == 0 or traces[i - 1] != trace]
    assert len(blocks) == 3 == len(set(blocks))
    messages = await agent.conversation.get_messages("same")
    assert [m.role for m in messages] == [MessageRole.USER, MessageRole.AI] * 3


async def test_cancelling_a_run_cancels_running_tools_and_keeps_finished_results(
    build_agent: AgentBuilder, tools: list[Any], events: Events, recorder: Recorder
) -> None:
    """Cancelling process() stops a running tool, keeps what finished and saves no half turn."""
    model = ScriptedProvider(
        [
            plan_json(call(1, "add", a=1, b=1), call(2, "sleepy", seconds=30)),
            plan_json(),
            "after",
        ]
    )
    agent = build_agent(provider=model, tools=tools)
    agent.observations.subscribe(recorder)
    started = asyncio.Event()
    agent.observations.subscribe(
        lambda o: started.set() if o.content.get("toolName") == "sleepy" else None,
        types=[ObservationType.TOOL_CALL],
    )
    task = asyncio.create_task(agent.process(AgentProps("q", "t")))
    await started.wait()
    await asyncio.sleep(0.01)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    else:
        raise AssertionError("the cancelled run must raise CancelledError")
    assert "sleepy:cancelled" in events.log
    finished = [o.content["callId"] for o in recorder.of(ObservationType.TOOL_EXECUTION)]
    assert finished == ["call_1"]
    assert recorder.of(ObservationType.ERROR)[-1].content["phase"] == "cancelled"
    assert await agent.conversation.get_messages("t") == []
    # The thread is not left locked: the next run goes through.
    result = await agent.process(AgentProps("again", "t"))
    assert result.response.content == "after"
