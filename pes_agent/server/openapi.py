"""The OpenAPI 3.1 document of the HTTP API, built from the pydantic models and the rules the
server checks (`pes_agent.threads.ids`), so that the two cannot drift apart.

An event stream (`text/event-stream`) is described the way OpenAPI 3.2 does with `itemSchema`
and tools read in 3.1 documents: its `schema` is that of one event, an object of the event's
fields (`event`, `data`, `id`), whose `data` is JSON (`contentMediaType`) of the schema the
event's name selects (`contentSchema`).
"""

from __future__ import annotations

import functools
import re
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from pes_agent._patterns import NOT_BLANK
from pes_agent.observing.types import Observation, ObservationType
from pes_agent.run import AgentFinalResponse
from pes_agent.server.models import (
    SCHEMA_MODELS,
    ApprovalList,
    CancelResult,
    DecisionsRequest,
    ErrorBody,
    ErrorDetail,
    GapData,
    MessageList,
    ObservationList,
    RunEndedData,
    RunList,
    RunRequest,
    RunStartedData,
    StreamChunkData,
    SubscribedData,
    ThreadList,
    schema_ref,
)
from pes_agent.threads.ids import THREAD_ID_FORBIDDEN, THREAD_ID_MAX_LENGTH
from pes_agent.threads.reserved import RESERVED_PREFIX

__all__ = ["openapi_document", "thread_id_schema"]


def thread_id_schema() -> dict[str, Any]:
    """The JSON Schema of a thread id: `pes_agent.threads.ids`'s rule."""
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": THREAD_ID_MAX_LENGTH,
        # Not only white space.
        "pattern": NOT_BLANK,
        "not": {
            "anyOf": [
                {"pattern": f"[{_without_surrogates(THREAD_ID_FORBIDDEN)}]"},
                {"pattern": "^" + _literal(RESERVED_PREFIX)},
            ]
        },
    }


def _without_surrogates(character_class: str) -> str:
    """`character_class` without its `\\uD800`-`\\uDFFF` escapes: JSON Schema's regular
    expressions (and the Rust ones of its validators) refuse them, and no UTF-8 text (a JSON
    body, a URL) can hold a lone surrogate anyway."""
    return re.sub(
        r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}(-\\u[dD][89a-fA-F][0-9a-fA-F]{2})?", "", character_class
    )


def _literal(text: str) -> str:
    """`text` as a pattern matching itself (`re.escape` also escapes `-`, which ECMA-262's
    Unicode mode refuses outside a character class)."""
    return "".join("\\" + char if char in "\\^$.|?*+()[]{}/" else char for char in text)


_THREAD = {
    "name": "thread_id",
    "in": "path",
    "required": True,
    "description": f"up to {THREAD_ID_MAX_LENGTH} characters, not only white space, no control "
    f"characters, not starting with `{RESERVED_PREFIX}` (a 400 `invalid_thread_id` otherwise)",
    "schema": thread_id_schema(),
}
_TRACE = {"name": "trace_id", "in": "path", "required": True, "schema": {"type": "string"}}


def _event(names: list[str], data: type[BaseModel], what: str) -> dict[str, Any]:
    """The schema of server-sent events named `names` whose data is JSON of `data`."""
    return {
        "type": "object",
        "description": what,
        "required": ["event", "data"],
        "properties": {
            "event": {"enum": names},
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": schema_ref(data),
            },
            "id": {"type": "string"},
        },
    }


_OBSERVATION_EVENT = _event(
    [kind.value for kind in ObservationType],
    Observation,
    "an observation, named by its type (e.g. `PLAN`), with its id as event id",
)
_GAP_EVENT = _event(["gap"], GapData, "events were missed (`Last-Event-ID` too old or unknown)")
_STREAM_EVENT = _event(
    ["token", "thinking", "stream"], StreamChunkData, "model output as it is written (no id)"
)
#: One event of a run's stream.
_RUN_EVENT = {
    "oneOf": [
        _event(["run"], RunStartedData, "the first event"),
        _GAP_EVENT,
        _OBSERVATION_EVENT,
        _STREAM_EVENT,
        _event(["final"], AgentFinalResponse, "the last event of a run that ended"),
        _event(["error"], ErrorDetail, "the last event of a run that could not run or crashed"),
        _event(["end"], RunEndedData, "the last event of a run followed from another worker"),
    ]
}
#: One event of a thread's feed.
_THREAD_EVENT = {
    "oneOf": [
        _event(["subscribed"], SubscribedData, "the first event"),
        _GAP_EVENT,
        _OBSERVATION_EVENT,
        _STREAM_EVENT,
    ]
}
_SSE = {
    "text/event-stream": {
        "schema": _RUN_EVENT,
        "description": "`run` first, then observations (event named by type, e.g. `PLAN`), "
        "`token`/`thinking`/`stream` model stream events, ending with `final` (the "
        "AgentFinalResponse) or `error`; ids increase within a stream (Last-Event-ID resumes)",
    }
}
_RUN_EVENTS = {
    "text/event-stream": {
        "schema": _RUN_EVENT,
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
        "schema": _THREAD_EVENT,
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


def _link(operation_id: str, *parameters: str) -> dict[str, Any]:
    """A link from a run's answer to the operation on the thread (`thread_id`) or run
    (`trace_id`) it names: for clients that follow links, and for Schemathesis's stateful tests."""
    where = {
        "thread_id": "$request.path.thread_id",
        # The header, not the body: it is there on JSON and event-stream answers alike.
        "trace_id": "$response.header.X-Trace-Id",
    }
    return {"operationId": operation_id, "parameters": {name: where[name] for name in parameters}}


_RUN_LINKS = {
    "RunEvents": _link("runEvents", "trace_id"),
    "CancelRun": _link("cancelRun", "trace_id"),
    "Decide": _link("decide", "thread_id", "trace_id"),
    "RunTrace": _link("runTrace", "thread_id", "trace_id"),
    "ListRuns": _link("listRuns", "thread_id"),
    "ListObservations": _link("listObservations", "thread_id"),
    "ListMessages": _link("listMessages", "thread_id"),
}


def _json(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _op(summary: str, ok: dict[str, Any], **extra: Any) -> dict[str, Any]:
    error = _json(schema_ref(ErrorBody), "an error")
    unusable = _json(schema_ref(ErrorBody), "`storage_unavailable`: the store cannot be used")
    responses = {"200": ok, "4XX": error, "503": unusable}
    return {"summary": summary, "responses": responses, **extra}


def _body(model: Any) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": schema_ref(model)}}}


@functools.cache
def openapi_document(*, auth: bool = True) -> dict[str, Any]:
    """The API's OpenAPI document (served at `/openapi.json`); `auth`: whether the app asks
    for a bearer token (without one configured, no operation needs it)."""
    _, defs = models_json_schema(
        [(model, "validation") for model in SCHEMA_MODELS],
        ref_template="#/components/schemas/{model}",
    )
    run_ok = _json(schema_ref_name("AgentFinalResponse"))
    run_ok["content"].update(_SSE)
    run_ok["headers"] = _WORKER_HEADERS
    run_ok["links"] = _RUN_LINKS
    query = {"name": "cancel_on_disconnect", "in": "query", "schema": {"type": "boolean"}}
    cancel = _op(
        "Cancel a run, from any worker: one another worker executes is asked to stop (202); "
        "one that already ended is a 409 `run_finished`",
        _json(schema_ref(CancelResult), "cancelled (in this worker, or a paused run)"),
        operationId="cancelRun",
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
        operationId="deleteThread",
        parameters=[_THREAD],
    )
    # No content: the answer is a 204, not a 200.
    delete["responses"]["204"] = delete["responses"].pop("200")
    paths: dict[str, Any] = {
        "/v1/threads": {
            "get": _op("List the threads", _json(schema_ref(ThreadList)), operationId="listThreads")
        },
        "/v1/threads/{thread_id}": {"delete": delete},
        "/v1/threads/{thread_id}/runs": {
            "post": _op(
                "Run the agent on a thread (JSON, or SSE with Accept: text/event-stream)",
                run_ok,
                operationId="createRun",
                parameters=[_THREAD, query],
                requestBody=_body(RunRequest),
            ),
            "get": _op(
                "The thread's runs, oldest first: trace id, status, start, duration, query",
                _json(schema_ref(RunList)),
                operationId="listRuns",
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
                operationId="runTrace",
                parameters=[_THREAD, _TRACE],
            )
        },
        "/v1/threads/{thread_id}/messages": {
            "get": _op(
                "The thread's messages, oldest first",
                _json(schema_ref(MessageList)),
                operationId="listMessages",
                parameters=[_THREAD, _LIMIT],
            )
        },
        "/v1/threads/{thread_id}/observations": {
            "get": _op(
                "The thread's observations (type filter, after cursor)",
                _json(schema_ref(ObservationList)),
                operationId="listObservations",
                parameters=[
                    _THREAD,
                    _TYPES,
                    {
                        "name": "after",
                        "in": "query",
                        "description": "an observation id of the thread (an observation's "
                        "`id`, or `next_after`): only those recorded after it; one that names "
                        "no observation of the thread is a 404 `cursor_not_found`",
                        "schema": {"type": "string", "minLength": 1},
                    },
                    {"name": "trace_id", "in": "query", "schema": {"type": "string"}},
                    _LIMIT,
                ],
            )
        },
        "/v1/threads/{thread_id}/config": {
            "put": _op(
                "Set the thread's config",
                _json(schema_ref_name("ThreadConfig")),
                operationId="putConfig",
                parameters=[_THREAD],
                requestBody={
                    "required": True,
                    "content": {"application/json": {"schema": schema_ref_name("ThreadConfig")}},
                },
            ),
            "get": _op(
                "The thread's config",
                _json(schema_ref_name("ThreadConfig")),
                operationId="getConfig",
                parameters=[_THREAD],
            ),
        },
        "/v1/threads/{thread_id}/events": {
            "get": _op(
                "A live SSE feed of everything recorded on the thread, from every worker "
                "(Last-Event-ID replays the observations missed)",
                {"description": "events", "content": _THREAD_EVENTS},
                operationId="threadEvents",
                parameters=[_THREAD, _LAST_EVENT_ID],
            )
        },
        "/v1/threads/{thread_id}/runs/{trace_id}/decisions": {
            "post": _op(
                "Decide a paused run's pending calls and resume it",
                run_ok,
                operationId="decide",
                parameters=[_THREAD, _TRACE, query],
                requestBody=_body(DecisionsRequest),
            )
        },
        "/v1/runs/{trace_id}/events": {
            "get": _op(
                "Attach to a run's events, on any worker (Last-Event-ID resumes)",
                {"description": "events", "content": _RUN_EVENTS, "headers": _WORKER_HEADERS},
                operationId="runEvents",
                parameters=[_TRACE, query, _LAST_EVENT_ID],
            )
        },
        "/v1/runs/{trace_id}/cancel": {"post": cancel},
        "/v1/approvals": {
            "get": _op(
                "The runs waiting for approval",
                _json(schema_ref(ApprovalList)),
                operationId="listApprovals",
                parameters=[{**_THREAD, "in": "query", "required": False}],
            )
        },
    }
    components: dict[str, Any] = {"schemas": defs.get("$defs", {})}
    if auth:
        components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        for item in paths.values():
            for operation in item.values():
                operation["security"] = [{"bearer": []}]
    return {
        "openapi": "3.1.0",
        "info": {"title": "pes-agent", "version": "1"},
        "paths": paths,
        "components": components,
    }


def schema_ref_name(name: str) -> dict[str, Any]:
    """A `$ref` to the component schema called `name`."""
    return {"$ref": f"#/components/schemas/{name}"}
