"""AG-UI at POST /v1/agui: a run told as AG-UI events, each valid by `ag_ui.core`'s models."""

from __future__ import annotations

import sys
from typing import Any

import httpx2 as httpx
import pytest

import pes_agent.interop
from pes_agent import AgentCore
from pes_agent.server import create_app

from .conftest import ANSWER, LOOP, THINKING, TOKENS, Post, run_input

pytestmark = LOOP


def names(events: list[Any]) -> list[str]:
    return [event.type.value for event in events]


def of(events: list[Any], name: str) -> list[Any]:
    return [event for event in events if event.type.value == name]


async def test_a_run_reads_as_agui_events_in_order(post: Post, agent: AgentCore) -> None:
    """RUN_STARTED and the state first, steps per phase, each call announced then answered,
    the answer as text, RUN_FINISHED last; the steps balance."""
    response, events = await post(run_input("t1", "nap twice"))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    kinds = names(events)
    assert kinds[:2] == ["RUN_STARTED", "STATE_SNAPSHOT"]
    assert kinds[-1] == "RUN_FINISHED"
    assert events[0].thread_id == "t1"
    assert events[0].run_id == "run-nap twice"
    assert events[-1].run_id == "run-nap twice"
    assert events[-1].outcome.type == "success"
    assert events[-1].result["traceId"] == response.headers["x-trace-id"]
    started = [event.step_name for event in of(events, "STEP_STARTED")]
    finished = [event.step_name for event in of(events, "STEP_FINISHED")]
    assert started == ["planning", "execution", "synthesis"]
    assert sorted(finished) == sorted(started)
    for call in of(events, "TOOL_CALL_START"):
        at = events.index(call)
        assert names(events[at : at + 3]) == ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"]
        assert events[at + 1].delta == '{"s": 0.3}'
        assert call.tool_call_name == "nap"
    results = of(events, "TOOL_CALL_RESULT")
    assert sorted(result.content for result in results) == ["rested 0.3", "rested 0.3"]


async def test_parallel_calls_both_start_before_either_result(post: Post) -> None:
    """Two 0.3 s calls run side by side: both are announced before either is answered."""
    _, events = await post(run_input("t1", "nap twice"))
    kinds = names(events)
    starts = [i for i, kind in enumerate(kinds) if kind == "TOOL_CALL_START"]
    results = [i for i, kind in enumerate(kinds) if kind == "TOOL_CALL_RESULT"]
    assert len(starts) == len(results) == 2
    assert max(starts) < min(results)
    ids = {events[i].tool_call_id for i in starts}
    assert ids == {events[i].tool_call_id for i in results}
    assert len(ids) == 2


async def test_the_answer_deltas_join_to_the_saved_answer(post: Post, agent: AgentCore) -> None:
    """TEXT_MESSAGE_CONTENT deltas, in order, are the answer the thread saved."""
    _, events = await post(run_input("t2", "nap twice"))
    (start,) = of(events, "TEXT_MESSAGE_START")
    (end,) = of(events, "TEXT_MESSAGE_END")
    deltas = of(events, "TEXT_MESSAGE_CONTENT")
    assert len(deltas) > 1  # streamed, not sent whole
    assert {d.message_id for d in deltas} == {start.message_id} == {end.message_id}
    saved = await agent.conversation.get_messages("t2")
    assert "".join(d.delta for d in deltas) == ANSWER == saved[-1].content


async def test_thinking_streams_as_reasoning_events(post: Post) -> None:
    """Thinking tokens are a reasoning message that opens, fills and closes before the text."""
    _, events = await post(run_input("t3", "nap and think"))
    kinds = names(events)
    assert kinds.index("REASONING_START") < kinds.index("REASONING_MESSAGE_START")
    assert kinds.index("REASONING_END") < kinds.index("TEXT_MESSAGE_START")
    text = "".join(d.delta for d in of(events, "REASONING_MESSAGE_CONTENT"))
    assert text == THINKING


async def test_a_failing_provider_gives_run_error(post: Post) -> None:
    """The model failing in synthesis ends the stream with RUN_ERROR (no RUN_FINISHED),
    after the steps open were closed."""
    _, events = await post(run_input("t4", "nap then fail"))
    kinds = names(events)
    assert kinds[-1] == "RUN_ERROR"
    assert "RUN_FINISHED" not in kinds
    assert "model is down" in events[-1].message
    assert len(of(events, "STEP_STARTED")) == len(of(events, "STEP_FINISHED"))


async def test_an_approval_interrupts_and_the_resume_runs_the_call(
    post: Post, agent: AgentCore
) -> None:
    """A gated call ends the run with an interrupt outcome; resume entries approving it
    resume the run, which runs the call under the interrupt's id and answers."""
    _, paused = await post(run_input("t5", "pay please"))
    finished = paused[-1]
    assert finished.type.value == "RUN_FINISHED"
    assert finished.outcome.type == "interrupt"
    (interrupt,) = finished.outcome.interrupts
    assert interrupt.tool_call_id == interrupt.id
    assert interrupt.response_schema["properties"]["approved"] == {
        "type": "boolean",
        "description": "run the call (true) or refuse it",
    }
    assert interrupt.metadata["toolName"] == "pay"
    assert "TOOL_CALL_START" not in names(paused)  # not dispatched before the decision
    resume = [{"interruptId": interrupt.id, "status": "resolved", "payload": {"approved": True}}]
    response, resumed = await post({**run_input("t5", None), "resume": resume})
    assert response.status_code == 200, response.text
    assert names(resumed)[0] == "RUN_STARTED"
    (start,) = of(resumed, "TOOL_CALL_START")
    assert start.tool_call_id == interrupt.id
    (result,) = of(resumed, "TOOL_CALL_RESULT")
    assert result.content == "paid 5"
    assert resumed[-1].outcome.type == "success"
    assert await agent.pending_runs("t5") == []


async def test_a_denying_resume_answers_the_call_with_the_reason(post: Post) -> None:
    """`approved: false` refuses the call: its result is an error naming the reason."""
    _, paused = await post(run_input("t6", "pay please"))
    (interrupt,) = paused[-1].outcome.interrupts
    payload = {"approved": False, "reason": "too dear"}
    resume = [{"interruptId": interrupt.id, "status": "resolved", "payload": payload}]
    _, resumed = await post({**run_input("t6", None), "resume": resume})
    (result,) = of(resumed, "TOOL_CALL_RESULT")
    assert result.tool_call_id == interrupt.id
    assert "too dear" in result.content
    assert resumed[-1].type.value == "RUN_FINISHED"


async def test_resume_entries_are_checked_before_anything_runs(post: Post) -> None:
    """An unknown interrupt id or a payload of the wrong shape is a 422; nothing resumes."""
    _, paused = await post(run_input("t7", "pay please"))
    (interrupt,) = paused[-1].outcome.interrupts
    bad = [{"interruptId": "nope", "status": "resolved", "payload": {"approved": True}}]
    response, _ = await post({**run_input("t7", None), "resume": bad})
    assert response.status_code == 422
    assert response.json()["error"]["type"] == "unknown_interrupt_ids"
    wrong = [{"interruptId": interrupt.id, "status": "resolved", "payload": {"approved": "yes"}}]
    response, _ = await post({**run_input("t7", None), "resume": wrong})
    assert response.status_code == 422
    assert response.json()["error"]["type"] == "invalid_resume"
    refused, _ = await post(run_input("t7", "nap twice"))
    assert refused.status_code == 409  # the thread still waits for the decision
    assert refused.json()["error"]["type"] == "awaiting_approval"


async def test_state_snapshot_then_a_delta_for_the_state_the_run_saves(
    post: Post, agent: AgentCore
) -> None:
    """The input's state becomes the thread's; a tool's change to it comes as a JSON Patch."""
    _, events = await post(run_input("t8", "note it", state={"mood": "calm"}))
    (snapshot,) = of(events, "STATE_SNAPSHOT")
    assert snapshot.snapshot == {"mood": "calm"}
    (delta,) = of(events, "STATE_DELTA")
    patch = [op.model_dump(by_alias=True) for op in delta.delta]
    assert patch == [{"op": "add", "path": "/notes", "value": ["hi"]}]
    saved = await agent.state.get_agent_state("t8")
    assert saved is not None
    assert saved.data == {"mood": "calm", "notes": ["hi"]}
    _, again = await post(run_input("t8", "nap twice", state={}))
    assert of(again, "STATE_SNAPSHOT")[0].snapshot == saved.data  # {} leaves the state alone


async def test_the_route_needs_a_token_and_keeps_to_the_callers_threads(
    agent: AgentCore, post: Post
) -> None:
    """Without a token: 401; another user's thread: 404, as on every route of the API."""
    app = create_app(agent, tokens=TOKENS)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://api"
    ) as anonymous:
        refused = await anonymous.post("/v1/agui", json=run_input("t9", "nap twice"))
        assert refused.status_code == 401
        await post(run_input("t9", "nap twice"))
        bob = {"Authorization": "Bearer bob-token"}
        other = await anonymous.post("/v1/agui", json=run_input("t9", "hi"), headers=bob)
        assert other.status_code == 404
        assert other.json()["error"]["type"] == "thread_not_found"


async def test_agui_false_serves_no_agui_route(agent: AgentCore) -> None:
    """`create_app(agent, agui=False)` answers /v1/agui as an unknown path."""
    app = create_app(agent, tokens=TOKENS, agui=False)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://api",
        headers={"Authorization": "Bearer alice-token"},
    ) as http:
        response = await http.post("/v1/agui", json=run_input("t10", "nap twice"))
    assert response.status_code == 404


async def test_an_input_without_a_user_message_is_refused(post: Post) -> None:
    """No user message with text: a 422 saying so, and no run."""
    response, _ = await post(run_input("t11", None))
    assert response.status_code == 422
    assert response.json()["error"]["type"] == "no_query"


async def test_without_the_extra_the_route_answers_501_naming_it(
    agent: AgentCore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ag-ui-protocol missing the app still starts; the route says what to install."""
    monkeypatch.setitem(sys.modules, "ag_ui.core", None)  # `import ag_ui.core` now fails
    monkeypatch.delitem(sys.modules, "pes_agent.interop.agui")
    monkeypatch.delattr(pes_agent.interop, "agui")
    app = create_app(agent, tokens=TOKENS)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://api",
        headers={"Authorization": "Bearer alice-token"},
    ) as http:
        response = await http.post("/v1/agui", json=run_input("t12", "nap twice"))
    assert response.status_code == 501
    assert "pip install 'pes-agent[agui]'" in response.json()["error"]["message"]
