"""Observations of a run: their order, their filters and their delivery."""

from __future__ import annotations

import asyncio
from typing import Any

from pes_agent import AgentProps, Observation, ObservationType, ParsedToolCall
from pes_agent.testing import ScriptedProvider

from ...helpers import AgentBuilder
from .conftest import Recorder, call, plan_json

T = ObservationType


def _model(*extra: str) -> ScriptedProvider:
    return ScriptedProvider(
        [plan_json(call(1, "add", a=1, b=2), call(2, "add", a=3, b=4)), "done", *extra]
    )


async def test_successful_run_records_each_phase_in_order(
    build_agent: AgentBuilder, tools: list[Any], recorder: Recorder
) -> None:
    """A run records plan, stream, title, intent, tool, synthesis and final records in order."""
    agent = build_agent(provider=_model(), tools=tools)
    agent.observations.subscribe(recorder)
    await agent.process(AgentProps("q", "t"))
    types = [t for t in recorder.types() if t not in (T.TOOL_CALL, T.TOOL_EXECUTION)]
    stream = [T.LLM_STREAM_START, T.LLM_STREAM_METADATA, T.LLM_STREAM_END]
    assert types == [
        T.PLAN,
        *stream,
        T.TITLE,
        T.INTENT,
        T.PLAN,
        *stream,
        T.SYNTHESIS,
        T.FINAL_RESPONSE,
    ]
    assert recorder.of(T.PLAN)[0].content["status"] == "preparing"
    ready = recorder.of(T.PLAN)[1].content
    assert ready["raw"].startswith("{")
    assert ready["toolCalls"] == [
        ParsedToolCall(call_id=f"call_{n}", tool_name="add", arguments=arguments).model_dump()
        for n, arguments in ((1, {"a": 1, "b": 2}), (2, {"a": 3, "b": 4}))
    ]
    assert len(recorder.of(T.TOOL_CALL)) == 2
    assert len(recorder.of(T.TOOL_EXECUTION)) == 2
    for execution in recorder.of(T.TOOL_EXECUTION):
        started = next(o for o in recorder.of(T.TOOL_CALL) if o.id == execution.parent_id)
        assert started.content["callId"] == execution.content["callId"]
    assert {o.trace_id for o in recorder.seen} == {recorder.seen[0].trace_id}


async def test_type_filter_delivers_only_the_requested_types(
    build_agent: AgentBuilder, tools: list[Any], recorder: Recorder
) -> None:
    """A subscriber for TOOL_EXECUTION and FINAL_RESPONSE sees nothing else."""
    agent = build_agent(provider=_model(), tools=tools)
    agent.observations.subscribe(recorder, types=[T.TOOL_EXECUTION, T.FINAL_RESPONSE])
    await agent.process(AgentProps("q", "t"))
    assert sorted(recorder.types()) == sorted(
        [T.TOOL_EXECUTION, T.TOOL_EXECUTION, T.FINAL_RESPONSE]
    )


async def test_thread_filter_delivers_only_that_threads_observations(
    build_agent: AgentBuilder, tools: list[Any]
) -> None:
    """A subscriber for thread 'a' sees none of thread 'b''s observations."""
    agent = build_agent(provider=_model(*_model().responses), tools=tools)
    only_a = Recorder()
    agent.observations.subscribe(only_a, thread_id="a")
    await agent.process(AgentProps("q", "a"))
    await agent.process(AgentProps("q", "b"))
    assert only_a.seen
    assert {o.thread_id for o in only_a.seen} == {"a"}


async def test_async_callbacks_are_awaited(build_agent: AgentBuilder, tools: list[Any]) -> None:
    """An async subscriber is awaited for every observation before the run returns."""
    seen: list[ObservationType] = []

    async def slow(observation: Observation) -> None:
        await asyncio.sleep(0)
        seen.append(observation.type)

    agent = build_agent(provider=_model(), tools=tools)
    agent.observations.subscribe(slow, types=[T.FINAL_RESPONSE])
    await agent.process(AgentProps("q", "t"))
    assert seen == [T.FINAL_RESPONSE]


async def test_raising_callback_never_breaks_the_run(
    build_agent: AgentBuilder, tools: list[Any], recorder: Recorder
) -> None:
    """A subscriber that raises is skipped; the run and the other subscribers go on."""

    def broken(observation: Observation) -> None:
        raise RuntimeError("subscriber bug")

    agent = build_agent(provider=_model(), tools=tools)
    agent.observations.subscribe(broken)
    agent.observations.subscribe(recorder, types=[T.FINAL_RESPONSE])
    result = await agent.process(AgentProps("q", "t"))
    assert result.metadata.status == "success"
    assert len(recorder.seen) == 1


async def test_unsubscribe_stops_delivery(
    build_agent: AgentBuilder, tools: list[Any], recorder: Recorder
) -> None:
    """After calling the returned unsubscribe function nothing more is delivered."""
    agent = build_agent(provider=_model(*_model().responses), tools=tools)
    unsubscribe = agent.observations.subscribe(recorder)
    await agent.process(AgentProps("q", "t"))
    count = len(recorder.seen)
    unsubscribe()
    unsubscribe()
    await agent.process(AgentProps("q", "t"))
    assert len(recorder.seen) == count > 0


async def test_observations_are_readable_afterwards_with_filters(
    build_agent: AgentBuilder, tools: list[Any]
) -> None:
    """get_observations returns a thread's records in order, filtered by type on request."""
    agent = build_agent(provider=_model(), tools=tools)
    result = await agent.process(AgentProps("q", "t"))
    everything = await agent.observations.get_observations("t")
    assert everything[-1].type is T.FINAL_RESPONSE
    assert {o.trace_id for o in everything} == {result.metadata.trace_id}
    tools_only = await agent.observations.get_observations("t", types=[T.TOOL_EXECUTION])
    assert [o.type for o in tools_only] == [T.TOOL_EXECUTION, T.TOOL_EXECUTION]


async def test_final_response_carries_the_saved_message(
    build_agent: AgentBuilder, tools: list[Any], recorder: Recorder
) -> None:
    """FINAL_RESPONSE holds the AI message that was saved and the run status."""
    agent = build_agent(provider=_model(), tools=tools)
    agent.observations.subscribe(recorder, types=[T.FINAL_RESPONSE])
    result = await agent.process(AgentProps("q", "t"))
    content = recorder.seen[0].content
    assert content["status"] == "success"
    assert content["message"]["message_id"] == result.response.message_id


async def test_stream_socket_delivers_answer_tokens_by_phase(
    build_agent: AgentBuilder, tools: list[Any]
) -> None:
    """A stream subscriber for the synthesis phase receives the answer token by token."""
    model = ScriptedProvider([plan_json(), "The answer is forty-two."], chunk_size=4)
    agent = build_agent(provider=model, tools=tools)
    tokens: list[str] = []
    kinds: list[str] = []

    def on_event(event: Any) -> None:
        kinds.append(event.kind)
        if event.kind == "token":
            tokens.append(event.text)

    agent.stream.subscribe(on_event, phases=["synthesis"])
    await agent.process(AgentProps("q", "t"))
    assert "".join(tokens) == "The answer is forty-two."
    assert len(tokens) == 6
    assert kinds[-1] == "end"
