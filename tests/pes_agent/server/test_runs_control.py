"""Cancelling runs and deciding paused ones through the API (ASGI transport)."""

from __future__ import annotations

import asyncio
from typing import Any

from pes_agent import AgentCore
from pes_agent.server import create_app

from .conftest import TOKENS, ClientFactory


async def start_napping_run(client: Any, trace_id: str) -> asyncio.Task[Any]:
    """Starts a run on thread `t` that naps in its tool, and returns (the task answering its
    request) once the run has recorded something."""
    running = asyncio.create_task(
        client.post("/v1/threads/t/runs", json={"query": "nap please", "trace_id": trace_id})
    )
    for _ in range(200):
        events = await client.get("/v1/threads/t/observations")
        if any(o["trace_id"] == trace_id for o in events.json()["observations"]):
            return running
        await asyncio.sleep(0.01)
    raise AssertionError("the run never started")


async def test_cancel_a_running_run_reports_cancelled(
    client_for: ClientFactory, agent: AgentCore
) -> None:
    """POST /v1/runs/{trace_id}/cancel stops an executing run: status cancelled, no turn saved."""
    client = client_for("admin-token")
    running = await start_napping_run(client, "tr-1")
    cancelled = await client.post("/v1/runs/tr-1/cancel")
    assert cancelled.status_code == 200
    assert cancelled.json()["was"] == "running"
    assert cancelled.json()["response"]["metadata"]["status"] == "cancelled"
    answered = await running
    assert answered.json()["metadata"]["status"] == "cancelled"
    assert await agent.conversation.get_messages("t") == []


async def test_cancel_answers_the_figures_and_query_the_run_list_shows(
    client_for: ClientFactory,
) -> None:
    """The cancel answer counts the model and tool calls the run made, and its duration, as
    the run list does; both name the run's query."""
    client = client_for("admin-token")
    running = await start_napping_run(client, "tr-f")
    for _ in range(500):
        called = await client.get(
            "/v1/threads/t/observations", params={"type": "TOOL_CALL", "trace_id": "tr-f"}
        )
        if called.json()["observations"]:
            break
        await asyncio.sleep(0.01)
    cancelled = (await client.post("/v1/runs/tr-f/cancel")).json()
    await running
    metadata = cancelled["response"]["metadata"]
    [listed] = (await client.get("/v1/threads/t/runs")).json()["runs"]
    assert listed["status"] == metadata["status"] == "cancelled"
    assert (metadata["llm_calls"], metadata["tool_calls"]) == (1, 1)
    assert (listed["llm_calls"], listed["tool_calls"]) == (1, 1)
    assert metadata["total_duration_ms"] == listed["duration_ms"] > 0
    assert listed["query"] == cancelled["query"] == "nap please"


async def test_cancel_unknown_run_is_404(client_for: ClientFactory) -> None:
    """Cancelling a trace id nobody runs or waits on is a 404 JSON error."""
    response = await client_for("admin-token").post("/v1/runs/nothing/cancel")
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "run_not_found"


async def test_paused_run_is_listed_decided_and_resumed(
    client_for: ClientFactory, agent: AgentCore
) -> None:
    """A paused run is listed in /v1/approvals, blocks new runs, and resumes on approval."""
    client = client_for("alice-token")
    paused = await client.post("/v1/threads/p/runs", json={"query": "pay please"})
    meta = paused.json()["metadata"]
    assert meta["status"] == "awaiting_approval"
    assert [p["call_id"] for p in meta["pending_approvals"]] == ["call_1"]
    trace_id = meta["trace_id"]
    listed = (await client.get("/v1/approvals")).json()["runs"]
    assert [(r["thread_id"], r["trace_id"]) for r in listed] == [("p", trace_id)]
    assert (await client_for("bob-token").get("/v1/approvals")).json()["runs"] == []
    blocked = await client.post("/v1/threads/p/runs", json={"query": "hello"})
    assert blocked.status_code == 409
    assert blocked.json()["error"]["type"] == "awaiting_approval"
    path = f"/v1/threads/p/runs/{trace_id}/decisions"
    unknown = await client.post(path, json={"decisions": {"call_9": {"approve": True}}})
    assert unknown.status_code == 422
    assert (await client.post(path, json={"decisions": {}})).status_code == 422
    bob = await client_for("bob-token").post(
        path, json={"decisions": {"call_1": {"approve": True}}}
    )
    assert bob.status_code == 404
    resumed = await client.post(path, json={"decisions": {"call_1": {"approve": True}}})
    assert resumed.status_code == 200
    assert resumed.json()["metadata"]["status"] == "success"
    assert resumed.json()["metadata"]["trace_id"] == trace_id
    assert (await client.get("/v1/approvals")).json()["runs"] == []
    again = await client.post(path, json={"decisions": {"call_1": {"approve": True}}})
    assert again.status_code == 404


async def test_denied_call_resumes_with_its_reason(client_for: ClientFactory) -> None:
    """A denial with a reason resumes the run; the pay call ends as an error naming it."""
    client = client_for("admin-token")
    paused = (await client.post("/v1/threads/d/runs", json={"query": "pay please"})).json()
    trace_id = paused["metadata"]["trace_id"]
    resumed = await client.post(
        f"/v1/threads/d/runs/{trace_id}/decisions",
        json={"decisions": {"call_1": {"approve": False, "reason": "too dear"}}},
    )
    assert resumed.json()["metadata"]["status"] == "partial"
    executions = await client.get(
        "/v1/threads/d/observations", params={"type": "TOOL_EXECUTION", "trace_id": trace_id}
    )
    assert "too dear" in executions.text


async def test_cancel_a_paused_run(client_for: ClientFactory, agent: AgentCore) -> None:
    """Cancelling a run waiting for approval drops it; the thread takes new runs again."""
    client = client_for("admin-token")
    paused = (await client.post("/v1/threads/c/runs", json={"query": "pay please"})).json()
    trace_id = paused["metadata"]["trace_id"]
    cancelled = await client.post(f"/v1/runs/{trace_id}/cancel")
    assert cancelled.json()["was"] == "awaiting_approval"
    assert cancelled.json()["query"] == "pay please"
    assert await agent.pending_runs("c") == []
    again = await client.post("/v1/threads/c/runs", json={"query": "hello"})
    assert again.json()["metadata"]["status"] == "success"


async def test_deleting_a_thread_while_a_run_executes_is_409(
    client_for: ClientFactory, agent: AgentCore
) -> None:
    """A thread whose run is executing is not deleted under it: 409 run_in_progress, and the
    run saves its turn."""
    client = client_for("admin-token")
    running = await start_napping_run(client, "tr-d")
    refused = await client.delete("/v1/threads/t")
    assert refused.status_code == 409
    assert refused.json()["error"]["type"] == "run_in_progress"
    assert (await running).json()["metadata"]["status"] == "success"
    assert len(await agent.conversation.get_messages("t")) == 2
    assert (await client.delete("/v1/threads/t")).status_code == 204


async def test_cancelling_a_run_that_ended_is_409_run_finished(client_for: ClientFactory) -> None:
    """A finished run cannot be cancelled: 409 run_finished naming how it ended."""
    client = client_for("admin-token")
    done = await client.post("/v1/threads/t/runs", json={"query": "hello", "trace_id": "tr-e"})
    assert done.status_code == 200
    cancelled = await client.post("/v1/runs/tr-e/cancel")
    assert cancelled.status_code == 409
    assert cancelled.json()["error"]["type"] == "run_finished"
    assert "success" in cancelled.json()["error"]["message"]


async def test_repeating_a_run_request_with_its_trace_id_runs_it_once(
    client_for: ClientFactory, agent: AgentCore
) -> None:
    """A request naming the trace id of a run this server has on that thread answers with that
    run instead of running it again; on another thread that trace id is a 409."""
    client = client_for("admin-token")
    body = {"query": "hello", "trace_id": "tr-once"}
    first = await client.post("/v1/threads/t/runs", json=body)
    again = await client.post("/v1/threads/t/runs", json=body)
    assert again.status_code == 200
    assert again.json() == first.json()
    assert len(await agent.conversation.get_messages("t")) == 2
    elsewhere = await client.post("/v1/threads/other/runs", json=body)
    assert elsewhere.status_code == 409
    assert elsewhere.json()["error"]["type"] == "trace_id_in_use"
    assert await agent.conversation.get_messages("other") == []


async def test_a_trace_id_of_a_deleted_thread_runs_anew(
    client_for: ClientFactory, agent: AgentCore
) -> None:
    """Once its thread is deleted, a run this server kept is forgotten: a request naming its
    trace id runs again (before, it answered the old run, whose trace was gone: a 404)."""
    client = client_for("admin-token")
    body = {"query": "hello", "trace_id": "tr-deleted"}
    assert (await client.post("/v1/threads/t/runs", json=body)).status_code == 200
    assert (await client.delete("/v1/threads/t")).status_code == 204
    again = await client.post("/v1/threads/t/runs", json=body)
    assert again.status_code == 200
    assert len(await agent.conversation.get_messages("t")) == 2
    assert (await client.get("/v1/threads/t/runs/tr-deleted/trace")).status_code == 200


async def test_two_requests_at_once_with_one_trace_id_run_it_once(
    client_for: ClientFactory, agent: AgentCore
) -> None:
    """Two requests sent at once with the same trace id get the same answer from one run."""
    client = client_for("admin-token")
    body = {"query": "hello", "trace_id": "tr-twice"}
    first, second = await asyncio.gather(
        client.post("/v1/threads/t/runs", json=body), client.post("/v1/threads/t/runs", json=body)
    )
    assert first.status_code == second.status_code == 200
    assert first.json() == second.json()
    assert len(await agent.conversation.get_messages("t")) == 2
    finals = await agent.observations.get_observations(
        "t", types=["FINAL_RESPONSE"], trace_id="tr-twice"
    )
    assert len(finals) == 1


async def test_deciding_unknown_call_ids_names_the_pending_ones(client_for: ClientFactory) -> None:
    """Decisions for call ids that do not wait are a 422 naming them and the pending ones."""
    client = client_for("admin-token")
    paused = (await client.post("/v1/threads/p/runs", json={"query": "pay please"})).json()
    trace_id = paused["metadata"]["trace_id"]
    response = await client.post(
        f"/v1/threads/p/runs/{trace_id}/decisions",
        json={"decisions": {"call_1": {"approve": True}, "call_9": {"approve": True}}},
    )
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["type"] == "unknown_call_ids"
    assert "call_9" in error["message"]
    assert "pending: call_1" in error["message"]


async def test_shutdown_waits_for_work_left_by_clients_that_went_away(agent: AgentCore) -> None:
    """A cancel request spawned for a client that left still reaches the store when the app
    shuts down right after (before: it could run against an agent already closed)."""
    app = create_app(agent, tokens=TOKENS)
    landed = asyncio.Event()

    async def cancel_request() -> None:
        await asyncio.sleep(0.2)
        await agent.storage.get_agent_state("t")  # fails once the agent is closed
        landed.set()

    async with app.router.lifespan_context(app):
        app.state.api._spawn(cancel_request())
    assert landed.is_set()
