"""`pes-agent worker --engine URL`: run the runs submitted to a durable engine, in this process.

The worker builds its agent as `pes-agent run` does (`--provider`, `--tools`, `--db`, ...):
it holds the tools and the model the runs call, and records their observations in `--db`,
which the processes submitting runs (`run --engine`, `serve --engine`) share. It prints one
line once it takes runs, and stops on Ctrl-C or SIGTERM (exit code 0): runs under way are
taken over by a worker started again with the same `--worker-id`.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Sequence

from rich.console import Console
from rich.text import Text

from pes_agent.cli.demo import demo_model, demo_tools
from pes_agent.cli.engines import close_engine, open_engine, shown_url
from pes_agent.cli.errors import CLIError, ExitCode
from pes_agent.cli.paths import StoreLocation
from pes_agent.cli.runner import build_agent, mcp_servers, open_agent_tools
from pes_agent.errors import ConfigurationError

__all__ = ["worker_command"]


async def worker_command(
    *,
    engine_url: str,
    worker_id: str | None,
    task_queue: str | None,
    provider: str,
    base_url: str | None,
    tool_specs: Sequence[str],
    store: StoreLocation,
    system_prompt: str | None,
    mcp_commands: Sequence[str] = (),
    require_approval: Sequence[str] = (),
    demo: bool = False,
    console: Console,
) -> ExitCode:
    """Work for the engine `engine_url` with the agent the options build, until SIGINT or
    SIGTERM; with `demo`, the offline demo agent (scripted model, built-in tools)."""
    engine = open_engine(engine_url, worker_id=worker_id, task_queue=task_queue)
    try:
        if demo:
            agent = build_agent(
                provider=demo_model(), tools=demo_tools(), store=store, engine=engine
            )
        else:
            servers = mcp_servers(mcp_commands)
            agent = build_agent(
                provider=provider,
                base_url=base_url,
                tool_specs=tool_specs,
                tools=servers,
                store=store,
                system_prompt=system_prompt,
                require_approval=require_approval,
                engine=engine,
            )
            if servers:
                await open_agent_tools(agent, require_approval)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for number in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(number, stop.set)
        try:
            async with agent, engine.worker(agent):
                tools = ", ".join(sorted(agent.tools.names)) or "none"
                shown = worker_id or getattr(engine, "worker_id", None) or "default"
                console.print(
                    Text(
                        f"pes-agent worker {shown} ready on {shown_url(engine_url)} · store "
                        f"{store.describe()} · tools: {tools} · stop with Ctrl-C or SIGTERM"
                    ),
                    highlight=False,
                    soft_wrap=True,
                )
                await stop.wait()
        except ConfigurationError as error:
            # The engine could not start (its server unreachable): one line, exit 2.
            raise CLIError(error.message) from None
    finally:
        await close_engine(engine)
    return ExitCode.OK
