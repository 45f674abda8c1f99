"""The HTTP API over httpx's ASGI transport: every endpoint, error case and auth rule."""

from __future__ import annotations

from typing import Any

import pytest

from pes_agent import AgentCore, ThreadConfig
from pes_agent.server.auth import OWNER_PREFIX

from .conftest import ClientFactory
from .sse import numbered, parse_sse


async def run(client: Any, thread: str, query: str = "hello", **body: Any) -> Any:
    return await client.post(f"/v1/threads/{thread}/runs", json={"query": query, **body})


def error_type(response: Any) -> str:
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"type", "message"}
    return str(body["error"]["type"])


async def test_post_run_returns_the_final_response_as_json(client_for: ClientFactory) -> None:
    """A JSON run answers with the AgentFinalResponse and its trace id in a header."""
    client = client_for("admin-token")
    response = await run(client, "t1")
    assert response.status_code == 200
    body = response.json()
    assert body["response"]["content"] == "The answer is 42."
    assert body["metadata"]["status"] == "success"
    assert response.headers["x-trace-id"] == body["metadata"]["trace_id"]


async def test_run_as_sse_through_asgi_ends_with_final(client_for: ClientFactory) -> None:
    """With Accept: text/event-stream the run streams typed events, ids rising, ending in final."""
    client = client_for("admin-token")
    response = await client.post(
        "/v1/threads/t1/runs",
        json={"query": "hello"},
        headers={"Accept": "text/event-stream"},
    )
    assert response.headers["content-type"].startswith("text/event-stream")
    events = numbered(parse_sse(response.text))
    names = [name for _, name, _ in events]
    assert names[0] == "run"
    assert names[-1] == "final"
    assert {"PLAN", "TOOL_EXECUTION", "token"} <= set(names)
    ids = [event_id for event_id, _, _ in events]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert events[-1][2]["metadata"]["status"] == "success"


async def test_runs_and_threads_listing_messages_and_observations(
    client_for: ClientFactory,
) -> None:
    """After a run the thread is listed, with its two messages and typed observations."""
    client = client_for("admin-token")
    await run(client, "t1")
    assert (await client.get("/v1/threads")).json() == {"threads": ["t1"]}
    messages = (await client.get("/v1/threads/t1/messages")).json()["messages"]
    assert [m["role"] for m in messages] == ["USER", "AI"]
    last = (await client.get("/v1/threads/t1/messages", params={"limit": 1})).json()
    assert [m["role"] for m in last["messages"]] == ["AI"]
    plans = (await client.get("/v1/threads/t1/observations", params={"type": "PLAN"})).json()
    assert plans["observations"]
    assert {o["type"] for o in plans["observations"]} == {"PLAN"}
    both = await client.get(
        "/v1/threads/t1/observations", params=[("type", "plan"), ("type", "FINAL_RESPONSE")]
    )
    assert {o["type"] for o in both.json()["observations"]} == {"PLAN", "FINAL_RESPONSE"}


async def test_observations_after_cursor_returns_only_later_ones(
    client_for: ClientFactory,
) -> None:
    """`after` is an observation id: only what was recorded after it comes back; one that
    names no observation of the thread is a 404 (an unknown resource, not a malformed
    request: any string is a well-formed cursor)."""
    client = client_for("admin-token")
    await run(client, "t1")
    everything = (await client.get("/v1/threads/t1/observations")).json()["observations"]
    page = await client.get("/v1/threads/t1/observations", params={"after": everything[1]["id"]})
    assert [o["id"] for o in page.json()["observations"]] == [o["id"] for o in everything[2:]]
    assert page.json()["next_after"] == everything[-1]["id"]
    filtered = await client.get(
        "/v1/threads/t1/observations",
        params={"after": everything[0]["id"], "type": "FINAL_RESPONSE"},
    )
    assert [o["type"] for o in filtered.json()["observations"]] == ["FINAL_RESPONSE"]
    bad = await client.get("/v1/threads/t1/observations", params={"after": "nope"})
    assert bad.status_code == 404
    assert error_type(bad) == "cursor_not_found"


async def test_put_and_get_config_then_delete_thread(
    client_for: ClientFactory, agent: AgentCore
) -> None:
    """PUT config saves a ThreadConfig; DELETE removes the thread and its data."""
    client = client_for("admin-token")
    put = await client.put("/v1/threads/t2/config", json={"enabled_tools": ["look"]})
    assert put.status_code == 200
    assert await agent.state.get_thread_config("t2") == ThreadConfig(enabled_tools=["look"])
    got = await client.get("/v1/threads/t2/config")
    assert got.json()["enabled_tools"] == ["look"]
    assert (await client.delete("/v1/threads/t2")).status_code == 204
    assert await agent.state.get_thread_config("t2") is None
    assert (await client.get("/v1/threads/t2/config")).status_code == 404


@pytest.mark.parametrize(
    ("body", "status", "kind"),
    [
        (b"{not json", 400, "invalid_json"),
        (b"[1, 2]", 400, "invalid_body"),
        (b'{"query": ""}', 422, "validation_error"),
        (b'{"query": "hi", "surprise": 1}', 422, "validation_error"),
        (b'{"query": "hi", "options": {"history_limit": "many"}}', 422, "validation_error"),
        (b'{"query": "hi", "trace_id": "has spaces"}', 422, "validation_error"),
    ],
)
async def test_invalid_run_bodies_get_clear_4xx_errors(
    client_for: ClientFactory, body: bytes, status: int, kind: str
) -> None:
    """Malformed or invalid bodies are refused with a typed JSON error naming the problem."""
    client = client_for("admin-token")
    response = await client.post(
        "/v1/threads/t1/runs", content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == status
    assert error_type(response) == kind
    assert response.json()["error"]["message"]


async def test_validation_message_names_the_field(client_for: ClientFactory) -> None:
    """A 422 says which field is wrong."""
    response = await run(client_for("admin-token"), "t1", options={"history_limit": -1})
    assert response.status_code == 422
    assert "options.history_limit" in response.json()["error"]["message"]


async def test_bad_parameters_and_unknown_routes(client_for: ClientFactory) -> None:
    """Bad query parameters are 400s; unknown paths 404 and wrong methods 405, as JSON."""
    client = client_for("admin-token")
    limit = await client.get("/v1/threads/t1/messages", params={"limit": "-3"})
    assert limit.status_code == 400
    assert error_type(limit) == "invalid_parameter"
    kind = await client.get("/v1/threads/t1/observations", params={"type": "NOPE"})
    assert kind.status_code == 400
    assert "PLAN" in kind.json()["error"]["message"]
    assert error_type(await client.get("/v2/nothing")) == "not_found"
    wrong = await client.patch("/v1/threads")
    assert wrong.status_code == 405
    assert error_type(wrong) == "method_not_allowed"
    flag = await client.post(
        "/v1/threads/t1/runs", params={"cancel_on_disconnect": "maybe"}, json={"query": "x"}
    )
    assert flag.status_code == 400


async def test_reserved_thread_ids_are_refused(client_for: ClientFactory) -> None:
    """The owner records' thread ids cannot be read or written through the API."""
    client = client_for("admin-token")
    response = await client.get(f"/v1/threads/{OWNER_PREFIX}t1/messages")
    assert response.status_code == 400
    assert error_type(response) == "invalid_thread_id"


async def test_body_over_the_limit_is_413(client_for: ClientFactory) -> None:
    """A body larger than max_body_bytes is refused before it is parsed."""
    client = client_for("admin-token", max_body_bytes=100)
    response = await run(client, "t1", query="x" * 200)
    assert response.status_code == 413
    assert error_type(response) == "body_too_large"

    async def chunks() -> Any:
        for chunk in [b'{"query": "', b"y" * 150, b'"}']:
            yield chunk

    streamed = await client.post(
        "/v1/threads/t1/runs",
        content=chunks(),
        headers={"Content-Type": "application/json"},
    )
    assert streamed.status_code == 413


async def test_provider_config_from_requests_is_forbidden_by_default(
    client_for: ClientFactory,
) -> None:
    """A request may not pick the provider (it could send the server's keys elsewhere)."""
    client = client_for("admin-token")
    options = {"provider_config": {"provider": "openai", "model": "m", "base_url": "http://evil"}}
    response = await run(client, "t1", options=options)
    assert response.status_code == 403
    assert error_type(response) == "provider_config_forbidden"
    config = await client.put("/v1/threads/t1/config", json=options)
    assert config.status_code == 403


async def test_openapi_document_lists_every_route(client_for: ClientFactory) -> None:
    """/openapi.json describes the API's paths and its models' schemas."""
    document = (await client_for().get("/openapi.json")).json()
    assert document["openapi"].startswith("3.")
    assert "/v1/threads/{thread_id}/runs" in document["paths"]
    assert "/v1/runs/{trace_id}/cancel" in document["paths"]
    assert {"RunRequest", "AgentFinalResponse", "ThreadConfig"} <= set(
        document["components"]["schemas"]
    )


# -- auth --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "header", [None, "Bearer wrong", "Basic alice-token", "Bearer ", "alice-token"]
)
async def test_requests_without_a_valid_token_are_401(
    client_for: ClientFactory, header: str | None
) -> None:
    """With tokens configured, a missing, wrong or malformed Authorization header is 401."""
    client = client_for()
    headers = {"Authorization": header} if header is not None else {}
    response = await client.get("/v1/threads", headers=headers)
    assert response.status_code == 401
    assert error_type(response) == "unauthorized"
    assert response.headers["www-authenticate"] == "Bearer"
    assert "alice-token" not in response.text


async def test_env_token_is_required_when_set(
    client_for: ClientFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PES_AGENT_API_TOKEN turns auth on when no tokens are given."""
    monkeypatch.setenv("PES_AGENT_API_TOKEN", "env-secret")
    assert (await client_for(tokens=None).get("/v1/threads")).status_code == 401
    good = client_for("env-secret", tokens=None)
    assert (await good.get("/v1/threads")).status_code == 200


async def test_no_tokens_means_no_auth(
    client_for: ClientFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without tokens and without the environment variable, requests need no token."""
    monkeypatch.delenv("PES_AGENT_API_TOKEN", raising=False)
    assert (await client_for(tokens=None).get("/v1/threads")).status_code == 200


async def test_scoped_tokens_never_see_other_users_threads(
    client_for: ClientFactory, agent: AgentCore
) -> None:
    """A user's token lists, reads, configures, runs and deletes only that user's threads."""
    alice, bob = client_for("alice-token"), client_for("bob-token")
    admin = client_for("admin-token")
    first = await run(alice, "a1", "secret plans")
    assert first.json()["metadata"]["user_id"] == "alice"
    assert (await run(bob, "b1")).status_code == 200
    assert (await alice.get("/v1/threads")).json() == {"threads": ["a1"]}
    assert (await bob.get("/v1/threads")).json() == {"threads": ["b1"]}
    assert (await admin.get("/v1/threads")).json() == {"threads": ["a1", "b1"]}
    for method, path in [
        ("GET", "/v1/threads/a1/messages"),
        ("GET", "/v1/threads/a1/observations"),
        ("GET", "/v1/threads/a1/config"),
        ("GET", "/v1/threads/a1/events"),
        ("DELETE", "/v1/threads/a1"),
    ]:
        response = await bob.request(method, path)
        assert response.status_code == 404, path
        assert "secret" not in response.text
    assert (await run(bob, "a1")).status_code == 404
    assert (await bob.put("/v1/threads/a1/config", json={})).status_code == 404
    assert len(await agent.conversation.get_messages("a1")) == 2
    assert (await alice.get("/v1/threads/a1/messages")).status_code == 200


async def test_scoped_token_cannot_take_over_an_existing_unowned_thread(
    client_for: ClientFactory,
) -> None:
    """A thread made by an unscoped caller is not claimed by the first scoped user to ask."""
    admin, alice = client_for("admin-token"), client_for("alice-token")
    await run(admin, "shared")
    assert (await run(alice, "shared")).status_code == 404
    assert (await alice.get("/v1/threads/shared/messages")).status_code == 404


async def test_scoped_token_cannot_run_as_another_user(client_for: ClientFactory) -> None:
    """A scoped token's body may not name a different user_id; an unscoped one may."""
    response = await run(client_for("alice-token"), "a1", user_id="bob")
    assert response.status_code == 403
    assert error_type(response) == "user_id_forbidden"
    named = await run(client_for("admin-token"), "x1", user_id="carol")
    assert named.json()["metadata"]["user_id"] == "carol"


async def test_cors_is_off_by_default_and_on_for_listed_origins(
    client_for: ClientFactory,
) -> None:
    """No CORS headers unless the origin is listed in cors_origins."""
    preflight = {
        "Origin": "https://app.example",
        "Access-Control-Request-Method": "POST",
    }
    closed = await client_for().options("/v1/threads", headers=preflight)
    assert "access-control-allow-origin" not in closed.headers
    opened = await client_for(cors_origins=["https://app.example"]).options(
        "/v1/threads", headers=preflight
    )
    assert opened.headers["access-control-allow-origin"] == "https://app.example"


async def test_usage_limits_in_run_options_and_thread_config_stop_the_run(
    client_for: ClientFactory,
) -> None:
    """A run's `options.usage_limits` and a thread config's `usage_limits` are enforced: the
    run answers as an error naming the limit, with a budget ERROR and no message saved; the
    thread's limit holds against a call asking for more."""
    client = client_for("admin-token")
    body = await run(client, "t1", options={"usage_limits": {"requests": 1}})
    assert body.status_code == 200
    metadata = body.json()["metadata"]
    assert (metadata["status"], metadata["llm_calls"]) == ("error", 1)
    assert metadata["error"].startswith("usage limit reached: requests: 1 used, limit 1")
    assert (await client.get("/v1/threads/t1/messages")).json()["messages"] == []
    errors = (await client.get("/v1/threads/t1/observations", params={"type": "ERROR"})).json()
    assert [o["content"]["phase"] for o in errors["observations"]] == ["budget"]

    configured = await client.put("/v1/threads/t2/config", json={"usage_limits": {"tool_calls": 0}})
    assert configured.status_code == 200
    assert (await client.get("/v1/threads/t2/config")).json()["usage_limits"]["tool_calls"] == 0
    wider = {"usage_limits": {"tool_calls": 5}}
    metadata = (await run(client, "t2", options=wider)).json()["metadata"]
    assert metadata["error"].startswith("usage limit reached: tool_calls: 0 used, limit 0")
