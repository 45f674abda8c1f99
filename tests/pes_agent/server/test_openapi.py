"""The OpenAPI document against the app it describes: every route, method, path parameter and
schema reference, and the answers the document promises."""

from __future__ import annotations

import re
from typing import Any

from starlette.routing import Route

from pes_agent import AgentCore
from pes_agent.server import create_app
from pes_agent.server.openapi import openapi_document, thread_id_schema

from .conftest import ClientFactory

#: Routes that are not part of the API the document describes.
UNDOCUMENTED = {"/openapi.json", "/", "/console/{name}"}


def api_routes(agent: AgentCore) -> dict[str, set[str]]:
    """Each API path of an app over `agent`, with its methods (lower case, HEAD left out)."""
    routes: dict[str, set[str]] = {}
    for route in create_app(agent).routes:
        assert isinstance(route, Route)
        if route.path in UNDOCUMENTED:
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
