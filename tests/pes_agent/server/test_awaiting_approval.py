"""A thread whose run waits for a person refuses new runs, as JSON and as a stream."""

from __future__ import annotations

import pytest

from pes_agent import AgentCore, AgentProps, ThreadAwaitingApprovalError, UsageError
from tests.pes_agent.server.conftest import ClientFactory


async def _paused_run(client_for: ClientFactory, thread_id: str) -> str:
    paused = await client_for("alice-token").post(
        f"/v1/threads/{thread_id}/runs", json={"query": "pay please"}
    )
    metadata = paused.json()["metadata"]
    assert metadata["status"] == "awaiting_approval"
    trace_id: str = metadata["trace_id"]
    return trace_id


async def test_json_run_on_a_paused_thread_is_409_naming_the_waiting_run(
    client_for: ClientFactory,
) -> None:
    """The refusal names the waiting run's trace id and the requests that finish or drop it."""
    trace_id = await _paused_run(client_for, "waits")
    refused = await client_for("alice-token").post("/v1/threads/waits/runs", json={"query": "hi"})
    assert refused.status_code == 409
    error = refused.json()["error"]
    assert error["type"] == "awaiting_approval"
    assert f"/v1/threads/waits/runs/{trace_id}/decisions" in error["message"]
    assert f"/v1/runs/{trace_id}/cancel" in error["message"]


async def test_stream_run_on_a_paused_thread_is_409_before_any_event(
    client_for: ClientFactory,
) -> None:
    """A client asking for events gets the refusal as an HTTP status, not inside a stream."""
    trace_id = await _paused_run(client_for, "waits")
    refused = await client_for("alice-token").post(
        "/v1/threads/waits/runs",
        json={"query": "hi"},
        headers={"Accept": "text/event-stream"},
    )
    assert refused.status_code == 409
    assert refused.headers["content-type"].startswith("application/json")
    assert trace_id in refused.json()["error"]["message"]


async def test_refused_run_leaves_the_paused_run_and_history_alone(
    client_for: ClientFactory, agent: AgentCore
) -> None:
    """After a refused run the thread still has one run waiting and no new turn."""
    trace_id = await _paused_run(client_for, "waits")
    before = await agent.conversation.get_messages("waits")
    await client_for("alice-token").post("/v1/threads/waits/runs", json={"query": "hi"})
    assert [run.trace_id for run in await agent.pending_runs("waits")] == [trace_id]
    assert await agent.conversation.get_messages("waits") == before


async def test_process_on_a_paused_thread_raises_a_usage_error_naming_the_run(
    client_for: ClientFactory, agent: AgentCore
) -> None:
    """`process` raises ThreadAwaitingApprovalError (a UsageError) carrying both ids."""
    trace_id = await _paused_run(client_for, "waits")
    with pytest.raises(ThreadAwaitingApprovalError) as raised:
        await agent.process(AgentProps("hi", "waits"))
    assert isinstance(raised.value, UsageError)
    assert (raised.value.thread_id, raised.value.trace_id) == ("waits", trace_id)
