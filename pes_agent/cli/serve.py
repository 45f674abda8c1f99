"""`pes-agent serve`: the HTTP API (`pes_agent.server`) run by uvicorn, on one or more workers.

uvicorn starts each worker process from an import string, so the command puts its options
in the `PES_AGENT_SERVE` environment variable (JSON) and every worker builds its agent from
there in `app_from_env`, uvicorn's factory.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import asdict, dataclass
from typing import Any

from pes_agent.cli.demo import demo_model, demo_tools
from pes_agent.cli.errors import CLIError, ExitCode
from pes_agent.cli.paths import resolve_store
from pes_agent.cli.runner import build_agent
from pes_agent.core import AgentCore

__all__ = ["SERVE_ENV_VAR", "ServeOptions", "app_from_env", "serve_command"]

#: Where `pes-agent serve` hands its options to the worker processes.
SERVE_ENV_VAR = "PES_AGENT_SERVE"


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


def app_from_env() -> Any:
    """uvicorn's factory (`factory=True`): the app for the options in `PES_AGENT_SERVE`."""
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
    return create_app(_agent(options), cors_origins=options.cors_origins, close_agent=True)


def _agent(options: ServeOptions) -> AgentCore:
    store = resolve_store(options.db)
    if options.demo:
        return build_agent(provider=demo_model(), tools=demo_tools(), store=store)
    return build_agent(
        provider=options.provider,
        base_url=options.base_url,
        tool_specs=options.tool_specs,
        store=store,
        system_prompt=options.system_prompt,
    )


async def _check(options: ServeOptions) -> None:
    await _agent(options).aclose()


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
