"""Tools from Model Context Protocol servers, and the agent as one, on the official `mcp` SDK
(extra `[mcp]`).

```python
from pes_agent import create_agent
from pes_agent.mcp import MCPServer

files = MCPServer.stdio("python", "my_server.py")          # a subprocess over stdin/stdout
search = MCPServer.http("http://127.0.0.1:8000/mcp")       # streamable HTTP
async with create_agent(provider="openai:gpt-4o-mini", tools=[add, files, search]) as agent:
    ...
```

An `MCPServer` only describes how to connect; it holds nothing open and may be shared by
several agents. Each agent opens its *own* connection — in `async with agent`, or else at the
start of its first `process()`, before planning, because the planner needs the tools' JSON
schemas (`tools/list` is read once, on connect) — shares it between its concurrent runs, and
closes it (and stops the server process) in `aclose()`. A tool whose name is taken by a local
tool or another server is registered as `<server>__<tool>` (see `pes_agent.tools.sources`);
names other providers refuse (dots, slashes) get `_` instead.

A tool's `isError` result, a protocol error and a server that crashes or hangs up all become
error results naming the server. A crashed connection is reopened (a stdio server restarted) on
the next call, at most `max_restarts` times within `restart_window_s`; past that the calls fail
with an error saying the server keeps crashing.

No server process outlives its connection: a stdio server runs under a small guard
(`pes_agent/_mcp_guard.py`) in its own process group. Closing the connection closes the
server's stdin, then the SDK SIGTERMs and SIGKILLs the group after grace periods; the
connection also deletes a lease file the guard watches, so a shutdown cut short (a cancelled
connect, a torn-down event loop) still stops the group within a fraction of a second; and
when the agent's process dies — even by SIGKILL — the guard notices (Linux's parent-death
signal, and polling its parent id everywhere) and stops the group. Windows runs the server
without the guard (the SDK puts it in a Job Object).

The other way round, `serve(agent)` (and `serve_async`, `create_server`) makes the agent an
MCP server with one tool, `ask`, and its threads as resources: see `pes_agent._mcp_server`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import sys
import tempfile
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self, cast

from pes_agent._closing import ClosedOnExit
from pes_agent._mcp_server import AskResult, create_server, serve, serve_async
from pes_agent.errors import ConfigurationError, ToolExecutionError, ToolSourceError
from pes_agent.observing.logs import get_logger
from pes_agent.tools.base import ToolContext, ToolSchema

if TYPE_CHECKING:
    import mcp_types
    from mcp import Client
    from mcp.client._transport import Transport, TransportStreams

__all__ = [
    "AskResult",
    "MCPConnection",
    "MCPServer",
    "MCPTool",
    "create_server",
    "serve",
    "serve_async",
]

_log = get_logger("pes_agent.mcp")
_INSTALL_HINT = "pes_agent.mcp needs the MCP SDK: pip install 'pes-agent[mcp]'"
_GUARD = str(Path(__file__).with_name("_mcp_guard.py").resolve())
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9_-]+")
_SCRIPT = re.compile(r"\.(py|js|mjs|cjs|ts)$")
_MAX_PAGES = 100


def _require_mcp() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError as error:
        raise ConfigurationError(_INSTALL_HINT) from error


def _name_from(text: str) -> str:
    return _NOT_IN_NAME.sub("_", text).strip("_")[:32] or "mcp"


@dataclass(frozen=True, slots=True)
class MCPServer:
    """How to reach one MCP server; pass it in `create_agent(tools=[...])`.

    Build one with `MCPServer.stdio(...)` or `MCPServer.http(...)`. `name` identifies the
    server in error results and prefixes its clashing tool names.
    """

    name: str
    transport: Literal["stdio", "http"]
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] | None = field(default=None, repr=False)
    cwd: str | None = None
    url: str | None = None
    # May hold credentials: never shown in repr, logs or error text.
    headers: Mapping[str, str] | None = field(default=None, repr=False)
    connect_timeout_s: float = 30.0
    max_restarts: int = 3
    restart_window_s: float = 60.0

    @classmethod
    def stdio(
        cls,
        command: str,
        *args: str,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        name: str | None = None,
        connect_timeout_s: float = 30.0,
        max_restarts: int = 3,
    ) -> MCPServer:
        """A server run as a subprocess: `MCPServer.stdio("python", "server.py")`.

        `env` is added to the few variables the SDK passes on (`PATH`, `HOME`, ...). The default
        `name` is the script's file name without suffix (`server`), else the command's name.
        """
        _require_mcp()
        if not isinstance(command, str) or not command:
            raise ConfigurationError(
                'command must be a program, e.g. MCPServer.stdio("python", "s.py")'
            )
        if not all(isinstance(arg, str) for arg in args):
            raise ConfigurationError("MCPServer.stdio arguments must be strings")
        script = next((a for a in args if _SCRIPT.search(a)), None)
        default = Path(script).stem if script else Path(command).name
        return cls(
            name=_checked_name(name, default),
            transport="stdio",
            command=command,
            args=tuple(args),
            env=dict(env) if env is not None else None,
            cwd=os.fspath(cwd) if cwd is not None else None,
            connect_timeout_s=_positive("connect_timeout_s", connect_timeout_s),
            max_restarts=_count("max_restarts", max_restarts),
        )

    @classmethod
    def http(
        cls,
        url: str,
        headers: Mapping[str, str] | None = None,
        *,
        name: str | None = None,
        connect_timeout_s: float = 30.0,
        max_restarts: int = 3,
    ) -> MCPServer:
        """A server reached over streamable HTTP: `MCPServer.http("http://127.0.0.1:8000/mcp")`.

        `headers` (an `Authorization` token, say) go with every request and nowhere else.
        The default `name` is the URL's host.
        """
        _require_mcp()
        match = re.match(r"https?://([^/:@]+@)?([^/:?#]+)", url if isinstance(url, str) else "")
        if match is None:
            raise ConfigurationError(
                f"url must be an http(s) URL, e.g. MCPServer.http('http://127.0.0.1:8000/mcp'); "
                f"got {url!r}"
            )
        return cls(
            name=_checked_name(name, match.group(2)),
            transport="http",
            url=url,
            headers=dict(headers) if headers is not None else None,
            connect_timeout_s=_positive("connect_timeout_s", connect_timeout_s),
            max_restarts=_count("max_restarts", max_restarts),
        )

    @property
    def source_name(self) -> str:
        """The name that prefixes this server's clashing tool names (the `ToolSource` protocol)."""
        return self.name

    def connect(self) -> MCPConnection:
        """A new connection, opened by `async with server.connect() as connection:`."""
        return MCPConnection(self)

    async def open_tools(self) -> MCPConnection:
        """Open a connection and list the tools (what `create_agent` does; the `ToolSource`
        protocol). Raises `ToolSourceError` when the server does not start or answer."""
        connection = self.connect()
        await connection.start()
        return connection

    def describe(self) -> str:
        """How the server is reached, for messages: the command line or the URL's origin."""
        if self.transport == "stdio":
            return " ".join([self.command or "", *self.args])
        match = re.match(r"(https?://)(?:[^/@]+@)?([^/?#]+)", self.url or "")
        return "".join(match.groups()) if match else "?"


def _checked_name(name: str | None, default: str) -> str:
    if name is None:
        return _name_from(default)
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", name):
        raise ConfigurationError(
            f"name must be 1-32 letters, digits, '_' or '-' (it prefixes tool names), got {name!r}"
        )
    return name


def _positive(label: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigurationError(f"{label} must be a positive number of seconds, got {value!r}")
    return float(value)


def _count(label: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"{label} must be an int >= 0, got {value!r}")
    return value


class MCPTool:
    """One tool of an MCP server, called through its agent's shared connection."""

    __slots__ = ("_connection", "_remote", "_schema", "output_schema")

    def __init__(self, connection: MCPConnection, listed: mcp_types.Tool) -> None:
        self._connection = connection
        self._remote = listed.name
        self._schema = ToolSchema(
            name=listed.name,
            description=listed.description
            or listed.title
            or f"{listed.name} (a tool of the MCP server {connection.server.name!r})",
            input_schema=dict(listed.input_schema),
        )
        self.output_schema = listed.output_schema

    @property
    def schema(self) -> ToolSchema:
        """The tool as the server listed it (the registry may register it under a prefix)."""
        return self._schema

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        """Call the tool on the server; its structured result if any, else its text."""
        result = await self._connection.call_tool(self._remote, arguments)
        return _output(result, self.output_schema)

    def __repr__(self) -> str:
        return f"MCPTool({self._remote!r} of {self._connection.server.name!r})"


def _output(result: mcp_types.CallToolResult, output_schema: dict[str, Any] | None) -> Any:
    import mcp_types

    structured = result.structured_content
    if structured is not None:
        # The SDK wraps a plain return value as {"result": value}; hand back the value.
        wrapped = (output_schema or {}).get("properties")
        if (
            isinstance(structured, dict)
            and set(structured) == {"result"}
            and isinstance(wrapped, dict)
            and set(wrapped) == {"result"}
        ):
            return structured["result"]
        return structured
    parts: list[Any] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        else:
            parts.append(block.model_dump(mode="json", exclude_none=True, by_alias=True))
    if len(parts) == 1:
        return parts[0]
    return parts


def _text_of(result: mcp_types.CallToolResult) -> str:
    import mcp_types

    texts = [b.text for b in result.content if isinstance(b, mcp_types.TextContent)]
    return " ".join(texts).strip() or "no details given"


def _describe(error: BaseException) -> str:
    """The innermost meaningful message of an error, unwrapping exception groups."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    message = str(error) or type(error).__name__
    return message if len(message) < 300 else message[:297] + "..."


@dataclass(slots=True, eq=False)
class _Session:
    """One live connection: its owner task holds every SDK context open until told to stop."""

    ready: asyncio.Future[list[mcp_types.Tool]]
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    client: Client | None = None
    task: asyncio.Task[None] | None = None
    scope: Any = None  # the anyio CancelScope the owner task runs in

    @property
    def live(self) -> bool:
        return self.client is not None and not self.ended.is_set()

    def cancel(self) -> None:
        if self.scope is not None:
            self.scope.cancel()
        elif self.task is not None:
            self.task.cancel()  # not started yet: it never spawns anything

    async def finished(self) -> None:
        """Wait until the owner task has shut the transport (and the server) down."""
        if self.task is not None:
            await asyncio.shield(asyncio.wait([self.task]))


class MCPConnection(ClosedOnExit):
    """A live connection to an MCP server: `tools` (listed on connect) and `call_tool`.

    `create_agent` opens one per agent; standalone, use `async with server.connect() as c`.
    Calls from concurrent tasks share it. After a crash the next call reconnects (within the
    server's restart budget); `aclose()` disconnects and stops a stdio server.
    """

    def __init__(self, server: MCPServer) -> None:
        self.server = server
        self._tools: list[MCPTool] = []
        self._session: _Session | None = None
        self._lock = asyncio.Lock()
        self._restarts: deque[float] = deque()
        self._closed = False

    @property
    def source_name(self) -> str:
        """The server's name."""
        return self.server.name

    @property
    def tools(self) -> Sequence[MCPTool]:
        """The server's tools as listed when the connection was first opened."""
        return tuple(self._tools)

    async def start(self) -> None:
        """Connect and list the tools; raises `ToolSourceError` if the server does not answer."""
        async with self._lock:
            if self._closed:
                raise ToolSourceError(self._closed_message(), source_name=self.server.name)
            if self._session is None:
                listed = await self._open()
                self._tools = [MCPTool(self, tool) for tool in listed]

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def aclose(self) -> None:
        """Disconnect; a stdio server is stopped and reaped before this returns."""
        self._closed = True
        session = self._session
        if session is not None:
            session.stop.set()
            await session.finished()

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> mcp_types.CallToolResult:
        """Call tool `name` (as the server names it); raises `ToolExecutionError` naming the
        server when the tool reports an error, the server refuses the call or the connection
        breaks."""
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED

        session = await self._live_session(name)
        client = session.client
        assert client is not None
        where = f"MCP server {self.server.name!r}"
        try:
            result = await client.call_tool(name, dict(arguments))
        except MCPError as error:
            if error.code != CONNECTION_CLOSED and not session.ended.is_set():
                raise ToolExecutionError(
                    f'{where} refused the call to tool "{name}": {_describe(error)}',
                    tool_name=name,
                ) from error
            session.stop.set()
            raise ToolExecutionError(
                f'{where} crashed or closed the connection during tool "{name}"; it is '
                "reconnected on the next call",
                tool_name=name,
            ) from error
        except (OSError, ValueError, RuntimeError) as error:
            # Transport failures (an HTTP server gone, a broken pipe) and malformed results.
            session.stop.set()
            raise ToolExecutionError(
                f'{where} failed during tool "{name}": {_describe(error)}; it is reconnected '
                "on the next call",
                tool_name=name,
            ) from error
        if result.is_error:
            raise ToolExecutionError(
                f'{where}: tool "{name}" failed: {_text_of(result)}', tool_name=name
            )
        return result

    async def _live_session(self, tool_name: str) -> _Session:
        session = self._session
        if session is not None and session.live:
            return session
        async with self._lock:
            if self._closed:
                raise ToolExecutionError(self._closed_message(), tool_name=tool_name)
            session = self._session
            if session is not None and session.live:
                return session
            now = time.monotonic()
            while self._restarts and now - self._restarts[0] > self.server.restart_window_s:
                self._restarts.popleft()
            if len(self._restarts) >= self.server.max_restarts:
                wait_s = self.server.restart_window_s - (now - self._restarts[0])
                raise ToolExecutionError(
                    f"MCP server {self.server.name!r} keeps crashing: reconnected "
                    f"{len(self._restarts)} times in {self.server.restart_window_s:g} s; not "
                    f"trying again for {wait_s:.0f} s",
                    tool_name=tool_name,
                )
            self._restarts.append(now)
            try:
                await self._open()
            except ToolSourceError as error:
                raise ToolExecutionError(error.message, tool_name=tool_name) from error
            assert self._session is not None
            return self._session

    async def _open(self) -> list[mcp_types.Tool]:
        """Start a new session (after the old one has shut down) and return the listed tools."""
        old = self._session
        if old is not None:
            old.stop.set()
            await old.finished()
        loop = asyncio.get_running_loop()
        session = _Session(ready=loop.create_future())
        self._session = session
        session.task = asyncio.create_task(self._own(session), name=f"mcp:{self.server.name}")
        try:
            async with asyncio.timeout(self.server.connect_timeout_s):
                return await asyncio.shield(session.ready)
        except BaseException as error:
            session.cancel()
            await session.finished()
            if isinstance(error, TimeoutError):
                raise ToolSourceError(
                    f"MCP server {self.server.name!r} ({self.server.describe()}) did not answer "
                    f"within {self.server.connect_timeout_s:g} s",
                    source_name=self.server.name,
                ) from None
            raise

    async def _own(self, session: _Session) -> None:
        """Hold the SDK's contexts open in this one task (anyio needs enter and exit in the
        same task) until `stop` is set or the transport ends; always leave nothing running."""
        import anyio
        from mcp import Client

        lease: str | None = None
        try:
            with anyio.CancelScope() as scope:
                session.scope = scope
                async with AsyncExitStack() as stack:
                    if self.server.transport == "stdio":
                        lease = _new_lease()
                    transport = await self._transport(stack, session, lease)
                    client = await stack.enter_async_context(Client(transport, cache=None))
                    listed = await _list_tools(client)
                    session.client = client
                    session.ready.set_result(listed)
                    stopping = asyncio.ensure_future(session.stop.wait())
                    ending = asyncio.ensure_future(session.ended.wait())
                    try:
                        await asyncio.wait([stopping, ending], return_when="FIRST_COMPLETED")
                    finally:
                        stopping.cancel()
                        ending.cancel()
            if not session.ready.done():
                session.ready.set_exception(self._start_error(None))
        except Exception as error:
            if not session.ready.done():
                session.ready.set_exception(self._start_error(error))
            else:  # the connection broke or closed uncleanly; its calls already failed
                _log.warning(
                    "mcp_connection_ended", server=self.server.name, error=_describe(error)
                )
        finally:
            session.ended.set()
            if lease is not None:
                # Whatever cut the shutdown short, the guard stops the server within a poll.
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(lease)
            if not session.ready.done():
                session.ready.cancel()

    def _start_error(self, error: BaseException | None) -> ToolSourceError:
        detail = _describe(error) if error is not None else "the connection was cancelled"
        return ToolSourceError(
            f"MCP server {self.server.name!r} ({self.server.describe()}) did not start or "
            f"list its tools: {detail}",
            source_name=self.server.name,
        )

    async def _transport(
        self, stack: AsyncExitStack, session: _Session, lease: str | None
    ) -> Transport:
        from mcp import StdioServerParameters, stdio_client
        from mcp.client.streamable_http import streamable_http_client

        server = self.server
        if server.transport == "stdio":
            assert server.command is not None
            assert lease is not None
            if not _findable(server):
                raise FileNotFoundError(f"command {server.command!r} not found")
            if sys.platform == "win32":
                command, args = server.command, list(server.args)
            else:
                command = sys.executable
                args = ["-I", _GUARD, str(os.getpid()), lease, "--", server.command, *server.args]
            inner: Transport = stdio_client(
                StdioServerParameters(
                    command=command, args=args, env=dict(server.env or {}), cwd=server.cwd
                )
            )
        else:
            import httpx2

            assert server.url is not None
            http = httpx2.AsyncClient(
                headers=dict(server.headers or {}),
                timeout=httpx2.Timeout(30.0, read=300.0),
            )
            await stack.enter_async_context(http)
            inner = streamable_http_client(server.url, http_client=http)
        return cast("Transport", _watched(inner, session.ended))

    def _closed_message(self) -> str:
        return f"the connection to MCP server {self.server.name!r} was closed (aclose())"

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open" if self._session else "new"
        return f"MCPConnection({self.server.name!r}, {state})"


@asynccontextmanager
async def _watched(inner: Transport, ended: asyncio.Event) -> AsyncIterator[TransportStreams]:
    """The transport's streams, relayed so that `ended` is set the moment the server's side
    ends (a crashed stdio server's stdout closing): the next call then reconnects at once."""
    import anyio
    from mcp.shared.message import SessionMessage

    async with inner as (read, write):
        send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)

        async def relay() -> None:
            try:
                async with send:
                    async for item in read:
                        await send.send(item)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass
            finally:
                ended.set()

        async with anyio.create_task_group() as group:
            group.start_soon(relay)
            try:
                yield receive, write
            finally:
                group.cancel_scope.cancel()


async def _list_tools(client: Client) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


def _findable(server: MCPServer) -> bool:
    """Whether the stdio command exists, so a typo fails with a clear message (a quick stat)."""
    command = server.command or ""
    path = (server.env or {}).get("PATH", os.environ.get("PATH"))
    if shutil.which(command, path=path) is not None:
        return True
    return Path(server.cwd or ".", command).is_file()


def _new_lease() -> str:
    """A file that exists while the connection wants its server; the guard watches it."""
    handle, path = tempfile.mkstemp(prefix="pes-mcp-", suffix=".lease")
    os.close(handle)
    return path
