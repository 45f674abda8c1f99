"""The ASGI application: the API's routes (`pes_agent.server.routes`), the OpenAPI
document, the web console, and the middleware and exception handlers around them."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.middleware.cors import CORSMiddleware
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from pes_agent.core import AgentCore
from pes_agent.errors import UsageError
from pes_agent.server.auth import BearerTokens, TokenTable
from pes_agent.server.console import console_routes
from pes_agent.server.errors import EXCEPTION_HANDLERS, ApiError, internal_error, unauthorized
from pes_agent.server.openapi import openapi_document
from pes_agent.server.routes import agui as agui_routes
from pes_agent.server.routes import approvals, runs, threads
from pes_agent.server.runs import RunRegistry
from pes_agent.server.state import ApiState
from pes_agent.server.workers import WorkerDirectory

if TYPE_CHECKING:
    from pes_agent.interop.a2a import A2ASettings

__all__ = ["ApiError", "create_app"]


def create_app(
    agent: AgentCore,
    *,
    tokens: Mapping[str, str | None] | Sequence[str] | None = None,
    cors_origins: Sequence[str] = (),
    max_body_bytes: int = 1_000_000,
    allow_provider_config: bool = False,
    replay_limit: int = 2048,
    close_agent: bool = False,
    console: bool = True,
    agui: bool = True,
    a2a: bool | A2ASettings | None = None,
) -> Starlette:
    """An ASGI app serving `agent` over HTTP (see the README's "HTTP service").

    `tokens`: accepted bearer tokens, a list (unscoped) or a map `{token: user_id}` (a token
    mapped to a user id sees only that user's threads; None: unscoped); when not given,
    `PES_AGENT_API_TOKEN` from the environment if set, else no auth. `cors_origins`: the
    origins a browser may call from (none by default). `allow_provider_config`: let requests
    pick a provider (off: a client-chosen base URL would receive the server's keys).
    `replay_limit`: events kept per run for `Last-Event-ID` resume. `close_agent`: the app
    owns the agent and closes it when the server shuts down. `console`: serve the web console
    at `/` (a static page; the data it shows goes through the API and its auth). `agui`:
    serve AG-UI clients at `POST /v1/agui` (`pes_agent.server.routes.agui`; the `agui` extra).
    `a2a`: serve the agent to other agents over A2A (`pes_agent.interop.a2a`: `POST /a2a`
    behind the tokens, the card at `/.well-known/agent-card.json`); None serves it when the
    `a2a` extra is installed, True insists on it, an `A2ASettings` names the agent on its card.
    """
    if max_body_bytes <= 0:
        raise UsageError("max_body_bytes must be positive, e.g. 1_000_000")
    registry = RunRegistry(replay_limit=replay_limit)
    workers = WorkerDirectory(agent.storage)
    api = ApiState(
        agent,
        TokenTable(tokens),
        max_body_bytes=max_body_bytes,
        allow_provider_config=allow_provider_config,
        registry=registry,
        workers=workers,
    )
    # Checked on each API route once it matched: an unknown path or method is a 404 or 405
    # with or without a token, as the OpenAPI document and the console need none.
    auth = [
        Middleware(
            AuthenticationMiddleware, backend=BearerTokens(api.tokens), on_error=unauthorized
        )
    ]
    routes: list[BaseRoute] = [
        Route("/openapi.json", _openapi, methods=["GET"]),
        # Not a Mount("/v1"): a Mount matches the rest of the path with `.*`, which stops at a
        # newline, so that a thread id holding `%0A` would be a 404 not_found, not the 400
        # invalid_thread_id it is.
        *threads.routes(auth),
        *runs.routes(auth),
        *approvals.routes(auth),
    ]
    if agui:
        routes.extend(agui_routes.routes(auth))
    if console:
        routes.extend(console_routes())
    closers: list[Callable[[], Awaitable[None]]] = []
    a2a_settings = _a2a_settings(a2a)
    if a2a_settings is not None:
        from pes_agent.interop.a2a import a2a_routes

        served, close_a2a = a2a_routes(api, a2a_settings, auth)
        routes.extend(served)
        closers.append(close_a2a)
    middleware: list[Middleware] = []
    if cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(cors_origins),
                allow_methods=["GET", "POST", "PUT", "DELETE"],
                allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
                expose_headers=["X-Trace-Id", "X-Worker-Id"],
            )
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            for close in closers:
                await close()
            await registry.aclose()
            await api.aclose()
            await workers.aclose()
            if close_agent:
                await agent.aclose()

    # Starlette answers an `Exception` handler's response from its outermost middleware and
    # then raises the exception again (a second traceback in the ASGI server's log; test
    # clients raise it): the last resort is an ExceptionMiddleware of its own instead.
    middleware.append(Middleware(ExceptionMiddleware, handlers={Exception: internal_error}))
    app = Starlette(
        routes=routes,
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers=EXCEPTION_HANDLERS,
    )
    app.state.runs = registry
    app.state.workers = workers
    app.state.api = api
    return app


def _a2a_settings(a2a: bool | A2ASettings | None) -> A2ASettings | None:
    """What `create_app(a2a=...)` serves: None for nothing."""
    if a2a is False:
        return None
    try:
        from pes_agent.interop.a2a import A2ASettings
    except ImportError as error:
        if a2a is None and (error.name or "").split(".")[0] in ("a2a", "google", "sse_starlette"):
            return None
        raise UsageError(
            "serving A2A needs a2a-sdk: pip install 'pes-agent[a2a]' (or create_app(a2a=False))"
        ) from error
    return a2a if isinstance(a2a, A2ASettings) else A2ASettings()


async def _openapi(request: Request) -> Response:
    api: ApiState = request.app.state.api
    return JSONResponse(openapi_document(auth=api.tokens.enabled))
