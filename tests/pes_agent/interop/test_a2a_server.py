"""The agent served over A2A, driven by a2a-sdk's own client against a real uvicorn server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from a2a.client import A2AClientError, Client
from a2a.helpers import get_artifact_text, get_data_parts, new_data_part, new_text_message
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    Role,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError

from pes_agent import AgentCore
from pes_agent.interop.a2a import A2ASettings
from tests.pes_agent.server.conftest import TOKENS, make_agent

from .a2a_support import a2a_client, serving

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def agent(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[AgentCore]:
    """One agent for the module's server, on its own SQLite file."""
    async with make_agent(tmp_path_factory.mktemp("a2a") / "a2a.db") as core:
        yield core


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def base_url(agent: AgentCore) -> AsyncIterator[str]:
    """The agent served once for the whole module, with the server tests' tokens."""
    settings = A2ASettings(name="Looker", description="Looks things up.")
    async with serving(agent, tokens=TOKENS, a2a=settings) as url:
        yield url


def ask(text: str, *, task_id: str = "", context_id: str = "") -> SendMessageRequest:
    """A user's text message, on a task or thread when given."""
    message = new_text_message(text, role=Role.ROLE_USER, task_id=task_id, context_id=context_id)
    return SendMessageRequest(message=message)


async def sent(client: Client, request: SendMessageRequest) -> list[StreamResponse]:
    return [event async for event in client.send_message(request)]


async def send(client: Client, request: SendMessageRequest) -> Task:
    """The task a (non-streaming) SendMessage answers with."""
    [response] = await sent(client, request)
    assert response.HasField("task"), response
    return response.task


async def test_the_card_names_the_agent_its_tools_auth_and_endpoint(base_url: str) -> None:
    """The public card: the name and description given, a skill per tool, the bearer
    scheme, and the absolute JSON-RPC URL for protocols 1.0 and 0.3."""
    async with httpx.AsyncClient() as http:
        card = (await http.get(f"{base_url}/.well-known/agent-card.json")).json()
    assert (card["name"], card["description"]) == ("Looker", "Looks things up.")
    assert {skill["id"] for skill in card["skills"]} == {"look", "nap", "pay"}
    assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
    interfaces = {(i["url"], i["protocolVersion"]) for i in card["supportedInterfaces"]}
    assert interfaces == {(f"{base_url}/a2a", "1.0"), (f"{base_url}/a2a", "0.3")}
    assert card["capabilities"]["streaming"] is True


async def test_send_returns_a_completed_task_on_the_thread_it_names(
    base_url: str, agent: AgentCore
) -> None:
    """SendMessage answers with a Task (not a bare message): completed, the answer as an
    artifact, its context id the thread the turn was saved on."""
    async with a2a_client(base_url, "alice-token") as client:
        task = await send(client, ask("what is it?", context_id="a2a-send"))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert task.context_id == "a2a-send"
    assert [get_artifact_text(a) for a in task.artifacts] == ["The answer is 42."]
    messages = await agent.conversation.get_messages("a2a-send")
    assert [m.content for m in messages] == ["what is it?", "The answer is 42."]


async def test_stream_goes_submitted_working_then_answer_and_completed(base_url: str) -> None:
    """SendStreamingMessage streams the task, its working status, the answer's artifact and
    the completed status, in that order."""
    async with a2a_client(base_url, "alice-token", streaming=True) as client:
        events = await sent(client, ask("stream it"))
    kinds = [event.WhichOneof("payload") for event in events]
    assert kinds == ["task", "status_update", "artifact_update", "status_update"]
    states = [e.status_update.status.state for e in events if e.HasField("status_update")]
    assert states == [TaskState.TASK_STATE_WORKING, TaskState.TASK_STATE_COMPLETED]
    assert get_artifact_text(events[2].artifact_update.artifact) == "The answer is 42."


async def test_get_reads_a_task_back_and_another_user_cannot(base_url: str) -> None:
    """GetTask gives the stored task to its owner; another user's token finds no such task."""
    async with a2a_client(base_url, "alice-token") as client:
        task = await send(client, ask("keep it"))
        again = await client.get_task(GetTaskRequest(id=task.id))
    assert again.status.state == TaskState.TASK_STATE_COMPLETED
    assert again.id == task.id
    assert [get_artifact_text(a) for a in again.artifacts] == ["The answer is 42."]
    async with a2a_client(base_url, "bob-token") as client:
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id=task.id))
        # Nor may bob send on alice's thread.
        with pytest.raises(InvalidParamsError, match="no such context"):
            await send(client, ask("mine now", context_id=task.context_id))


async def test_cancel_stops_the_run(base_url: str, agent: AgentCore) -> None:
    """A task whose run is executing is cancelled by CancelTask: it reads canceled, and the
    run ended without a turn saved."""
    async with a2a_client(base_url, "alice-token", polling=True) as client:
        task = await send(client, ask("nap please", context_id="a2a-cancel"))
        await asyncio.sleep(0.3)  # the nap (0.8 s) is under way
        cancelled = await client.cancel_task(CancelTaskRequest(id=task.id))
        again = await client.get_task(GetTaskRequest(id=task.id))
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    assert again.status.state == TaskState.TASK_STATE_CANCELED
    assert await agent.conversation.get_messages("a2a-cancel") == []


async def test_input_required_then_approve_completes_the_task(
    base_url: str, agent: AgentCore
) -> None:
    """A run paused for approval is an input-required task listing the pending call; the
    text "approve" on that task resumes the run, which completes it."""
    async with a2a_client(base_url, "alice-token") as client:
        task = await send(client, ask("pay please", context_id="a2a-pay"))
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        [data] = get_data_parts(task.status.message.parts)
        assert [(p["call_id"], p["tool_name"]) for p in data["pending"]] == [("call_1", "pay")]
        assert [run.trace_id for run in await agent.pending_runs("a2a-pay")] == [data["trace_id"]]
        done = await send(client, ask("approve", task_id=task.id))
    assert done.id == task.id
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert [get_artifact_text(a) for a in done.artifacts] == ["The answer is 42."]
    assert await agent.pending_runs("a2a-pay") == []
    observations = await agent.observations.get_observations("a2a-pay")
    outputs = [o.content.get("output") for o in observations if o.content.get("output")]
    assert "paid 5" in outputs


async def test_a_data_part_denies_by_call_id_and_a_vague_answer_asks_again(
    base_url: str, agent: AgentCore
) -> None:
    """A message deciding nothing leaves the task input-required, saying what to send; a
    data part {"decisions": {call_id: {"deny": reason}}} then denies the call."""
    async with a2a_client(base_url, "alice-token") as client:
        task = await send(client, ask("pay please", context_id="a2a-deny"))
        vague = await send(client, ask("hmm", task_id=task.id))
        assert vague.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, vague
        assert "decides nothing" in vague.status.message.parts[0].text
        decision = new_text_message("", role=Role.ROLE_USER, task_id=task.id)
        del decision.parts[:]
        decision.parts.append(new_data_part({"decisions": {"call_1": {"deny": "too dear"}}}))
        done = await send(client, SendMessageRequest(message=decision))
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    observations = await agent.observations.get_observations("a2a-deny")
    assert any("too dear" in str(o.content) for o in observations)
    assert not any(o.content.get("output") == "paid 5" for o in observations)


async def test_cancelling_an_input_required_task_cancels_the_paused_run(
    base_url: str, agent: AgentCore
) -> None:
    """CancelTask on a task waiting for approval ends the paused run too."""
    async with a2a_client(base_url, "alice-token") as client:
        task = await send(client, ask("pay please", context_id="a2a-drop"))
        cancelled = await client.cancel_task(CancelTaskRequest(id=task.id))
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    assert await agent.pending_runs("a2a-drop") == []


async def test_no_token_is_401_when_tokens_are_set(base_url: str) -> None:
    """The JSON-RPC endpoint sits behind the API's tokens (the card stays public)."""
    async with a2a_client(base_url, None) as client:
        with pytest.raises(A2AClientError, match="401"):
            await send(client, ask("let me in"))
    async with httpx.AsyncClient() as http:
        refused = await http.post(f"{base_url}/a2a", json={"jsonrpc": "2.0", "id": 1})
    assert refused.status_code == 401


async def test_a_client_speaking_0_3_is_answered_with_a_0_3_task(base_url: str) -> None:
    """The 0.3 method name message/send (no A2A-Version header) is answered in 0.3's shape."""
    body: dict[str, Any] = {
        "jsonrpc": "2.0",
        "id": "r1",
        "method": "message/send",
        "params": {
            "message": {
                "kind": "message",
                "messageId": "m1",
                "role": "user",
                "parts": [{"kind": "text", "text": "old style"}],
            }
        },
    }
    headers = {"Authorization": "Bearer alice-token"}
    async with httpx.AsyncClient(timeout=30) as http:
        answered = (await http.post(f"{base_url}/a2a", json=body, headers=headers)).json()
    result = answered["result"]
    assert result["kind"] == "task"
    assert result["status"]["state"] == "completed"
    assert result["artifacts"][0]["parts"][0]["text"] == "The answer is 42."


async def test_a_task_survives_a_server_restart_on_sqlite(tmp_path: Path) -> None:
    """A task paused for approval is found after the server and agent are replaced by new
    ones on the same SQLite file, and the decision sent to the new server completes it."""
    db = tmp_path / "restart.db"
    async with (
        make_agent(db) as first,
        serving(first, tokens=TOKENS) as url,
        a2a_client(url, "alice-token") as client,
    ):
        task = await send(client, ask("pay please", context_id="a2a-restart"))
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    async with (
        make_agent(db) as second,
        serving(second, tokens=TOKENS) as url,
        a2a_client(url, "alice-token") as client,
    ):
        found = await client.get_task(GetTaskRequest(id=task.id))
        assert found.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        done = await send(client, ask("approve", task_id=task.id))
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert [get_artifact_text(a) for a in done.artifacts] == ["The answer is 42."]
