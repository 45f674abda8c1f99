"""What a request carries, checked: its JSON body, its thread id and query parameters, and the
headers that choose how a run is answered (`Accept`, `Last-Event-ID`). Each refusal is an
`ApiError` saying what is wrong."""

from __future__ import annotations

import json
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from pes_agent.server.errors import ApiError
from pes_agent.threads.ids import thread_id_problem

__all__ = [
    "MAX_JSON_DEPTH",
    "flag",
    "int_param",
    "is_number",
    "read_body",
    "resume_from",
    "thread_id_of",
    "wants_stream",
]

M = TypeVar("M", bound=BaseModel)

#: How deep arrays and objects may nest in a request body.
MAX_JSON_DEPTH = 64


async def read_body(
    request: Request,
    model: type[M],
    *,
    max_bytes: int,
    extra: Literal["forbid", "allow", "ignore"] = "forbid",
) -> M:
    """The JSON body as a `model`; unknown fields, at any depth, are refused (`extra`: unless
    the body is another protocol's, whose models keep or drop them as that protocol says)."""
    if not _is_json(request.headers.get("content-type")):
        # Also what keeps other sites' pages out: a browser sends a cross-site form or
        # text/plain body without asking first, but never an application/json one.
        raise ApiError(
            415,
            "unsupported_media_type",
            "send the body as JSON, with 'Content-Type: application/json'",
        )
    declared = request.headers.get("content-length", "")
    if is_number(declared) and int(declared) > max_bytes:
        raise _too_large(max_bytes)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise _too_large(max_bytes)
        chunks.append(chunk)
    data = _parse_json(b"".join(chunks))
    if not isinstance(data, dict):
        raise ApiError(400, "invalid_body", "the request body must be a JSON object")
    try:
        # A misspelt field would otherwise be dropped, and the request half done.
        return model.model_validate(data, extra=extra)
    except ValidationError as error:
        raise ApiError(422, "validation_error", _validation_message(error)) from None


def _too_large(max_bytes: int) -> ApiError:
    return ApiError(413, "body_too_large", f"the request body is over {max_bytes} bytes")


def _validation_message(error: ValidationError) -> str:
    parts = []
    for item in error.errors(include_input=False, include_url=False):
        where = ".".join(str(p) for p in item["loc"]) or "body"
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)


def thread_id_of(request: Request) -> str:
    """The path's thread id, refused (400, with the reason) as the library refuses it."""
    value: str = request.path_params["thread_id"]
    problem = thread_id_problem(value)
    if problem is not None:
        raise ApiError(400, "invalid_thread_id", problem)
    return value


def wants_stream(request: Request) -> bool:
    """Whether the client asked for server-sent events rather than JSON."""
    return "text/event-stream" in request.headers.get("accept", "")


def flag(request: Request, name: str) -> bool:
    """The boolean query parameter `name` (false when absent)."""
    value = request.query_params.get(name, "false").lower()
    if value not in ("true", "false", "1", "0"):
        raise ApiError(400, "invalid_parameter", f"{name} must be true or false")
    return value in ("true", "1")


def int_param(request: Request, name: str) -> int | None:
    """The non-negative integer query parameter `name` (None when absent)."""
    raw = request.query_params.get(name)
    if raw is None:
        return None
    if not is_number(raw):
        raise ApiError(400, "invalid_parameter", f"{name} must be a non-negative integer")
    if len(raw.lstrip("0")) > 18:
        return None  # more than any store holds (and beyond what int() reads, at 4300 digits)
    return int(raw)


def resume_from(request: Request) -> str | None:
    """The `Last-Event-ID` header, if the client sent one."""
    return request.headers.get("last-event-id", "").strip() or None


def is_number(text: str) -> bool:
    """Whether `text` is a run of ASCII digits (`str.isdigit` also takes '²' and '٣')."""
    return text.isascii() and text.isdigit()


def _is_json(content_type: str | None) -> bool:
    """Whether a Content-Type names JSON: application/json or application/*+json."""
    media_type = (content_type or "").partition(";")[0].strip().lower()
    return media_type == "application/json" or (
        media_type.startswith("application/") and media_type.endswith("+json")
    )


def _parse_json(raw: bytes) -> Any:
    """A request body's JSON value; invalid JSON, NaN and Infinity (not JSON, RFC 8259) and
    nesting over `MAX_JSON_DEPTH` levels are a 400."""
    try:
        data = json.loads(raw or b"null", parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        raise ApiError(400, "invalid_json", "the request body is not valid JSON") from None
    if _depth(data) > MAX_JSON_DEPTH:
        # Saved with a paused run, such a value could not be read back (pydantic stops at
        # 200 levels), and no paused run of any thread could then be listed.
        raise ApiError(
            400, "invalid_json", f"the request body is nested over {MAX_JSON_DEPTH} levels deep"
        )
    return data


def _depth(value: Any) -> int:
    """How many arrays and objects deep `value` nests (a scalar: 0)."""
    depth = 0
    level = [value]
    while containers := [item for item in level if isinstance(item, dict | list)]:
        depth += 1
        level = [
            inner
            for container in containers
            for inner in (container.values() if isinstance(container, dict) else container)
        ]
    return depth


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")
