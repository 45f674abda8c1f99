"""`pes-agent mcp-serve`: the agent `run` builds, served over MCP (`pes_agent.mcp.serve`).

Over stdio (the default) a client such as a desktop assistant starts this command and speaks
MCP on its stdin and stdout, so nothing else may go to stdout: the command's own lines go to
stderr. Over streamable HTTP it prints where it listens, on stderr too. Both stop on Ctrl-C or
SIGTERM, with exit code 0, once the agent is closed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pes_agent.cli.demo import demo_model, demo_tools
from pes_agent.cli.errors import CLIError, ExitCode, report
from pes_agent.cli.paths import StoreLocation
from pes_agent.cli.runner import build_agent, mcp_servers, open_agent_tools
from pes_agent.errors import ConfigurationError

__all__ = ["mcp_serve_command"]


async def mcp_serve_command(
    *,
    transport: Literal["stdio", "streamable-http"],
    host: str,
    port: int,
    provider: str,
    base_url: str | None,
    tool_specs: Sequence[str],
    store: StoreLocation,
    system_prompt: str | None,
    mcp_commands: Sequence[str] = (),
    require_approval: Sequence[str] = (),
    demo: bool = False,
) -> ExitCode:
    """Serve the agent the options build (with `demo`, the offline demo agent) over MCP until
    the client hangs up (stdio) or Ctrl-C / SIGTERM (exit code 0)."""
    try:
        from pes_agent.mcp import serve_async
    except ConfigurationError as error:
        raise CLIError(error.message) from None
    if not 0 <= port <= 65535:
        raise CLIError(f"--port must be from 0 to 65535, got {port}")
    if demo:
        agent = build_agent(
            provider=demo_model(),
            tools=demo_tools(),
            store=store,
            require_approval=require_approval,
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
        )
        if servers:
            await open_agent_tools(agent, require_approval)
    if transport == "streamable-http":
        shown = f"[{host}]" if ":" in host else host
        report(
            f"MCP server at http://{shown}:{port}/mcp (streamable HTTP) · store "
            f"{store.describe()} · stop with Ctrl-C"
        )
    await serve_async(agent, transport=transport, host=host, port=port)
    return ExitCode.OK
