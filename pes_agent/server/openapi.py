"""The OpenAPI 3.1 document of the HTTP API, built from the pydantic models."""

from __future__ import annotations

import functools
from typing import Any

from pydantic.json_schema import models_json_schema

from pes_agent.observing.types import ObservationType
from pes_agent.server.models import (
    SCHEMA_MODELS,
    ApprovalList,
    CancelResult,
    DecisionsRequest,
    ErrorBody,
    MessageList,
    ObservationList,
    RunList,
    RunRequest,
    ThreadList,
    schema_ref,
)

__all__ = ["openapi_document"]

_THREAD = {"name": "thread_id", "in": "path", "required": True, "schema": {"type": "string"}}
_TRACE = {"name": "trace_id", "in": "path", "required": True, "schema": {"type": "string"}}
_SSE = {
    "text/event-stream": {
        "schema": {"type": "string"},
        "description": "`run` first, then observations (event named by type, e.g. `PLAN`), "
        "`token`/`thinking`/`stream` model stream events, ending with `final` (the "
        "AgentFinalResponse) or `error`; ids increase within a stream (Last-Event-ID resumes)",
    }
}
_RUN_EVENTS = {
    "text/event-stream": {
        "schema": {"type": "string"},
        "description": "From the worker executing the run: as POST .../runs streams it "
        "(Last-Event-ID: an event id, or an observation id). From any other worker sharing "
        "the store: `run` (with the executing `worker_id`), the run's observations stored so "
        "far then live, each with its observation id as event id (Last-Event-ID resumes after "
        "it; any other value replays from the start, after a `gap` event saying so), then "
        "`end` with the run's `status` (`lost` when its worker stopped); no token events and "
        "no `final`, which stay in the executing process",
    }
}
_THREAD_EVENTS = {
    "text/event-stream": {
        "schema": {"type": "string"},
        "description": "`subscribed` (its id: where a reconnect resumes), then everything "
        "recorded on the thread by any worker: observations (event named by type, id = the "
        "observation id) and, from runs of the serving worker, `token`/`thinking`/`stream` "
        "events without id. With Last-Event-ID naming an observation, the observations stored "
        "after it are replayed first (tokens are not stored: not replayed); an unknown one "
        "gives a `gap` event and no replay",
    }
}
_LAST_EVENT_ID = {"name": "Last-Event-ID", "in": "header", "schema": {"type": "string"}}
_LIMIT = {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 0}}
_TYPES = {
    "name": "type",
    "in": "query",
    "description": "observation types (any case); repeat the parameter for several",
    "schema": {
        "type": "array",
        "items": {"type": "string", "enum": [kind.value for kind in ObservationType]},
    },
    "style": "form",
    "explode": True,
}
_WORKER_HEADERS = {
    "X-Trace-Id": {"description": "the run's trace id", "schema": {"type": "string"}},
    "X-Worker-Id": {
        "description": "the worker process (of those sharing the store) that answered",
        "schema": {"type": "string"},
    },
}


def _json(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _op(summary: str, ok: dict[str, Any], **extra: Any) -> dict[str, Any]:
    error = _json(schema_ref(ErrorBody), "an error")
    return {
        "summary": summary,
        "responses": {"200": ok, "4XX": error},
        "security": [{"bearer": []}],
        **extra,
    }


def _body(model: Any) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": schema_ref(model)}}}


@functools.cache
def openapi_document() -> dict[str, Any]:
    """The API's OpenAPI document (served at `/openapi.json`)."""
    _, defs = models_json_schema(
        [(model, "validation") for model in SCHEMA_MODELS],
        ref_template="#/components/schemas/{model}",
    )
    run_ok = _json(schema_ref_name("AgentFinalResponse"))
    run_ok["content"].update(_SSE)
    run_ok["headers"] = _WORKER_HEADERS
    query = {"name": "cancel_on_disconnect", "in": "query", "schema": {"type": "boolean"}}
    cancel = _op(
        "Cancel a run, from any worker: one another worker executes is asked to stop (202); "
        "one that already ended is a 409 `run_finished`",
        _json(schema_ref(CancelResult), "cancelled (in this worker, or a paused run)"),
        parameters=[_TRACE],
    )
    cancel["responses"]["202"] = _json(
        schema_ref(CancelResult),
        "the executing worker is asked to cancel it (`pending`): the run ends `cancelled` "
        "within about a second, unless it finishes first",
    )
    delete = _op(
        "Delete a thread and everything stored of it (its id stays its user's)",
        {"description": "deleted"},
        parameters=[_THREAD],
    )
    # No content: the answer is a 204, not a 200.
    delete["responses"]["204"] = delete["responses"].pop("200")
    paths: dict[str, Any] = {
        "/v1/threads": {"get": _op("List the threads", _json(schema_ref(ThreadList)))},
        "/v1/threads/{thread_id}": {"delete": delete},
        "/v1/threads/{thread_id}/runs": {
            "post": _op(
                "Run the agent on a thread (JSON, or SSE with Accept: text/event-stream)",
                run_ok,
                parameters=[_THREAD, query],
                requestBody=_body(RunRequest),
            ),
            "get": _op(
                "The thread's runs, oldest first: trace id, status, start, duration, query",
                _json(schema_ref(RunList)),
                parameters=[_THREAD],
            ),
        },
        "/v1/threads/{thread_id}/runs/{trace_id}/trace": {
            "get": _op(
                "A run's trace: its calls as bars on a time axis, a self-contained HTML page",
                {
                    "description": "the page",
                    "content": {"text/html": {"schema": {"type": "string"}}},
                },
                parameters=[_THREAD, _TRACE],
            )
        },
        "/v1/threads/{thread_id}/messages": {
            "get": _op(
                "The thread's messages, oldest first",
                _json(schema_ref(MessageList)),
                parameters=[_THREAD, _LIMIT],
            )
        },
        "/v1/threads/{thread_id}/observations": {
            "get": _op(
                "The thread's observations (type filter, after cursor)",
                _json(schema_ref(ObservationList)),
                parameters=[
                    _THREAD,
                    _TYPES,
                    {"name": "after", "in": "query", "schema": {"type": "string"}},
                    {"name": "trace_id", "in": "query", "schema": {"type": "string"}},
                    _LIMIT,
                ],
            )
        },
        "/v1/threads/{thread_id}/config": {
            "put": _op(
                "Set the thread's config",
                _json(schema_ref_name("ThreadConfig")),
                parameters=[_THREAD],
                requestBody={
                    "required": True,
                    "content": {"application/json": {"schema": schema_ref_name("ThreadConfig")}},
                },
            ),
            "get": _op(
                "The thread's config",
                _json(schema_ref_name("ThreadConfig")),
                parameters=[_THREAD],
            ),
        },
        "/v1/threads/{thread_id}/events": {
            "get": _op(
                "A live SSE feed of everything recorded on the thread, from every worker "
                "(Last-Event-ID replays the observations missed)",
                {"description": "events", "content": _THREAD_EVENTS},
                parameters=[_THREAD, _LAST_EVENT_ID],
            )
        },
        "/v1/threads/{thread_id}/runs/{trace_id}/decisions": {
            "post": _op(
                "Decide a paused run's pending calls and resume it",
                run_ok,
                parameters=[_THREAD, _TRACE, query],
                requestBody=_body(DecisionsRequest),
            )
        },
        "/v1/runs/{trace_id}/events": {
            "get": _op(
                "Attach to a run's events, on any worker (Last-Event-ID resumes)",
                {"description": "events", "content": _RUN_EVENTS, "headers": _WORKER_HEADERS},
                parameters=[_TRACE, query, _LAST_EVENT_ID],
            )
        },
        "/v1/runs/{trace_id}/cancel": {"post": cancel},
        "/v1/approvals": {
            "get": _op(
                "The runs waiting for approval",
                _json(schema_ref(ApprovalList)),
                parameters=[{"name": "thread_id", "in": "query", "schema": {"type": "string"}}],
            )
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "pes-agent", "version": "1"},
        "paths": paths,
        "components": {
            "schemas": defs.get("$defs", {}),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def schema_ref_name(name: str) -> dict[str, Any]:
    """A `$ref` to the component schema called `name`."""
    return {"$ref": f"#/components/schemas/{name}"}
