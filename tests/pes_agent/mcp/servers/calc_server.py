"""A small MCP server for the tests, built with the SDK's MCPServer (formerly FastMCP).

`python calc_server.py [--pid-file PATH] [--slow SECONDS] [--http PORT] [--name NAME]`: writes
its pid to PATH first, sleeps SECONDS before serving (a slow start), then serves over stdio or,
with --http, over streamable HTTP on 127.0.0.1:PORT at /mcp.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import threading
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError


def build(name: str) -> MCPServer:
    """The server: arithmetic, a tool that fails, a slow one, and its own process ids."""
    server = MCPServer(name, log_level="WARNING")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def multiply(a: int, b: int) -> int:
        """Multiply two integers."""
        return a * b

    @server.tool()
    def divide(a: float, b: float) -> float:
        """Divide a by b."""
        if b == 0:
            raise ToolError("division by zero")
        return a / b

    @server.tool()
    async def nap(seconds: float) -> str:
        """Sleep, then say so."""
        await asyncio.sleep(seconds)
        return f"slept {seconds}"

    @server.tool()
    def pids() -> dict[str, int]:
        """This server's process id and its parent's."""
        return {"pid": os.getpid(), "parent": os.getppid()}

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pid-file")
    parser.add_argument("--slow", type=float, default=0.0)
    parser.add_argument("--http", type=int)
    parser.add_argument("--name", default="calc")
    # Like many real servers (wrappers, servers with worker threads), do not exit when stdin
    # closes: only a signal ends this process, so only the guard can prevent an orphan.
    parser.add_argument("--stubborn", action="store_true")
    options = parser.parse_args()
    if options.stubborn:
        threading.Thread(target=threading.Event().wait, name="keeps-running").start()
    if options.pid_file:
        with open(options.pid_file, "w") as handle:
            handle.write(str(os.getpid()))
    time.sleep(options.slow)
    server = build(options.name)
    if options.http:
        server.run("streamable-http", host="127.0.0.1", port=options.http)
    else:
        server.run()


if __name__ == "__main__":
    main()
