"""The OpenAPI document against the app it describes: every route, method, path parameter and
schema reference, and the answers the document promises."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import jsonschema_rs
import pytest
from starlette.routing import Route

from pes_agent import AgentCore
from pes_agent._patterns import NOT_BLANK
from pes_agent.server import create_app
from pes_agent.server.openapi import openapi_document, thread_id_schema
from pes_agent.threads.ids import thread_id_problem

from .conftest import ClientFactory

#: Routes that are not part of the API the document describes.
#: The A2A routes are JSON-RPC and its agent card, described by the card and the A2A spec.
UNDOCUMENTED = {"/openapi.json", "/", "/console/{name}", "/a2a", "/.well-known/agent-card.json"}


def api_routes(agent: AgentCore) -> dict[str, set[str]]:
    """Each API path of an app over `agent`, with its methods (lower case, HEAD left out)."""
    routes: dict[str, set[str]] = {}
    for route in create_app(agent).routes:
        assert isinstance(route, Route)
        # Another protocol's route (AG-UI's) is that protocol's to describe.
        if route.path in UNDOCUMENTED or not route.include_in_schema:
            continue
        methods = {method.lower() for method in route.methods or ()} - {"head"}
        routes.setdefault(route.path, set()).update(methods)
    return routes


def test_every_route_and_method_is_documented(agent: AgentCore) -> None:
    """The document lists exactly the app's API paths, each with exactly its methods."""
    documented = {
        path: {method for method in item if method != "parameters"}
        for path, item in openapi_document()["paths"].items()
    }
    assert documented == api_routes(agent)


def test_every_path_parameter_is_declared() -> None:
    """Each operation declares the parameters its path names, as required path parameters."""
    for path, item in openapi_document()["paths"].items():
        named = set(re.findall(r"{(\w+)}", path))
        for method, operation in item.items():
            declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "path"}
            assert declared == named, (path, method)
            assert all(p["required"] for p in operation.get("parameters", []) if p["in"] == "path")


def test_every_schema_reference_resolves() -> None:
    """Every $ref in the document names a schema in its components."""
    document = openapi_document()
    refs: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                refs.add(node["$ref"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(document)
    schemas = document["components"]["schemas"]
    assert refs
    for ref in refs:
        assert ref.startswith("#/components/schemas/"), ref
        assert ref.removeprefix("#/components/schemas/") in schemas, ref


def test_every_operation_needs_the_bearer_token_and_may_answer_an_error() -> None:
    """Each operation names the bearer scheme and a 4XX answer in the API's error shape."""
    document = openapi_document()
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    for path, item in document["paths"].items():
        for method, operation in item.items():
            assert operation["security"] == [{"bearer": []}], (path, method)
            error = operation["responses"]["4XX"]["content"]["application/json"]["schema"]
            assert error == {"$ref": "#/components/schemas/ErrorBody"}, (path, method)


async def test_the_served_document_asks_for_a_token_only_when_the_app_does(
    client_for: ClientFactory,
) -> None:
    """An app without tokens serves a document whose operations need no auth (and that names
    no scheme); one with tokens, a document where every operation needs the bearer token."""
    open_document = (await client_for(tokens=[]).get("/openapi.json")).json()
    assert "securitySchemes" not in open_document["components"]
    for item in open_document["paths"].values():
        assert all("security" not in operation for operation in item.values())
    assert (await client_for(tokens=[]).get("/v1/threads")).status_code == 200
    guarded = (await client_for(tokens=["t"]).get("/openapi.json")).json()
    assert guarded["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    for item in guarded["paths"].values():
        assert all(operation["security"] == [{"bearer": []}] for operation in item.values())


async def test_the_documented_success_status_is_the_one_answered(
    client_for: ClientFactory,
) -> None:
    """Deleting a thread is documented as the 204 it answers; listing as the 200 it answers."""
    client = client_for("admin-token")
    delete = openapi_document()["paths"]["/v1/threads/{thread_id}"]["delete"]["responses"]
    assert (await client.delete("/v1/threads/t1")).status_code == 204
    assert "204" in delete
    assert "200" not in delete
    listed = openapi_document()["paths"]["/v1/threads"]["get"]["responses"]
    assert (await client.get("/v1/threads")).status_code == 200
    assert "200" in listed


def test_query_parameters_describe_what_the_api_accepts() -> None:
    """limit is a non-negative integer; type is a repeated observation type; approvals take an
    optional thread_id, under the rule of thread ids."""
    paths = openapi_document()["paths"]

    def query(path: str, name: str) -> dict[str, Any]:
        parameters = paths[path]["get"]["parameters"]
        return next(p for p in parameters if p["in"] == "query" and p["name"] == name)

    for path in ["/v1/threads/{thread_id}/messages", "/v1/threads/{thread_id}/observations"]:
        assert query(path, "limit")["schema"] == {"type": "integer", "minimum": 0}
    kinds = query("/v1/threads/{thread_id}/observations", "type")
    assert kinds["explode"] is True
    assert {"PLAN", "FINAL_RESPONSE"} <= set(kinds["schema"]["items"]["enum"])
    assert query("/v1/approvals", "thread_id")["schema"] == thread_id_schema()
    assert query("/v1/approvals", "thread_id")["required"] is False


#: Thread ids on either side of each part of the rule.
THREAD_IDS = [
    "t1",
    "a b",
    "é日本🙂",
    "x" * 200,
    "x" * 201,
    "",
    " ",
    "\t\n",
    "\xa0",
    "\u3000x",
    "\ufeff",
    "a\nb",
    "a\x00",
    "\x7f",
    "\x85",
    "a\u2028b",
    "a\u202eb",
    "\u2066x",
    "pes-agent-server:x",
    "x-pes-agent-server:",
]


@pytest.mark.parametrize("thread_id", THREAD_IDS, ids=ascii)
def test_the_thread_id_schema_accepts_exactly_the_ids_the_server_accepts(thread_id: str) -> None:
    """The documented thread id (read by Python's and Rust's regular expressions alike) is
    valid exactly when `thread_id_problem` finds nothing wrong with it."""
    usable = thread_id_problem(thread_id) is None
    assert jsonschema.Draft202012Validator(thread_id_schema()).is_valid(thread_id) is usable
    assert jsonschema_rs.validator_for(thread_id_schema()).is_valid(thread_id) is usable


def branch(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema of an optional field without its `null` branch."""
    return next(b for b in schema.get("anyOf", [schema]) if b.get("type") != "null")


def test_the_document_states_the_limits_the_models_enforce() -> None:
    """Minimums, closed objects and non-blank tool names appear in the document, as the
    models check them."""
    schemas = openapi_document()["components"]["schemas"]
    options = schemas["RunOptions"]["properties"]
    assert branch(options["history_limit"])["minimum"] == 0
    assert branch(options["max_tool_calls"])["minimum"] == 1
    assert branch(options["tool_timeout_s"])["exclusiveMinimum"] == 0
    assert branch(options["max_revisions"])["minimum"] == 0
    assert branch(schemas["ThreadConfig"]["properties"]["history_limit"])["minimum"] == 0
    assert schemas["ProviderConfig"]["properties"]["max_retries"]["minimum"] == 0
    for name in ["RunOptions", "ThreadConfig"]:
        items = branch(schemas[name]["properties"]["require_approval"])["items"]
        assert items["pattern"] == NOT_BLANK
    for name in ["RunOptions", "ThreadConfig", "LLMParams", "ProviderConfig", "RunRequest"]:
        assert schemas[name]["additionalProperties"] is False, name


def check_events(document: dict[str, Any], media: dict[str, Any], body: str) -> list[str]:
    """Check each event of an SSE `body` against the event schema of `media`: its fields, and
    its data against the schema its name selects. Returns the names seen."""
    names = []
    for block in body.strip().split("\n\n"):
        lines = [line for line in block.splitlines() if not line.startswith(":")]
        if not lines:
            continue
        event = dict(line.split(": ", 1) for line in lines)
        chosen = [
            b
            for b in media["schema"]["oneOf"]
            if event["event"] in b["properties"]["event"]["enum"]
        ]
        assert len(chosen) == 1, event["event"]
        jsonschema.validate(event, chosen[0])
        data = chosen[0]["properties"]["data"]
        assert data["contentMediaType"] == "application/json"
        content = {"components": document["components"], **data["contentSchema"]}
        jsonschema.validate(json.loads(event["data"]), content)
        names.append(event["event"])
    return names


async def test_a_runs_events_match_the_documented_event_schemas(client_for: ClientFactory) -> None:
    """Every event of a streamed run, and of its replay from GET /v1/runs/{id}/events, is an
    event the document describes, its data valid against the schema named for it."""
    client = client_for("admin-token")
    document = (await client.get("/openapi.json")).json()
    streamed = await client.post(
        "/v1/threads/t1/runs", json={"query": "hello"}, headers={"Accept": "text/event-stream"}
    )
    post = document["paths"]["/v1/threads/{thread_id}/runs"]["post"]
    names = check_events(
        document, post["responses"]["200"]["content"]["text/event-stream"], streamed.text
    )
    assert {"run", "PLAN", "token", "final"} <= set(names)
    replay = await client.get(f"/v1/runs/{streamed.headers['x-trace-id']}/events")
    get = document["paths"]["/v1/runs/{trace_id}/events"]["get"]
    replayed = check_events(
        document, get["responses"]["200"]["content"]["text/event-stream"], replay.text
    )
    assert (replayed[0], replayed[-1]) == ("run", "final")
    assert {"PLAN", "token"} <= set(replayed)
