"""Auth rules of the HTTP API over httpx's ASGI transport: every endpoint needs a token, and a
token scoped to a user finds another user's threads and runs exactly as if they did not exist."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from pes_agent import AgentCore
from pes_agent.errors import UsageError
from pes_agent.server import create_app
from pes_agent.server.auth import OWNER_PREFIX

from .conftest import ClientFactory

APPROVE = {"decisions": {"call_1": {"approve": True}}}

#: Every API endpoint, with a body it would accept: only the token can be what is wrong.
ENDPOINTS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "/v1/threads", None),
    ("GET", "/v1/approvals", None),
    ("POST", "/v1/threads/t1/runs", {"query": "hello"}),
    ("GET", "/v1/threads/t1/runs", None),
    ("GET", "/v1/threads/t1/runs/tr-1/trace", None),
    ("GET", "/v1/threads/t1/messages", None),
    ("GET", "/v1/threads/t1/observations", None),
    ("GET", "/v1/threads/t1/config", None),
    ("PUT", "/v1/threads/t1/config", {"system_prompt": "be brief"}),
    ("DELETE", "/v1/threads/t1", None),
    ("GET", "/v1/threads/t1/events", None),
    ("POST", "/v1/threads/t1/runs/tr-1/decisions", APPROVE),
    ("GET", "/v1/runs/tr-1/events", None),
    ("POST", "/v1/runs/tr-1/cancel", None),
]


def error_of(response: Any) -> tuple[int, str]:
    """The status and error type of a JSON error answer (which must have exactly that shape)."""
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"type", "message"}, body
    return response.status_code, str(body["error"]["type"])


@pytest.mark.parametrize(("method", "path", "body"), ENDPOINTS)
@pytest.mark.parametrize("header", [None, "Bearer not-a-token", "Bearer alice-token-but-longer"])
async def test_every_endpoint_refuses_a_missing_or_wrong_token(
    client_for: ClientFactory,
    agent: AgentCore,
    method: str,
    path: str,
    body: dict[str, Any] | None,
    header: str | None,
) -> None:
    """Without a valid bearer token each endpoint is a 401 that changes nothing and does not
    quote the token it was sent."""
    headers = {"Authorization": header} if header else {}
    response = await client_for().request(method, path, json=body, headers=headers)
    assert error_of(response) == (401, "unauthorized")
    assert response.headers["www-authenticate"] == "Bearer"
    assert "not-a-token" not in response.text
    assert "alice-token" not in response.text
    assert await agent.state.list_threads() == []


@pytest.mark.parametrize(
    ("method", "path", "content"),
    [
        ("POST", "/v1/threads/t1/runs", b"{not json"),
        ("PUT", "/v1/threads/t1/config", b'{"surprise": 1}'),
        ("POST", "/v1/threads/t1/runs/tr-1/decisions", b"[]"),
    ],
)
async def test_auth_is_checked_before_the_body(
    client_for: ClientFactory, method: str, path: str, content: bytes
) -> None:
    """A request without a token is a 401 even when its body is also wrong: nothing about the
    API's validation is told to a caller who is not let in."""
    response = await client_for().request(
        method, path, content=content, headers={"Content-Type": "application/json"}
    )
    assert error_of(response) == (401, "unauthorized")


async def test_openapi_and_console_need_no_token(client_for: ClientFactory) -> None:
    """The OpenAPI document and the console page hold no data: they are served without a token."""
    client = client_for()
    assert (await client.get("/openapi.json")).status_code == 200
    assert (await client.get("/")).status_code == 200


async def alice_with_a_finished_and_a_paused_run(client_for: ClientFactory) -> Any:
    """Alice's thread a1: a finished run tr-done, a secret config, and tr-paused waiting."""
    alice = client_for("alice-token")
    done = await alice.post(
        "/v1/threads/a1/runs", json={"query": "secret question", "trace_id": "tr-done"}
    )
    assert done.status_code == 200
    config = await alice.put("/v1/threads/a1/config", json={"system_prompt": "secret prompt"})
    assert config.status_code == 200
    paused = await alice.post(
        "/v1/threads/a1/runs", json={"query": "pay please, secret card", "trace_id": "tr-paused"}
    )
    assert paused.json()["metadata"]["status"] == "awaiting_approval"
    return alice


#: Bob's requests on alice's thread a1 (each must look like one on a thread that is not there).
THREAD_REQUESTS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "/v1/threads/{t}/messages", None),
    ("GET", "/v1/threads/{t}/observations", None),
    ("GET", "/v1/threads/{t}/observations?trace_id=tr-done", None),
    ("GET", "/v1/threads/{t}/config", None),
    ("PUT", "/v1/threads/{t}/config", {"system_prompt": "bob's now"}),
    ("GET", "/v1/threads/{t}/events", None),
    ("GET", "/v1/threads/{t}/runs", None),
    ("GET", "/v1/threads/{t}/runs/tr-done/trace", None),
    ("POST", "/v1/threads/{t}/runs", {"query": "hello"}),
    ("POST", "/v1/threads/{t}/runs/tr-paused/decisions", APPROVE),
    ("DELETE", "/v1/threads/{t}", None),
]

#: Bob's requests on alice's runs (each must look like one on a trace id nobody has).
RUN_REQUESTS: list[tuple[str, str]] = [
    ("GET", "/v1/runs/{r}/events"),
    ("POST", "/v1/runs/{r}/cancel"),
]


async def test_a_scoped_token_finds_no_thread_of_another_user(
    client_for: ClientFactory, agent: AgentCore
) -> None:
    """Every thread endpoint answers bob on alice's thread with 404 thread_not_found, as for a
    thread nobody made, reads nothing of alice's and changes nothing of hers."""
    alice = await alice_with_a_finished_and_a_paused_run(client_for)
    bob = client_for("bob-token")
    # Bob's own thread exists, so a 404 on it could never be an "unknown thread" answer.
    assert (await bob.post("/v1/threads/b1/runs", json={"query": "hello"})).status_code == 200
    for method, template, body in THREAD_REQUESTS:
        response = await bob.request(method, template.format(t="a1"), json=body)
        assert error_of(response) == (404, "thread_not_found"), (method, template)
        assert "secret" not in response.text
    assert (await bob.get("/v1/threads")).json() == {"threads": ["b1"]}
    assert (await bob.get("/v1/approvals")).json() == {"runs": []}
    assert (await bob.get("/v1/approvals", params={"thread_id": "a1"})).json() == {"runs": []}
    # Alice's thread is as she left it.
    assert len(await agent.conversation.get_messages("a1")) == 2
    config = await agent.state.get_thread_config("a1")
    assert config is not None
    assert config.system_prompt == "secret prompt"
    assert [run.trace_id for run in await agent.pending_runs("a1")] == ["tr-paused"]
    assert (await alice.get("/v1/threads/a1/messages")).status_code == 200


async def test_a_scoped_token_finds_no_run_of_another_user(client_for: ClientFactory) -> None:
    """Following or cancelling alice's finished or paused run as bob is answered exactly like
    a trace id that no run has: the answer tells bob nothing about whether the run exists."""
    alice = await alice_with_a_finished_and_a_paused_run(client_for)
    bob = client_for("bob-token")
    for method, template in RUN_REQUESTS:
        absent = await bob.request(method, template.format(r="tr-nobody"))
        assert error_of(absent) == (404, "run_not_found")
        for trace_id in ["tr-done", "tr-paused"]:
            response = await bob.request(method, template.format(r=trace_id))
            assert response.status_code == 404, (method, template, trace_id)
            assert response.json() == absent.json(), (method, template, trace_id)
    approvals = (await alice.get("/v1/approvals")).json()["runs"]
    assert [run["trace_id"] for run in approvals] == ["tr-paused"]


async def test_a_scoped_token_cannot_follow_or_cancel_a_running_run_of_another_user(
    client_for: ClientFactory,
) -> None:
    """While alice's run executes, bob's follow, cancel and delete of it are 404s as for
    nothing there, and her run goes on to its answer."""
    alice, bob = client_for("alice-token"), client_for("bob-token")
    running = asyncio.create_task(
        alice.post("/v1/threads/a2/runs", json={"query": "nap please", "trace_id": "tr-live"})
    )
    for _ in range(200):
        seen = await alice.get("/v1/threads/a2/observations", params={"trace_id": "tr-live"})
        if seen.status_code == 200 and seen.json()["observations"]:
            break
        await asyncio.sleep(0.01)
    for method, template in RUN_REQUESTS:
        absent = await bob.request(method, template.format(r="tr-nobody"))
        response = await bob.request(method, template.format(r="tr-live"))
        assert response.status_code == 404, (method, template)
        assert response.json() == absent.json(), (method, template)
    deleted = await bob.delete("/v1/threads/a2")
    assert error_of(deleted) == (404, "thread_not_found")
    answered = await running
    assert answered.json()["metadata"]["status"] == "success"


async def test_a_scoped_token_cannot_take_over_a_thread_holding_only_a_paused_run(
    client_for: ClientFactory, agent: AgentCore
) -> None:
    """A thread an unscoped caller left with a run waiting for approval (observations, no
    messages yet) is not free to claim: alice can neither configure nor run on it, nor see or
    approve its pending payment."""
    admin, alice = client_for("admin-token"), client_for("alice-token")
    paused = await admin.post("/v1/threads/shared/runs", json={"query": "pay please, card 4111"})
    trace_id = paused.json()["metadata"]["trace_id"]
    assert error_of(await alice.put("/v1/threads/shared/config", json={})) == (
        404,
        "thread_not_found",
    )
    ran = await alice.post("/v1/threads/shared/runs", json={"query": "hello"})
    assert error_of(ran) == (404, "thread_not_found")
    assert (await alice.get("/v1/approvals")).json() == {"runs": []}
    observations = await alice.get("/v1/threads/shared/observations")
    assert error_of(observations) == (404, "thread_not_found")
    decided = await alice.post(
        f"/v1/threads/shared/runs/{trace_id}/decisions",
        json=APPROVE,
    )
    assert error_of(decided) == (404, "thread_not_found")
    assert [run.trace_id for run in await agent.pending_runs("shared")] == [trace_id]


async def test_a_scoped_token_cannot_take_over_a_thread_holding_only_a_failed_run(
    client_for: ClientFactory, agent: AgentCore
) -> None:
    """A run that recorded observations and saved no turn (here: cancelled) still makes its
    thread someone's: a scoped user cannot claim it and read them."""
    admin, alice = client_for("admin-token"), client_for("alice-token")
    running = asyncio.create_task(
        admin.post("/v1/threads/left/runs", json={"query": "nap please", "trace_id": "tr-c"})
    )
    for _ in range(200):
        if await agent.observations.get_observations("left"):
            break
        await asyncio.sleep(0.01)
    assert (await admin.post("/v1/runs/tr-c/cancel")).status_code == 200
    await running
    assert await agent.conversation.get_messages("left") == []
    claimed = await alice.put("/v1/threads/left/config", json={})
    assert error_of(claimed) == (404, "thread_not_found")
    assert error_of(await alice.get("/v1/threads/left/observations")) == (
        404,
        "thread_not_found",
    )


async def test_a_deleted_threads_id_stays_with_its_user(client_for: ClientFactory) -> None:
    """After alice deletes her thread, bob cannot start one under its id (a feed alice still
    has open on it would show him); alice can start it again."""
    alice, bob = client_for("alice-token"), client_for("bob-token")
    assert (await alice.post("/v1/threads/main/runs", json={"query": "hi"})).status_code == 200
    assert (await alice.delete("/v1/threads/main")).status_code == 204
    assert (await alice.get("/v1/threads")).json() == {"threads": []}
    taken = await bob.post("/v1/threads/main/runs", json={"query": "hello"})
    assert error_of(taken) == (404, "thread_not_found")
    assert error_of(await bob.put("/v1/threads/main/config", json={})) == (
        404,
        "thread_not_found",
    )
    again = await alice.post("/v1/threads/main/runs", json={"query": "hi again"})
    assert again.status_code == 200
    messages = (await alice.get("/v1/threads/main/messages")).json()["messages"]
    assert [m["content"] for m in messages] == ["hi again", "The answer is 42."]


async def test_a_damaged_owner_record_hides_its_thread_from_scoped_callers_only(
    client_for: ClientFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """With bob's owner record damaged in the SQLite file, his thread is left out of every
    scoped listing (one warning each) and answers 404 to scoped callers, bob included, without
    being claimed; the listings still show alice's, and an unscoped caller still sees both."""
    alice, bob = client_for("alice-token"), client_for("bob-token")
    assert (await alice.post("/v1/threads/a1/runs", json={"query": "hi"})).status_code == 200
    assert (await bob.post("/v1/threads/b1/runs", json={"query": "pay please"})).status_code == 200
    with sqlite3.connect(tmp_path / "api.db") as db:
        db.execute(
            "UPDATE agent_states SET data = '{broken' WHERE thread_id = ?", (OWNER_PREFIX + "b1",)
        )
    assert (await alice.get("/v1/threads")).json() == {"threads": ["a1"]}
    assert (await bob.get("/v1/threads")).json() == {"threads": []}
    assert (await bob.get("/v1/approvals")).json() == {"runs": []}
    assert "server_owner_unreadable" in caplog.text
    for client in (alice, bob):
        for method, template, body in THREAD_REQUESTS:
            response = await client.request(method, template.format(t="b1"), json=body)
            assert error_of(response) == (404, "thread_not_found"), (method, template)
    admin = client_for("admin-token")
    assert (await admin.get("/v1/threads")).json() == {"threads": ["a1", "b1"]}
    assert len((await admin.get("/v1/approvals")).json()["runs"]) == 1


# -- the token table ---------------------------------------------------------------------


def test_a_single_string_of_tokens_is_refused(agent: AgentCore) -> None:
    """tokens="s3cret" (a string, not a list) is a usage error that does not quote it; it
    would otherwise accept each of its letters as a token."""
    with pytest.raises(UsageError, match=r"tokens=\[") as raised:
        create_app(agent, tokens="s3cret-value")
    assert "s3cret" not in str(raised.value)


async def test_a_letter_of_a_token_is_no_token(client_for: ClientFactory) -> None:
    """Only a whole configured token is accepted, not a part of one."""
    for guess in ["a", "alice", "alice-toke", "alice-token2", " alice-token x"]:
        response = await client_for().get(
            "/v1/threads", headers={"Authorization": f"Bearer {guess}"}
        )
        assert response.status_code == 401, guess


@pytest.mark.parametrize(
    "tokens", [[""], ["   "], {"": "alice"}, {"tok": ""}, {"tok": "  "}], ids=repr
)
def test_empty_tokens_and_user_ids_are_usage_errors(agent: AgentCore, tokens: Any) -> None:
    """An empty token, or a token scoped to an empty user id, is refused with a usage error."""
    with pytest.raises(UsageError):
        create_app(agent, tokens=tokens)


async def test_the_environment_token_is_taken_without_surrounding_whitespace(
    client_for: ClientFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PES_AGENT_API_TOKEN read from a file with its line break still matches the token."""
    monkeypatch.setenv("PES_AGENT_API_TOKEN", "env-secret\n")
    response = await client_for("env-secret", tokens=None).get("/v1/threads")
    assert response.status_code == 200
    assert (await client_for(tokens=None).get("/v1/threads")).status_code == 401


async def test_the_bearer_scheme_is_case_insensitive(client_for: ClientFactory) -> None:
    """'bearer' and 'BEARER' are the same scheme (RFC 7235)."""
    for scheme in ["bearer", "BEARER"]:
        response = await client_for().get(
            "/v1/threads", headers={"Authorization": f"{scheme} admin-token"}
        )
        assert response.status_code == 200, scheme


async def test_cors_answers_only_the_listed_origins(client_for: ClientFactory) -> None:
    """With cors_origins set, another origin's preflight is not allowed, while a listed
    origin may send the bearer header and read the trace id, without cookies."""
    client = client_for("admin-token", cors_origins=["https://app.example"])
    preflight = {
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type",
    }
    other = await client.options(
        "/v1/threads/t1/runs", headers={**preflight, "Origin": "https://evil.example"}
    )
    assert "access-control-allow-origin" not in other.headers
    listed = await client.options(
        "/v1/threads/t1/runs", headers={**preflight, "Origin": "https://app.example"}
    )
    assert listed.headers["access-control-allow-origin"] == "https://app.example"
    assert "authorization" in listed.headers["access-control-allow-headers"].lower()
    assert "access-control-allow-credentials" not in listed.headers
    ran = await client.post(
        "/v1/threads/t1/runs", json={"query": "hello"}, headers={"Origin": "https://app.example"}
    )
    assert ran.headers["access-control-allow-origin"] == "https://app.example"
    assert "x-trace-id" in ran.headers["access-control-expose-headers"].lower()
