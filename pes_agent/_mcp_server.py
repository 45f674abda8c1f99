"""The agent as a Model Context Protocol server, on the official `mcp` SDK (extra `[mcp]`).

```python
from pes_agent import create_agent
from pes_agent.mcp import serve

agent = create_agent(provider="openai:gpt-4o-mini", tools=[...])
serve(agent)                                           # over stdio, for desktop clients
serve(agent, transport="streamable-http", port=8000)   # at http://127.0.0.1:8000/mcp
```

What a client sees:

- the tool `ask(query, thread_id=None)`: one run of the agent. Its result is structured
  (`AskResult`: answer, status, thread id, run id, ...) and the same JSON as text. Without a
  `thread_id` the run starts a new thread, whose id comes back: pass it to continue.
- the resource template `pes-agent://threads/{thread_id}`: a thread's history as JSON;
  `resources/list` lists the threads.
- a run that pauses for approval (a tool made with `requires_approval=True`) answers with
  status `awaiting_approval`, the calls waiting and `next_step`, which says how a person
  resumes it; the thread takes no new query until then.
- a bad argument, an unusable thread id, a failed run and any other failure are tool errors
  (`isError`) whose text says what went wrong; the server goes on serving.

This module only translates: runs go through `AgentCore.process`, histories come from the
agent's `conversation`. It is built on the SDK's low-level `Server` (not `MCPServer`, which
configures the root logger when made) and exported by `pes_agent.mcp`.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import threading
import uuid
from collections.abc import Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote, unquote

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pes_agent.errors import ConfigurationError, PESAgentError, UsageError
from pes_agent.observing.logs import get_logger
from pes_agent.run import AgentProps, PendingApproval, RunStatus
from pes_agent.threads.ids import thread_id_problem

if TYPE_CHECKING:
    import mcp_types
    from mcp.server import Server, ServerRequestContext

    from pes_agent.core import AgentCore

__all__ = ["THREAD_URI_TEMPLATE", "AskResult", "create_server", "serve", "serve_async"]

_log = get_logger("pes_agent.mcp.server")
_INSTALL_HINT = "serving over MCP needs the MCP SDK: pip install 'pes-agent[mcp]'"

#: Where a thread's history is read: `pes-agent://threads/{thread_id}` (the id URL-quoted).
THREAD_URI_TEMPLATE = "pes-agent://threads/{thread_id}"
_THREAD_URI_PREFIX = "pes-agent://threads/"
_THREADS_PER_PAGE = 100

Transport = Literal["stdio", "streamable-http"]


class AskArguments(BaseModel):
    """The arguments of the `ask` tool; its JSON schema is the tool's input schema."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, description="What to ask the agent.")
    thread_id: str | None = Field(
        default=None,
        description="The conversation to continue (the thread_id of an earlier answer); "
        "leave it out to start a new one.",
    )


class AskResult(BaseModel):
    """What the `ask` tool answers: its structured content (and, as JSON, its text)."""

    answer: str = Field(description="The agent's answer.")
    status: RunStatus = Field(
        description="How the run ended: success; partial (a tool call failed, the answer "
        "says what it could); awaiting_approval (see next_step)."
    )
    thread_id: str = Field(description="The conversation: pass it to ask again on it.")
    trace_id: str = Field(description="This run's id.")
    error: str | None = Field(default=None, description="What failed, for a partial run.")
    pending_approvals: list[PendingApproval] = Field(
        default_factory=list, description="The calls that wait for a decision."
    )
    next_step: str | None = Field(
        default=None, description="How to go on, for a run that waits for approval."
    )


def _require_mcp() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError as error:
        raise ConfigurationError(_INSTALL_HINT) from error


def create_server(agent: AgentCore, *, name: str = "pes-agent") -> Server[Any]:
    """The MCP server for `agent`, to run yourself or to mount in an ASGI app.

    `serve` runs one; use this one to mount its `streamable_http_app()` beside other routes
    or to connect `mcp.Client(server)` to it in process (tests). The server does not open or
    close the agent.

    Args:
        agent: The agent whose runs the `ask` tool starts and whose threads it lists.
        name: The server's name, as clients show it.

    Returns:
        The SDK's low-level `mcp.server.Server` with the `ask` tool and the thread resources.

    Raises:
        ConfigurationError: The `mcp` SDK is not installed.
    """
    _require_mcp()
    from mcp.server import Server

    from pes_agent import __version__

    adapter = _Adapter(agent)
    return Server(
        name,
        version=__version__,
        instructions="Ask the agent with the `ask` tool; pass the thread_id it returns to "
        "continue the conversation. Thread histories are the resources "
        f"{THREAD_URI_TEMPLATE}.",
        on_list_tools=adapter.list_tools,
        on_call_tool=adapter.call_tool,
        on_list_resources=adapter.list_resources,
        on_list_resource_templates=adapter.list_resource_templates,
        on_read_resource=adapter.read_resource,
    )


async def serve_async(
    agent: AgentCore,
    *,
    transport: Transport = "stdio",
    host: str = "127.0.0.1",
    port: int = 8000,
    path: str = "/mcp",
    name: str = "pes-agent",
    tokens: Sequence[str] | None = None,
) -> None:
    """Serve `agent` over MCP until the client hangs up (stdio), or SIGINT or SIGTERM.

    The agent is opened first (its MCP tool servers connected) and closed when serving ends;
    a signal (taken in the main thread) stops the server and this returns. Over stdio,
    standard output carries the protocol alone: log to stderr only.

    Args:
        agent: The agent to serve; closed when this returns.
        transport: "stdio" (a client starts this process) or "streamable-http".
        host: The address the HTTP server listens on (streamable-http only).
        port: The HTTP server's port (streamable-http only).
        path: Where the HTTP endpoint is (streamable-http only): http://HOST:PORT/mcp.
        name: The server's name, as clients show it.
        tokens: The bearer tokens HTTP requests must carry (streamable-http only), as for
            `pes_agent.server.create_app` but unscoped (each sees every thread); None:
            `PES_AGENT_API_TOKEN` from the environment if set, else no auth. A request
            without an accepted token is answered 401 before it reaches the MCP server.

    Raises:
        UsageError: An unknown transport, a port out of range or an empty token.
        ConfigurationError: The `mcp` SDK is not installed.
    """
    if transport not in ("stdio", "streamable-http"):
        raise UsageError(f'transport must be "stdio" or "streamable-http", got {transport!r}')
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise UsageError(f"port must be a whole number from 0 to 65535, e.g. 8000; got {port!r}")
    server = create_server(agent, name=name)
    if transport == "stdio":
        async with agent:
            await _until_signalled(_serve_stdio(server))
        return
    app = _http_app(server, host=host, path=path, tokens=tokens)
    async with agent:
        await _until_signalled(_serve_http(app, host=host, port=port))


async def _serve_stdio(server: Server[Any]) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def _http_app(server: Server[Any], *, host: str, path: str, tokens: Sequence[str] | None) -> Any:
    """The SDK's streamable HTTP app, behind the HTTP API's bearer-token check when tokens
    are set (the same `TokenTable`, the same 401 answer)."""
    if isinstance(tokens, Mapping):
        raise UsageError(
            "the MCP server takes unscoped tokens only, a list: tokens=[token] (scoping a "
            "token to a user is the HTTP API's: pes_agent.server.create_app)"
        )
    from starlette.middleware.authentication import AuthenticationMiddleware

    from pes_agent.server.auth import BearerTokens, TokenTable
    from pes_agent.server.errors import unauthorized

    table = TokenTable(tokens)
    app = server.streamable_http_app(streamable_http_path=path, host=host)
    if not table.enabled:
        return app
    return AuthenticationMiddleware(app, backend=BearerTokens(table), on_error=unauthorized)


async def _serve_http(app: Any, *, host: str, port: int) -> None:
    import uvicorn

    await uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning")).serve()


async def _until_signalled(work: Coroutine[Any, Any, None]) -> None:
    """Run `work` until it ends or SIGINT / SIGTERM arrives (then cancel it and return).

    uvicorn shuts down gracefully on these signals by itself, then raises the signal again
    so that the process stops as the signal asks; caught here, it lets the agent close
    first and `serve` return. Only the main thread can take signals (and not on Windows).
    """
    task = asyncio.ensure_future(work)
    signalled = False

    def stop() -> None:
        nonlocal signalled
        signalled = True
        task.cancel()

    loop = asyncio.get_running_loop()
    taken = sys.platform != "win32" and threading.current_thread() is threading.main_thread()
    numbers = (signal.SIGINT, signal.SIGTERM) if taken else ()
    for number in numbers:
        loop.add_signal_handler(number, stop)
    try:
        await task
    except asyncio.CancelledError:
        if not signalled:
            raise
    finally:
        for number in numbers:
            loop.remove_signal_handler(number)


def serve(
    agent: AgentCore,
    *,
    transport: Transport = "stdio",
    host: str = "127.0.0.1",
    port: int = 8000,
    path: str = "/mcp",
    name: str = "pes-agent",
    tokens: Sequence[str] | None = None,
) -> None:
    """Serve `agent` over MCP, blocking until done: `serve(agent)` for a desktop client.

    `serve_async` inside an event loop; this one runs its own.

    Args:
        agent: The agent to serve; closed when this returns.
        transport: "stdio" (a client starts this process) or "streamable-http".
        host: The address the HTTP server listens on (streamable-http only).
        port: The HTTP server's port (streamable-http only).
        path: Where the HTTP endpoint is (streamable-http only): http://HOST:PORT/mcp.
        name: The server's name, as clients show it.

    Raises:
        UsageError: An unknown transport or a port out of range.
        ConfigurationError: The `mcp` SDK is not installed.
    """
    asyncio.run(serve_async(agent, transport=transport, host=host, port=port, path=path, name=name))


class _Adapter:
    """The server's handlers: MCP requests in, agent calls out."""

    def __init__(self, agent: AgentCore) -> None:
        self.agent = agent

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        import mcp_types

        ask = mcp_types.Tool(
            name="ask",
            title="Ask the agent",
            description="Ask the agent a question: it plans, calls its tools and answers. "
            "Returns the answer, the run's status and the thread_id; pass the thread_id "
            "again to continue the same conversation.",
            input_schema=_schema(AskArguments),
            output_schema=_schema(AskResult),
            annotations=mcp_types.ToolAnnotations(
                read_only_hint=False, destructive_hint=False, open_world_hint=True
            ),
        )
        return mcp_types.ListToolsResult(tools=[ask])

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        if params.name != "ask":
            return _tool_error(f"unknown tool {params.name!r}: this server has one tool, ask")
        try:
            arguments = AskArguments.model_validate(params.arguments or {})
        except ValidationError as error:
            return _tool_error(f"bad arguments for ask: {_validation_message(error)}")
        try:
            result = await self.ask(arguments)
        except PESAgentError as error:
            return _tool_error(error.message)
        except Exception as error:
            # A bug, not the caller's fault: logged in full, reported in one line, and the
            # server keeps serving the other calls.
            _log.exception("mcp_ask_failed", error=f"{type(error).__name__}: {error}")
            return _tool_error(f"the agent failed unexpectedly ({type(error).__name__}: {error})")
        if isinstance(result, str):
            return _tool_error(result)
        return _tool_result(result)

    async def ask(self, arguments: AskArguments) -> AskResult | str:
        """Run the agent on the query; an `AskResult`, or the message of a run that failed."""
        thread_id = arguments.thread_id
        if thread_id is None:
            thread_id = f"mcp-{uuid.uuid4().hex}"
        else:
            problem = thread_id_problem(thread_id)
            if problem is not None:
                raise UsageError(problem)
        final = await self.agent.process(AgentProps(arguments.query, thread_id))
        metadata = final.metadata
        if metadata.status in ("error", "cancelled"):
            ended = "failed" if metadata.status == "error" else "was cancelled"
            reason = metadata.error or final.response.content or "no details given"
            where = f"thread_id {thread_id}, trace_id {metadata.trace_id}"
            return f"the run {ended}: {reason} ({where})"
        pending = metadata.pending_approvals
        return AskResult(
            answer=final.response.content,
            status=metadata.status,
            thread_id=thread_id,
            trace_id=metadata.trace_id,
            error=metadata.error,
            pending_approvals=list(pending),
            next_step=_resume_hint(thread_id, pending) if pending else None,
        )

    async def list_resources(
        self, ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListResourcesResult:
        import mcp_types

        threads = await self.agent.state.list_threads()
        start = _page_start(params.cursor if params is not None else None)
        page = threads[start : start + _THREADS_PER_PAGE]
        following = start + _THREADS_PER_PAGE
        return mcp_types.ListResourcesResult(
            resources=[
                mcp_types.Resource(
                    uri=thread_uri(thread_id),
                    name=thread_id,
                    description=f"the history of thread {thread_id!r}",
                    mime_type="application/json",
                )
                for thread_id in page
            ],
            next_cursor=str(following) if following < len(threads) else None,
        )

    async def list_resource_templates(
        self, ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListResourceTemplatesResult:
        import mcp_types

        template = mcp_types.ResourceTemplate(
            uri_template=THREAD_URI_TEMPLATE,
            name="thread",
            title="A thread's history",
            description="The messages of a conversation with the agent, oldest first (JSON); "
            "the thread_id is the one `ask` returns.",
            mime_type="application/json",
        )
        return mcp_types.ListResourceTemplatesResult(resource_templates=[template])

    async def read_resource(
        self, ctx: ServerRequestContext[Any], params: mcp_types.ReadResourceRequestParams
    ) -> mcp_types.ReadResourceResult:
        import mcp_types
        from mcp import MCPError

        uri = str(params.uri)
        thread_id = _thread_of(uri)
        problem = "no such resource" if thread_id is None else thread_id_problem(thread_id)
        if thread_id is None or problem is not None:
            raise MCPError(
                code=mcp_types.INVALID_PARAMS,
                message=f"{uri!r} is not a thread of this server ({problem}); "
                f"read {THREAD_URI_TEMPLATE}",
                data={"uri": uri},
            )
        messages = await self.agent.conversation.get_messages(thread_id)
        if not messages and thread_id not in await self.agent.state.list_threads():
            raise MCPError(
                code=mcp_types.INVALID_PARAMS,
                message=f"there is no thread {thread_id!r}; resources/list lists the threads",
                data={"uri": uri},
            )
        history = {
            "thread_id": thread_id,
            "messages": [
                message.model_dump(mode="json", exclude={"thread_id"}) for message in messages
            ],
        }
        return mcp_types.ReadResourceResult(
            contents=[
                mcp_types.TextResourceContents(
                    uri=uri, text=json.dumps(history), mime_type="application/json"
                )
            ]
        )


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema without its docstring, which is written for developers."""
    schema = model.model_json_schema()
    schema.pop("description", None)
    return schema


def thread_uri(thread_id: str) -> str:
    """The resource URI of a thread's history (the id URL-quoted, so any id fits)."""
    return _THREAD_URI_PREFIX + quote(thread_id, safe="")


def _thread_of(uri: str) -> str | None:
    if not uri.startswith(_THREAD_URI_PREFIX) or uri == _THREAD_URI_PREFIX:
        return None
    return unquote(uri.removeprefix(_THREAD_URI_PREFIX))


def _page_start(cursor: str | None) -> int:
    if cursor is None:
        return 0
    if not cursor.isdigit():
        from mcp import MCPError
        from mcp_types import INVALID_PARAMS

        raise MCPError(code=INVALID_PARAMS, message=f"unknown cursor {cursor!r}")
    return int(cursor)


def _resume_hint(thread_id: str, pending: list[PendingApproval]) -> str:
    calls = ", ".join(f"{p.tool_name} ({p.call_id})" for p in pending)
    return (
        f"The run waits for a person to approve {calls}. Resume it outside MCP: "
        f"`pes-agent approve {thread_id}` (with this server's --db and agent options; "
        f"`--deny CALL_ID` refuses a call), `AgentCore.resume` in code, or the HTTP API's "
        f"approvals. Then ask again with thread_id {thread_id!r}: until the run is resumed "
        f"or cancelled (`pes-agent cancel {thread_id}`), the thread takes no new query."
    )


def _validation_message(error: ValidationError) -> str:
    parts = []
    for problem in error.errors():
        where = ".".join(str(part) for part in problem["loc"]) or "arguments"
        parts.append(f"{where}: {problem['msg']}")
    return "; ".join(parts) + " (ask takes query: str and optionally thread_id: str)"


def _tool_result(result: AskResult) -> mcp_types.CallToolResult:
    import mcp_types

    structured = result.model_dump(mode="json")
    return mcp_types.CallToolResult(
        content=[
            mcp_types.TextContent(type="text", text=json.dumps(structured, ensure_ascii=False))
        ],
        structured_content=structured,
    )


def _tool_error(message: str) -> mcp_types.CallToolResult:
    import mcp_types

    return mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text=message)], is_error=True
    )
