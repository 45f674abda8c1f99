"""Request validation of the HTTP API over httpx's ASGI transport: whatever a client sends, the
answer is a typed 4xx naming the problem, never a 500, and nothing is run or saved."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from pes_agent import AgentCore
from pes_agent.server import create_app

from .conftest import ClientFactory, make_agent

JSON = {"Content-Type": "application/json"}

#: The endpoints that take a JSON body, each with a body it accepts.
BODY_ENDPOINTS: list[tuple[str, str, bytes]] = [
    ("POST", "/v1/threads/t1/runs", b'{"query": "hello"}'),
    ("PUT", "/v1/threads/t1/config", b'{"system_prompt": "be brief"}'),
    ("POST", "/v1/threads/t1/runs/tr-1/decisions", b'{"decisions": {"call_1": {"approve": true}}}'),
]


def error_of(response: Any) -> tuple[int, str]:
    """The status and error type of a JSON error answer (which must have exactly that shape)."""
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"type", "message"}, body
    assert body["error"]["message"]
    return response.status_code, str(body["error"]["type"])


async def nothing_saved(agent: AgentCore) -> None:
    """No thread was created, configured or run."""
    assert await agent.state.list_threads() == []


# -- bodies ------------------------------------------------------------------------------


def nested(depth: int) -> bytes:
    """A run body whose options nest `depth` objects inside llm_params.extra."""
    inner = b'{"a": ' * depth + b"1" + b"}" * depth
    return b'{"query": "pay please", "options": {"llm_params": {"extra": ' + inner + b"}}}"


@pytest.mark.parametrize(
    "body",
    [b"[" * 100_000 + b"]" * 100_000, nested(5_000), nested(200), nested(62)],
    ids=["too-deep-to-parse", "too-deep-in-options", "deeper-than-storage-reads", "65-levels"],
)
async def test_deeply_nested_json_is_a_400(
    client_for: ClientFactory, agent: AgentCore, body: bytes
) -> None:
    """JSON nested over 64 levels (well under the size limit) is refused as invalid JSON, not
    a server error; saved with a paused run it could not be read back, and no run waiting
    for approval on any thread could be listed."""
    client = client_for("admin-token")
    response = await client.post("/v1/threads/t1/runs", content=body, headers=JSON)
    assert error_of(response) == (400, "invalid_json")
    await nothing_saved(agent)
    assert (await client.get("/v1/approvals")).status_code == 200


async def test_json_nested_up_to_64_levels_is_accepted(client_for: ClientFactory) -> None:
    """A body nesting 64 levels in all (the body, options, llm_params, and 61 inside extra) is
    a valid request, and the run it pauses is listed."""
    client = client_for("admin-token")
    response = await client.post("/v1/threads/t1/runs", content=nested(61), headers=JSON)
    assert response.json()["metadata"]["status"] == "awaiting_approval"
    assert len((await client.get("/v1/approvals")).json()["runs"]) == 1


@pytest.mark.parametrize("constant", [b"NaN", b"Infinity", b"-Infinity"])
async def test_non_standard_json_numbers_are_refused(
    client_for: ClientFactory, agent: AgentCore, constant: bytes
) -> None:
    """NaN and Infinity are not JSON (RFC 8259): a body holding one is invalid JSON."""
    body = b'{"query": "x", "options": {"llm_params": {"temperature": ' + constant + b"}}}"
    response = await client_for("admin-token").post(
        "/v1/threads/t1/runs", content=body, headers=JSON
    )
    assert error_of(response) == (400, "invalid_json")
    await nothing_saved(agent)


@pytest.mark.parametrize(("method", "path", "body"), BODY_ENDPOINTS)
@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"],
)
async def test_a_body_that_is_not_sent_as_json_is_415(
    client_for: ClientFactory,
    agent: AgentCore,
    method: str,
    path: str,
    body: bytes,
    content_type: str | None,
) -> None:
    """A body must come as application/json: the types a cross-site form or script may send
    without asking first (text/plain, form encoding, none) are refused, so a web page cannot
    make a browser start runs on a server without a token."""
    headers = {"Content-Type": content_type} if content_type else {}
    client = client_for("admin-token")
    response = await client.request(method, path, content=body, headers=headers)
    assert error_of(response) == (415, "unsupported_media_type")
    assert "application/json" in response.json()["error"]["message"]
    await nothing_saved(agent)


@pytest.mark.parametrize(
    "content_type",
    ["application/json; charset=utf-8", "APPLICATION/JSON", "application/vnd.api+json"],
)
async def test_json_media_types_with_parameters_or_a_suffix_are_json(
    client_for: ClientFactory, content_type: str
) -> None:
    """application/json with a charset, in any case, and +json types are accepted."""
    response = await client_for("admin-token").put(
        "/v1/threads/t1/config",
        content=b'{"history_limit": 3}',
        headers={"Content-Type": content_type},
    )
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/threads/t1/config", {"enabeld_tools": []}, "enabeld_tools"),
        ("/v1/threads/t1/config", {"system_prompt": "x", "colour": "red"}, "colour"),
    ],
)
async def test_unknown_config_fields_are_422_and_nothing_is_saved(
    client_for: ClientFactory, agent: AgentCore, path: str, body: dict[str, Any], field: str
) -> None:
    """A misspelt ThreadConfig field is refused by name rather than dropped: the client would
    believe its tools were switched off."""
    response = await client_for("admin-token").put(path, json=body)
    assert error_of(response) == (422, "validation_error")
    assert field in response.json()["error"]["message"]
    assert await agent.state.get_thread_config("t1") is None


@pytest.mark.parametrize(
    ("options", "where"),
    [
        ({"enabeld_tools": []}, "options.enabeld_tools"),
        ({"llm_params": {"temprature": 0.1}}, "options.llm_params.temprature"),
    ],
)
async def test_unknown_run_option_fields_are_422_and_nothing_runs(
    client_for: ClientFactory, agent: AgentCore, options: dict[str, Any], where: str
) -> None:
    """A misspelt run option, at any depth, is refused by its path and no run starts."""
    response = await client_for("admin-token").post(
        "/v1/threads/t1/runs", json={"query": "hello", "options": options}
    )
    assert error_of(response) == (422, "validation_error")
    assert where in response.json()["error"]["message"]
    await nothing_saved(agent)


@pytest.mark.parametrize(
    ("method", "path", "body", "where"),
    [
        ("PUT", "/v1/threads/t1/config", {"history_limit": False}, "history_limit"),
        ("PUT", "/v1/threads/t1/config", {"history_limit": "5"}, "history_limit"),
        (
            "POST",
            "/v1/threads/t1/runs",
            {"query": "q", "options": {"max_tool_calls": "2"}},
            "max_tool_calls",
        ),
        (
            "POST",
            "/v1/threads/t1/runs",
            {"query": "q", "options": {"tool_timeout_s": True}},
            "tool_timeout_s",
        ),
    ],
    ids=["false-as-history-limit", "string-as-history-limit", "string-as-count", "true-as-seconds"],
)
async def test_numbers_sent_as_bools_or_strings_are_422_and_nothing_is_saved(
    client_for: ClientFactory,
    agent: AgentCore,
    method: str,
    path: str,
    body: dict[str, Any],
    where: str,
) -> None:
    """`false` or `"5"` where the API takes a number is refused by name, not stored as 0 or
    5: the document says integer, and a client sending something else has a bug to see."""
    response = await client_for("admin-token").request(method, path, json=body)
    assert error_of(response) == (422, "validation_error")
    assert where in response.json()["error"]["message"]
    await nothing_saved(agent)


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"decisions": []},
        {"decisions": {"call_1": {}}},
        {"decisions": {"call_1": {"approve": "perhaps"}}},
        {"decisions": {"call_1": {"approve": "true"}}},
        {"decisions": {"call_1": {"approve": 1}}},
        {"decisions": {"call_1": {"approve": True, "why": "ok"}}},
        {"decisions": {"call_1": {"approve": False, "reason": "r" * 3000}}},
        {"decisions": {"call_1": {"approve": True}}, "extra": 1},
    ],
    ids=[
        "empty",
        "list",
        "no-approve",
        "not-bool",
        "bool-as-string",
        "bool-as-number",
        "unknown-field",
        "long-reason",
        "top-extra",
    ],
)
async def test_invalid_decisions_are_422_and_the_run_stays_paused(
    client_for: ClientFactory, agent: AgentCore, body: dict[str, Any]
) -> None:
    """A decisions body of the wrong shape is a 422, and the paused run still waits."""
    client = client_for("admin-token")
    paused = (await client.post("/v1/threads/p/runs", json={"query": "pay please"})).json()
    trace_id = paused["metadata"]["trace_id"]
    response = await client.post(f"/v1/threads/p/runs/{trace_id}/decisions", json=body)
    assert error_of(response) == (422, "validation_error")
    assert [run.trace_id for run in await agent.pending_runs("p")] == [trace_id]


async def test_a_decision_on_a_run_of_another_thread_is_404(client_for: ClientFactory) -> None:
    """Decisions name the run's own thread: the same trace id under another thread is no run
    waiting there."""
    client = client_for("admin-token")
    paused = (await client.post("/v1/threads/p/runs", json={"query": "pay please"})).json()
    trace_id = paused["metadata"]["trace_id"]
    response = await client.post(
        f"/v1/threads/elsewhere/runs/{trace_id}/decisions",
        json={"decisions": {"call_1": {"approve": True}}},
    )
    assert error_of(response) == (404, "run_not_waiting")


# -- body size ----------------------------------------------------------------------------


async def chunked(body: bytes) -> AsyncIterator[bytes]:
    """`body` in 64-byte pieces, sent without a Content-Length (chunked)."""
    for start in range(0, len(body), 64):
        yield body[start : start + 64]


@pytest.mark.parametrize(("method", "path", "body"), BODY_ENDPOINTS)
@pytest.mark.parametrize("framing", ["content-length", "chunked"])
async def test_every_body_over_the_limit_is_413(
    client_for: ClientFactory,
    agent: AgentCore,
    method: str,
    path: str,
    body: bytes,
    framing: str,
) -> None:
    """Each endpoint taking a body refuses one over max_body_bytes, whether it declares its
    length or streams it, before parsing it."""
    client = client_for("admin-token", max_body_bytes=200)
    padded = body[:-1] + b', "padding": "' + b"x" * 300 + b'"}'
    content: bytes | AsyncIterator[bytes] = (
        padded if framing == "content-length" else chunked(padded)
    )
    response = await client.request(method, path, content=content, headers=JSON)
    assert error_of(response) == (413, "body_too_large")
    assert "200 bytes" in response.json()["error"]["message"]
    await nothing_saved(agent)


@pytest.mark.parametrize("value", [b"abc", b"\xb2", b"-1"])
async def test_a_content_length_that_is_no_number_is_not_a_crash(
    client_for: ClientFactory, value: bytes
) -> None:
    """A Content-Length that is not a run of ASCII digits is ignored: the body is measured
    as it arrives."""
    response = await client_for("admin-token").put(
        "/v1/threads/t1/config",
        content=b'{"history_limit": 3}',
        headers=[(b"Content-Type", b"application/json"), (b"Content-Length", value)],
    )
    assert response.status_code == 200, response.text


# -- query parameters and path ids --------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/threads/t1/messages", "/v1/threads/t1/observations"])
@pytest.mark.parametrize(
    "limit",
    ["-1", "abc", "1.5", "", " 2", "0x10", "\u00b2", "\u0663"],
    ids=["negative", "word", "fraction", "empty", "space", "hex", "superscript", "arabic-indic"],
)
async def test_a_limit_that_is_no_non_negative_integer_is_400(
    client_for: ClientFactory, path: str, limit: str
) -> None:
    """limit must be a plain non-negative integer in ASCII digits (Unicode digits such as '²'
    are digits to str.isdigit but no number to int())."""
    response = await client_for("admin-token").get(path, params={"limit": limit})
    assert error_of(response) == (400, "invalid_parameter")
    assert "limit" in response.json()["error"]["message"]


@pytest.mark.parametrize("digits", [40, 5000])
async def test_a_huge_limit_means_everything(client_for: ClientFactory, digits: int) -> None:
    """A limit larger than any store's integers, even one too long for int() to read, gives
    every message and observation rather than an error."""
    client = client_for("admin-token")
    await client.post("/v1/threads/t1/runs", json={"query": "hello"})
    for path in ["messages", "observations"]:
        response = await client.get(f"/v1/threads/t1/{path}", params={"limit": "9" * digits})
        assert response.status_code == 200, path
        everything = (await client.get(f"/v1/threads/t1/{path}")).json()[path]
        assert response.json()[path] == everything


async def test_observations_page_through_with_limit_and_after(client_for: ClientFactory) -> None:
    """Pages of `limit` observations chained by `next_after` give each observation once, in
    order; the last page's cursor is where to go on from later."""
    client = client_for("admin-token")
    await client.post("/v1/threads/t1/runs", json={"query": "hello"})
    everything = (await client.get("/v1/threads/t1/observations")).json()["observations"]
    seen: list[str] = []
    params: dict[str, Any] = {"limit": 2}
    for _ in range(len(everything)):
        page = (await client.get("/v1/threads/t1/observations", params=params)).json()
        if not page["observations"]:
            break
        assert len(page["observations"]) <= 2
        seen += [o["id"] for o in page["observations"]]
        params["after"] = page["next_after"]
    assert seen == [o["id"] for o in everything]
    assert params["after"] == everything[-1]["id"]


@pytest.mark.parametrize("kind", ["NOPE", "", "plan,final_response"])
async def test_an_unknown_observation_type_is_400_listing_the_types(
    client_for: ClientFactory, kind: str
) -> None:
    """type must name observation types (repeat the parameter for several)."""
    response = await client_for("admin-token").get(
        "/v1/threads/t1/observations", params={"type": kind}
    )
    assert error_of(response) == (400, "invalid_parameter")
    assert "FINAL_RESPONSE" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    "thread_id",
    ["%20", "%20%20", "a%0Ab", "a%0Db", "a%00b", "a%09b", "x" * 201, "pes-agent-server:worker:w"],
    ids=["space", "spaces", "newline", "return", "nul", "tab", "too-long", "reserved"],
)
async def test_unusable_thread_ids_are_400_and_nothing_is_saved(
    client_for: ClientFactory, agent: AgentCore, thread_id: str
) -> None:
    """Blank ids, ids with control characters (which would forge lines in logs and SSE) or
    over 200 characters, and reserved ids are refused before anything is stored."""
    client = client_for("admin-token")
    ran = await client.post(f"/v1/threads/{thread_id}/runs", json={"query": "hello"})
    assert error_of(ran) == (400, "invalid_thread_id")
    configured = await client.put(f"/v1/threads/{thread_id}/config", json={})
    assert error_of(configured) == (400, "invalid_thread_id")
    await nothing_saved(agent)


@pytest.mark.parametrize("path", ["/v1/runs/tr-1/events", "/v1/threads/t1/runs"])
async def test_a_flag_that_is_not_true_or_false_is_400(
    client_for: ClientFactory, agent: AgentCore, path: str
) -> None:
    """cancel_on_disconnect takes true/false (or 1/0); anything else is a 400."""
    client = client_for("admin-token")
    params = {"cancel_on_disconnect": "maybe"}
    if path.endswith("/runs"):
        response = await client.post(path, params=params, json={"query": "hello"})
    else:
        response = await client.get(path, params=params)
    assert error_of(response) == (400, "invalid_parameter")


async def test_a_refused_run_request_runs_nothing(
    client_for: ClientFactory, agent: AgentCore
) -> None:
    """A run request answered with a 4xx starts no run: nothing is saved on the thread."""
    client = client_for("admin-token")
    response = await client.post(
        "/v1/threads/t1/runs", params={"cancel_on_disconnect": "maybe"}, json={"query": "hello"}
    )
    assert response.status_code == 400
    await asyncio.sleep(0.3)  # a run started anyway would have recorded its plan by now
    assert await agent.observations.get_observations("t1") == []
    assert await agent.conversation.get_messages("t1") == []


@pytest.mark.parametrize("last_event_id", ["\u00b2", "9" * 5000])
async def test_a_last_event_id_that_is_no_event_number_is_not_a_crash(
    client_for: ClientFactory, last_event_id: str
) -> None:
    """Following a run with a Last-Event-ID that names no event replays it from the start."""
    client = client_for("admin-token")
    ran = await client.post("/v1/threads/t1/runs", json={"query": "hello"})
    trace_id = ran.json()["metadata"]["trace_id"]
    response = await client.get(
        f"/v1/runs/{trace_id}/events",
        headers=[(b"Last-Event-ID", last_event_id.encode("latin-1", "replace"))],
    )
    assert response.status_code == 200


# -- routes and failures -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "status", "kind"),
    [
        ("GET", "/v2/threads", 404, "not_found"),
        ("GET", "/v1/threads/t1/nothing", 404, "not_found"),
        ("GET", "/v1/runs/tr-1", 404, "not_found"),
        ("PATCH", "/v1/threads", 405, "method_not_allowed"),
        ("DELETE", "/v1/threads", 405, "method_not_allowed"),
        ("POST", "/v1/threads/t1/messages", 405, "method_not_allowed"),
        ("GET", "/v1/runs/tr-1/cancel", 405, "method_not_allowed"),
        ("PUT", "/v1/runs/tr-1/events", 405, "method_not_allowed"),
        ("POST", "/openapi.json", 405, "method_not_allowed"),
    ],
)
async def test_unknown_routes_and_methods_are_json_errors(
    client_for: ClientFactory, method: str, path: str, status: int, kind: str
) -> None:
    """Unknown paths are 404 and known paths with another method 405, in the API's error shape."""
    response = await client_for("admin-token").request(method, path)
    assert error_of(response) == (status, kind)


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("PATCH", "/v1/threads", "GET, HEAD"),
        # Served by two routes (one per method): both count.
        ("DELETE", "/v1/threads/t1/runs", "GET, HEAD, POST"),
        ("POST", "/v1/threads/t1/config", "GET, HEAD, PUT"),
        ("TRACE", "/v1/runs/tr-1/cancel", "POST"),
    ],
)
async def test_a_405_names_every_method_of_the_path_in_allow(
    client_for: ClientFactory, method: str, path: str, allowed: str
) -> None:
    """A 405 carries an `Allow` header listing all the methods the path takes (RFC 9110)."""
    response = await client_for("admin-token").request(method, path)
    assert error_of(response) == (405, "method_not_allowed")
    assert response.headers["allow"] == allowed


async def test_a_failure_inside_the_server_is_a_json_500_without_details(
    client_for: ClientFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A stored record the server cannot read is a 500 in the API's error shape, which says
    nothing of the store (its path, its error) to the client; the server's log has them."""
    client = client_for("admin-token")
    assert (await client.put("/v1/threads/t1/config", json={})).status_code == 200
    with sqlite3.connect(tmp_path / "api.db") as db:
        db.execute("UPDATE thread_configs SET config = '{broken' WHERE thread_id = 't1'")
    response = await client.get("/v1/threads/t1/config")
    assert error_of(response) == (500, "internal_error")
    assert "api.db" not in response.text
    assert "damaged" not in response.text
    assert "server_request_failed" in caplog.text
    assert "damaged" in caplog.text


async def test_a_run_on_a_store_that_cannot_be_opened_is_a_503_naming_no_path(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A run on an SQLite file whose folder is missing is the server's fault, not a conflict:
    a 503 `storage_unavailable` (asked for JSON or a stream; so are a config, decisions and
    observations, not a 4xx) that names no path, while the server's log says what is wrong."""
    async with make_agent(tmp_path / "missing" / "api.db") as agent:
        transport = httpx.ASGITransport(app=create_app(agent))
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            answer = await client.post("/v1/threads/t1/runs", json={"query": "hello"})
            streamed = await client.post(
                "/v1/threads/t1/runs",
                json={"query": "hello"},
                headers={"Accept": "text/event-stream"},
            )
            observations = ("GET", "/v1/threads/t1/observations", b"")
            others = [
                await client.request(method, path, content=body, headers=JSON)
                for method, path, body in [*BODY_ENDPOINTS, observations]
            ]
    for response in (answer, streamed, *others):
        assert error_of(response) == (503, "storage_unavailable")
        assert "missing" not in response.text
    assert "server_storage_unusable" in caplog.text
    assert "does not exist" in caplog.text


async def test_a_thread_config_holding_an_api_key_is_422_without_the_key(
    client_for: ClientFactory, agent: AgentCore
) -> None:
    """Even where requests may choose the provider, a thread config with an API key is refused
    (storage never saves secrets) as a 422 that says what to do and does not quote the key."""
    client = client_for("admin-token", allow_provider_config=True)
    config = {"provider_config": {"provider": "openai", "model": "m", "api_key": "sk-SECRET-KEY"}}
    response = await client.put("/v1/threads/t1/config", json=config)
    assert error_of(response) == (422, "invalid_config")
    assert "api_key" in response.json()["error"]["message"]
    assert "SECRET" not in response.text
    assert await agent.state.get_thread_config("t1") is None


@pytest.mark.parametrize(
    "provider_config",
    [
        {"provider": "openai", "model": "m", "api_key": "sk-SECRET\nKEY"},
        {"provider": "openai", "model": "m", "api_key": "sk-SECRET-KEY", "timeout_s": "soon"},
        {"provider": "openai", "model": "", "api_key": "sk-SECRET-KEY"},
    ],
    ids=["control-character", "bad-timeout", "blank-model"],
)
async def test_an_invalid_provider_config_is_422_without_its_api_key(
    client_for: ClientFactory, agent: AgentCore, provider_config: dict[str, Any]
) -> None:
    """Where requests may choose the provider, a provider config that does not validate is a
    422 naming the field, and neither the run request's nor the config's error quotes the key."""
    client = client_for("admin-token", allow_provider_config=True)
    ran = await client.post(
        "/v1/threads/t1/runs",
        json={"query": "hello", "options": {"provider_config": provider_config}},
    )
    configured = await client.put(
        "/v1/threads/t1/config", json={"provider_config": provider_config}
    )
    for response in [ran, configured]:
        assert error_of(response) == (422, "validation_error")
        assert "provider_config" in response.json()["error"]["message"]
        assert "SECRET" not in response.text
    await nothing_saved(agent)
