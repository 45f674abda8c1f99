"""The API's error answers: `{"error": {"type", "message"}}` with an HTTP status.

A handler raises `ApiError`; the app's exception handlers (`EXCEPTION_HANDLERS`, and
`internal_error` as the last resort) turn it, a store that cannot be used, an unknown path or
method, or any other failure into that shape. `unauthorized` is the bearer-token
middleware's answer.
"""

from __future__ import annotations

from urllib.parse import quote

from starlette.authentication import AuthenticationError
from starlette.exceptions import HTTPException
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response
from starlette.types import ExceptionHandler

from pes_agent.errors import ConfigurationError
from pes_agent.observing.logs import get_logger

__all__ = [
    "EXCEPTION_HANDLERS",
    "ApiError",
    "awaiting_approval",
    "error_response",
    "finished",
    "internal_error",
    "no_run",
    "segment",
    "storage_unusable",
    "unauthorized",
]

_log = get_logger("pes_agent.server")


class ApiError(Exception):
    """An error answered as `{"error": {"type", "message"}}` with an HTTP status."""

    def __init__(self, status: int, type: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.type = type
        self.message = message


def error_response(error: ApiError) -> JSONResponse:
    """`error` in the API's error shape (a 401 says which scheme to use)."""
    headers = {"WWW-Authenticate": "Bearer"} if error.status == 401 else None
    return JSONResponse(
        {"error": {"type": error.type, "message": error.message}},
        status_code=error.status,
        headers=headers,
    )


def unauthorized(conn: HTTPConnection, error: AuthenticationError) -> Response:
    """The answer to a request without an accepted bearer token."""
    return error_response(ApiError(401, "unauthorized", str(error)))


def no_run() -> ApiError:
    """The one answer for a trace id the caller may not see, whether or not a run has it."""
    return ApiError(
        404,
        "run_not_found",
        "no worker executes or lately finished a run with that trace id; a past run's "
        "observations: GET /v1/threads/{thread_id}/observations?trace_id=...",
    )


def segment(value: str) -> str:
    """`value` as one path segment of a URL the server prints: a thread id with a space, `?`,
    `#`, `%` or non-ASCII letters otherwise named another URL than its own."""
    return quote(value, safe="")


def awaiting_approval(thread_id: str, trace_id: str) -> ApiError:
    """The 409 for a thread whose run `trace_id` waits for approval, saying what to do."""
    thread, trace = segment(thread_id), segment(trace_id)
    return ApiError(
        409,
        "awaiting_approval",
        f"this thread has a run waiting for approval (trace id {trace_id}): decide its "
        f"pending calls (POST /v1/threads/{thread}/runs/{trace}/decisions) or cancel it "
        f"(POST /v1/runs/{trace}/cancel); GET /v1/approvals lists it",
    )


def storage_unusable(error: ConfigurationError, **context: str) -> ApiError:
    """The answer when the store cannot be opened or used (a missing folder, no permission),
    the reason logged: the only `ConfigurationError` a run or a handler lets out, and the
    server's fault, not a conflict with the request (it was a 409 naming the file)."""
    _log.error("server_storage_unusable", error=str(error), **context)
    return ApiError(503, "storage_unavailable", "the server cannot use its store; its log says why")


def finished(trace_id: str, status: str | None) -> ApiError:
    """The 409 for a run that already ended (`status` None: before it could run)."""
    ended = f"with status {status}" if status else "before it could run"
    if status == "lost":
        ended = "unfinished: the worker executing it stopped"
    return ApiError(409, "run_finished", f"the run {trace_id} already ended, {ended}")


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc)


async def _storage_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ConfigurationError)
    return error_response(storage_unusable(exc, http_path=request.url.path))


async def internal_error(request: Request, exc: Exception) -> Response:
    """Any other failure: a 500 that says nothing of it, the details in the server's log."""
    # The details (a store's path or its error) go to the log, not to the client. Called
    # while `exc` is being handled, so the log has its traceback.
    _log.exception("server_request_failed", http_method=request.method, http_path=request.url.path)
    return error_response(ApiError(500, "internal_error", "the server failed; its log has details"))


async def _not_found(request: Request, exc: Exception) -> Response:
    return error_response(ApiError(404, "not_found", "no such endpoint"))


async def _not_allowed(request: Request, exc: Exception) -> Response:
    # Starlette's 405 names the methods of the path's one route (in no order).
    assert isinstance(exc, HTTPException)
    allowed = sorted((exc.headers or {}).get("Allow", "").split(", "))
    response = error_response(
        ApiError(405, "method_not_allowed", f"this path takes {', '.join(allowed)} only")
    )
    response.headers["Allow"] = ", ".join(allowed)
    return response


#: The app's `exception_handlers`: a handler's `ApiError`, a store it cannot use (503), and
#: Starlette's 404 and 405, all in the API's error shape.
EXCEPTION_HANDLERS: dict[int | type[Exception], ExceptionHandler] = {
    404: _not_found,
    405: _not_allowed,
    ApiError: _api_error,
    ConfigurationError: _storage_error,
}
