"""`pes-agent serve`: the HTTP API (`pes_agent.server`) run by uvicorn, on one or more workers.

uvicorn starts each worker process from an import string, so the command puts its options
in the `PES_AGENT_SERVE` environment variable (JSON) and every worker builds its agent from
there in `app_from_env`, uvicorn's factory.

- Before any worker starts, the command builds the agent once and reads the store, so a bad
  provider, tool or an unreachable database stops it with one line (exit code 2). A `--db`
  URL holding a password gets a warning: every user of the machine can read it in `ps`.
- Each worker logs pes-agent's warnings and errors (everything with `PES_AGENT_DEBUG=1`) to
  stderr beside uvicorn's lines: the log an API error's "the server log has details" means.
- The signals that stop uvicorn also end the open event streams (`end_feeds`): uvicorn waits
  for every response to end before it stops, and a thread feed never ends by itself.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import asdict, dataclass
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

from pes_agent.cli.demo import demo_model, demo_tools
from pes_agent.cli.engines import close_engine, open_engine
from pes_agent.cli.errors import CLIError, ExitCode, report
from pes_agent.cli.paths import DB_ENV_VAR, resolve_store
from pes_agent.cli.runner import build_agent
from pes_agent.core import AgentCore
from pes_agent.errors import PESAgentError

__all__ = ["SERVE_ENV_VAR", "ServeOptions", "app_from_env", "serve_command"]

#: Where `pes-agent serve` hands its options to the worker processes.
SERVE_ENV_VAR = "PES_AGENT_SERVE"
# The same switch as the rest of the command line's (`pes_agent.cli.main`).
_DEBUG_ENV_VAR = "PES_AGENT_DEBUG"
# What uvicorn stops on (SIGTERM is what its supervisor sends each worker).
_EXIT_SIGNALS = (signal.SIGINT, signal.SIGTERM)

_Scope = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
_ASGIApp = Callable[[_Scope, _Receive, _Send], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """What every worker needs to build the same agent."""

    provider: str
    db: str | None = None
    base_url: str | None = None
    tool_specs: tuple[str, ...] = ()
    system_prompt: str | None = None
    demo: bool = False
    cors_origins: tuple[str, ...] = ()
    #: `--engine URL`: runs go to that durable engine's workers (`pes-agent worker`).
    engine: str | None = None


def app_from_env() -> Any:
    """uvicorn's factory (`factory=True`): the app for the options in `PES_AGENT_SERVE`."""
    from pes_agent.observing.logs import configure_logging
    from pes_agent.server import create_app

    raw = os.environ.get(SERVE_ENV_VAR)
    if not raw:
        raise CLIError(f"{SERVE_ENV_VAR} is not set: start the server with `pes-agent serve`")
    data = json.loads(raw)
    options = ServeOptions(
        **{
            **data,
            "tool_specs": tuple(data.get("tool_specs", ())),
            "cors_origins": tuple(data.get("cors_origins", ())),
        }
    )
    # A worker process started by uvicorn has no logging set up, and the command's own setup
    # (quiet: it reports failures itself) would hide the errors a server must show.
    debug = os.environ.get(_DEBUG_ENV_VAR, "") not in ("", "0")
    configure_logging(logging.DEBUG if debug else logging.WARNING)
    app = create_app(_agent(options), cors_origins=options.cors_origins, close_agent=True)
    return _EndFeedsOnExit(app)


class _EndFeedsOnExit:
    """The app, with uvicorn's exit signals chained to `end_feeds` once it has started."""

    def __init__(self, app: _ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] == "lifespan":
            # uvicorn has installed its signal handlers by now (and restores the ones before
            # it when it stops, taking these along).
            _end_feeds_on(_EXIT_SIGNALS, asyncio.get_running_loop())
        await self.app(scope, receive, send)


def _end_feeds_on(signals: tuple[signal.Signals, ...], loop: asyncio.AbstractEventLoop) -> None:
    """Make each of `signals` end the open event streams, then do what it did before."""
    from pes_agent.server.feeds import end_feeds

    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set signal handlers (uvicorn sets none then either)
    for number in signals:
        previous = signal.getsignal(number)
        if not callable(previous):
            continue  # ignored or the default action: nothing of uvicorn's to chain to

        def handler(
            signum: int,
            frame: FrameType | None,
            previous: Callable[[int, FrameType | None], Any] = previous,
        ) -> None:
            loop.call_soon_threadsafe(end_feeds)
            previous(signum, frame)

        signal.signal(number, handler)


def _agent(options: ServeOptions) -> AgentCore:
    store = resolve_store(options.db)
    # Each process submits through its own engine client (nothing connects until a run).
    engine = open_engine(options.engine) if options.engine is not None else None
    if options.demo:
        return build_agent(provider=demo_model(), tools=demo_tools(), store=store, engine=engine)
    return build_agent(
        provider=options.provider,
        base_url=options.base_url,
        tool_specs=options.tool_specs,
        store=store,
        system_prompt=options.system_prompt,
        engine=engine,
    )


async def _check(options: ServeOptions) -> None:
    """Build the agent and read its store (a database is only connected to when used)."""
    from pes_agent.server.workers import DIRECTORY

    agent = _agent(options)
    try:
        await agent.storage.get_agent_state(DIRECTORY)
    except PESAgentError as error:
        raise CLIError(error.message) from None
    finally:
        await agent.aclose()
        if agent.engine is not None:
            await close_engine(agent.engine)


def _has_password(db: str) -> bool:
    try:
        return bool(urlsplit(db).password)
    except ValueError:  # not a URL (a file path, say): nothing to hide
        return False


def serve_command(options: ServeOptions, *, host: str, port: int, workers: int) -> ExitCode:
    """Run the API with uvicorn until interrupted."""
    try:
        import uvicorn
    except ImportError:
        raise CLIError(
            "serving needs Starlette and uvicorn: pip install 'pes-agent[server]'"
        ) from None
    if workers < 1:
        raise CLIError(f"--workers must be 1 or more, got {workers}")
    if options.db is not None and _has_password(options.db):
        report(
            f"warning: the --db URL holds a password, which every user of this machine can "
            f"read in `ps`: set {DB_ENV_VAR} (or PGPASSWORD, or ~/.pgpass) instead"
        )
    os.environ[SERVE_ENV_VAR] = json.dumps(asdict(options))
    # A bad provider, tool or store fails here, in one line, before any worker starts.
    asyncio.run(_check(options))
    uvicorn.run(
        "pes_agent.cli.serve:app_from_env",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level="info",
    )
    return ExitCode.OK
