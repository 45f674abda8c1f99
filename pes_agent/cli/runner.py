"""The commands that run the agent: `run` (a real model) and `demo` (the scripted one)."""

from __future__ import annotations

import asyncio
import shlex
import sys
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from pes_agent.approvals import ApprovalHandler, Decision, PausedRun
from pes_agent.cli.cassettes import open_recording, open_replay
from pes_agent.cli.demo import DEMO_QUERY, demo_model, demo_tools
from pes_agent.cli.engines import close_engine, open_engine
from pes_agent.cli.errors import CLIError, ExitCode, exit_code_for, report
from pes_agent.cli.index import open_retriever
from pes_agent.cli.live import RunHeader, compact_json, make_view
from pes_agent.cli.paths import StoreLocation
from pes_agent.cli.prompt import TerminalApprover
from pes_agent.cli.store_commands import write_json
from pes_agent.cli.tool_loading import load_tools
from pes_agent.config import ProviderConfig
from pes_agent.core import AgentCore
from pes_agent.errors import ConfigurationError, PESAgentError, ToolSourceError, UsageError
from pes_agent.factory import create_agent
from pes_agent.providers.base import LLMProvider
from pes_agent.retrieval.retriever import Retriever
from pes_agent.run import AgentFinalResponse, AgentProps
from pes_agent.usage import UsageLimits

if TYPE_CHECKING:
    from pes_agent.durable import DurableEngine
    from pes_agent.mcp import MCPServer

__all__ = [
    "AgentRun",
    "agent_options",
    "build_agent",
    "demo_command",
    "execute",
    "new_thread_id",
    "run_command",
    "store_options",
]

# The environment variable each built-in provider reads its key from.
KEY_VARIABLES = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


def new_thread_id() -> str:
    """A fresh thread id for a run that did not name one."""
    return f"run-{uuid.uuid4().hex[:8]}"


def _provider_spec(provider: str, base_url: str | None) -> str | ProviderConfig:
    if base_url is None:
        return provider
    name, sep, model = provider.partition(":")
    if not sep or not name or not model:
        raise CLIError(f"--provider {provider!r}: write NAME:MODEL, e.g. openai:gpt-4o-mini")
    return ProviderConfig(name, model, base_url=base_url)


def _key_hint(provider: str, error: ConfigurationError) -> str | None:
    name = provider.partition(":")[0]
    variable = KEY_VARIABLES.get(name)
    message = error.message
    if variable is not None and variable in message:
        return (
            f"no API key for {provider}: set {variable} "
            "(or try `pes-agent demo`, which runs offline with no key)"
        )
    if "key" in message.lower():
        return f"{message} (or try `pes-agent demo`, which runs offline with no key)"
    return None


def _real_provider(provider: str, base_url: str | None) -> LLMProvider:
    """The provider `--provider` and `--base-url` name, built now (for `--record` to wrap);
    a missing key or bad name is a one-line `CLIError`."""
    from pes_agent.providers.registry import create_provider

    try:
        return create_provider(_provider_spec(provider, base_url))
    except ConfigurationError as error:
        raise CLIError(_key_hint(provider, error) or error.message) from None
    except UsageError as error:
        raise CLIError(error.message) from None


def build_agent(
    *,
    provider: str | LLMProvider,
    base_url: str | None = None,
    tool_specs: Sequence[str] = (),
    tools: Sequence[Any] = (),
    store: StoreLocation,
    system_prompt: str | None = None,
    retriever: Retriever | None = None,
    require_approval: Sequence[str] = (),
    approval_handler: ApprovalHandler | None = None,
    usage_limits: UsageLimits | None = None,
    engine: DurableEngine | None = None,
) -> AgentCore:
    """An agent for the command line; every configuration mistake becomes a one-line `CLIError`.

    `require_approval` names tools whose calls wait for a decision (on top of the tools made
    with `requires_approval=True`); `approval_handler` takes the decisions in process. With
    `engine` (`--engine`), runs go to that durable engine's workers (`pes-agent worker`)."""
    all_tools = [*tools, *load_tools(tool_specs)]
    spec: str | ProviderConfig | LLMProvider = (
        _provider_spec(provider, base_url) if isinstance(provider, str) else provider
    )
    if store.path is not None:
        try:
            store.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise CLIError(
                f"cannot create {store.path.parent} for the store: {error.strerror or error} "
                "(pass --db or set PES_AGENT_DB)"
            ) from None
    try:
        agent = create_agent(
            provider=spec,
            tools=all_tools,
            storage=store.spec,
            system_prompt=system_prompt,
            retriever=retriever,
            require_approval=list(require_approval) or None,
            approval_handler=approval_handler,
            usage_limits=usage_limits,
            engine=engine,
        )
    except ConfigurationError as error:
        hint = _key_hint(provider, error) if isinstance(provider, str) else None
        raise CLIError(hint or error.message) from None
    except UsageError as error:
        raise CLIError(error.message) from None
    if not tools:
        # With MCP servers the names are known once they are open (`open_agent_tools`).
        check_gated_names(agent, require_approval)
    return agent


def check_gated_names(agent: AgentCore, require_approval: Sequence[str]) -> None:
    """Refuse `--require-approval` naming a tool the agent does not have."""
    unknown = [name for name in require_approval if name not in agent.tools.names]
    if unknown:
        known = ", ".join(sorted(agent.tools.names)) or "none (pass --tools MODULE:ATTR)"
        raise CLIError(f"--require-approval {unknown[0]}: no tool of that name; the tools: {known}")


async def open_agent_tools(agent: AgentCore, require_approval: Sequence[str] = ()) -> None:
    """Open the agent's MCP servers (`--mcp`) so their tools are known, then check the
    `--require-approval` names; on failure the agent is closed and a `CLIError` raised."""
    try:
        await agent.tools.open_sources()
        check_gated_names(agent, require_approval)
    except ToolSourceError as error:
        await agent.aclose()
        raise CLIError(f"--mcp: {error.message}") from None
    except CLIError:
        await agent.aclose()
        raise


@dataclass(frozen=True, slots=True)
class AgentRun:
    """One query to run on a thread (or a paused run to resume), and how to show it.

    `approver` asks at the terminal about calls that need approval (its view is set here);
    without it such calls pause the run, and `no_input_reason` says why nobody was asked when
    that was not `--no-input`. `agent_args` are the options `pes-agent approve` needs to
    finish a paused run as this one would have run (provider, tools), `store_args` the
    `--db` option every command needs to find it.
    """

    query: str
    thread_id: str
    header: RunHeader
    as_json: bool
    approver: TerminalApprover | None = None
    no_input_reason: str | None = None
    agent_args: tuple[str, ...] = ()
    store_args: tuple[str, ...] = ()
    paused: PausedRun | None = None
    decisions: Mapping[str, Decision] = field(default_factory=dict)

    _new_trace_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def trace_id(self) -> str:
        """The run's trace id: the paused run's, or a new one."""
        return self.paused.trace_id if self.paused is not None else self._new_trace_id

    async def start(self, agent: AgentCore) -> AgentFinalResponse:
        """Process the query, or resume the paused run with the decisions."""
        if self.paused is not None:
            return await agent.resume(self.thread_id, self.paused.trace_id, self.decisions)
        return await agent.process(AgentProps(self.query, self.thread_id, trace_id=self.trace_id))


async def _process(agent: AgentCore, run: AgentRun, console: Console) -> AgentFinalResponse:
    if run.as_json:
        return await run.start(agent)
    view = make_view(console, run.header)
    with view:
        if run.paused is not None:
            view.restore(run.paused)
        if run.approver is not None:
            run.approver.view = view
        try:
            if agent.engine is not None:
                # A worker runs it and records its observations in the shared store: they are
                # shown from there; its tokens come through the store's stream feed.
                from pes_agent.durable.following import follow_stored

                stop_stream = agent.stream.subscribe(view.on_stream, thread_id=run.thread_id)
                try:
                    async with follow_stored(agent, run.thread_id, run.trace_id, view.observe):
                        result = await run.start(agent)
                finally:
                    stop_stream()
            else:
                detach = view.attach(agent, run.thread_id)
                try:
                    result = await run.start(agent)
                finally:
                    detach()
        except asyncio.CancelledError:
            view.cancel()
            raise
        view.finish(result)
    return result


async def execute(agent: AgentCore, run: AgentRun, *, console: Console) -> ExitCode:
    """Run `run` on `agent` (closing it afterwards), show it, and return the exit code."""
    async with agent:
        result = await _process(agent, run, console)
    metadata = result.metadata
    if run.as_json:
        write_json(result.model_dump(mode="json"))
    elif metadata.status != "awaiting_approval":  # a paused thread takes no new query yet
        # Quoted for a POSIX shell: a thread id or path may hold spaces, quotes or `;`.
        trace = ["pes-agent", "trace", run.thread_id, "--html", "trace.html", *run.store_args]
        hint = Text(
            f"thread {run.thread_id} · continue it with --thread {shlex.quote(run.thread_id)} · "
            f"timeline: {shlex.join(trace)}",
            style="dim",
        )
        console.print(hint, highlight=False, soft_wrap=True)
    if metadata.status == "awaiting_approval":
        _print_resume_hint(result, run, console=console, to_stderr=run.as_json)
    if metadata.status == "error":
        report(f"the run failed: {metadata.error}")
    return exit_code_for(metadata.status)


def _print_resume_hint(
    result: AgentFinalResponse, run: AgentRun, *, console: Console, to_stderr: bool
) -> None:
    """Say which calls wait, and the commands that approve, deny, list or cancel them."""
    pending = result.metadata.pending_approvals
    out = Console(stderr=True, highlight=False) if to_stderr else console
    thread = run.thread_id
    calls = f"{len(pending)} call{'s' if len(pending) != 1 else ''}"
    lines = [Text(f"⏸ the run waits for approval of {calls}:", style="bold magenta")]
    if run.no_input_reason:
        lines.append(Text(f"  ({run.no_input_reason})", style="dim"))
    for call in pending:
        lines.append(Text(f"  {call.call_id} {call.tool_name} {compact_json(call.arguments, 200)}"))
    options = [*run.agent_args, *run.store_args]
    approve = shlex.join(["pes-agent", "approve", thread, *options])
    deny = shlex.join(
        ["pes-agent", "approve", thread, "--deny", f"{pending[0].call_id}=REASON", *options]
    )
    listing = shlex.join(["pes-agent", "pending", thread, *run.store_args])
    cancel = shlex.join(["pes-agent", "cancel", thread, *run.store_args])
    lines += [
        Text("approve them all:        ", style="bold").append(approve, style=""),
        Text("deny one, run the rest:  ", style="bold").append(deny, style=""),
        Text("list, or drop the run:   ", style="bold").append(f"{listing} · {cancel}", style=""),
    ]
    for line in lines:
        out.print(line, highlight=False, soft_wrap=True)


async def run_command(
    *,
    query: str,
    provider: str,
    base_url: str | None,
    thread_id: str | None,
    tool_specs: Sequence[str],
    store: StoreLocation,
    system_prompt: str | None,
    as_json: bool,
    console: Console,
    embeddings: str | None = None,
    require_approval: Sequence[str] = (),
    no_input: bool = False,
    mcp_commands: Sequence[str] = (),
    usage_limits: UsageLimits | None = None,
    engine_url: str | None = None,
    record: str | None = None,
    replay: str | None = None,
) -> ExitCode:
    """`pes-agent run`: answer `query` with a real model; with `embeddings` (`--retrieve`),
    searching the index of `store` built with those embeddings first. Each of
    `mcp_commands` (`--mcp "python server.py"`) is an MCP server started over stdio for the run.
    `usage_limits` (`--max-tokens-total`, `--max-requests`, `--max-tool-calls`) stop the run
    at a limit. With `engine_url` (`--engine`), the run is submitted to that durable engine
    and a `pes-agent worker` runs it. With `record` (`--record FILE`) the model calls are
    also written to that cassette; with `replay` (`--replay FILE`) they are answered from it,
    offline, and `provider` is not built (no key needed).

    Calls that need approval are asked about at the terminal, unless `no_input` (or the
    terminal cannot ask, or a worker runs the run): then the run pauses and the commands that
    resume it are printed."""
    if not query.strip():
        raise CLIError('the query is empty; e.g. pes-agent run "What is 12 * 7?"')
    cassette: LLMProvider | None = None
    engine = open_engine(engine_url) if engine_url is not None else None
    why_not = _why_no_input(no_input=no_input, as_json=as_json, console=console)
    if engine is not None and why_not is None:
        why_not = "--engine: a worker runs the run and cannot ask here; as with --no-input"
    approver = TerminalApprover(console) if why_not is None else None
    servers = mcp_servers(mcp_commands)
    retriever = await _index_retriever(store, embeddings) if embeddings is not None else None
    try:
        if replay is not None:
            cassette = open_replay(replay, engine_url=engine_url)
        elif record is not None:
            cassette = open_recording(
                lambda: _real_provider(provider, base_url), record, engine_url=engine_url
            )
        agent = build_agent(
            provider=provider if cassette is None else cassette,
            base_url=base_url,
            tool_specs=tool_specs,
            tools=servers,
            store=store,
            system_prompt=system_prompt,
            retriever=retriever,
            require_approval=require_approval,
            approval_handler=approver,
            usage_limits=usage_limits,
            engine=engine,
        )
        if servers:
            await open_agent_tools(agent, require_approval)
        thread = thread_id or new_thread_id()
        label = provider if base_url is None else f"{provider} at {base_url}"
        if replay is not None and cassette is not None:
            label = f"replay of {replay} ({cassette.name}:{cassette.model}, offline)"
        elif record is not None:
            label = f"{label}, recording to {record}"
        header = RunHeader(query=query, thread_id=thread, model_label=label, store=store.describe())
        run = AgentRun(
            query,
            thread,
            header,
            as_json,
            approver=approver,
            no_input_reason=None if no_input else why_not,
            agent_args=agent_options(provider, base_url, tool_specs, system_prompt, mcp_commands),
            store_args=store_options(store),
        )
        try:
            return await execute(agent, run, console=console)
        except ToolSourceError as error:
            raise CLIError(f"--mcp: {error.message}") from None
    finally:
        if cassette is not None:
            # Not closed by the agent (a provider given to it stays open): closing it now ends
            # the real provider's client, every call being on file already.
            await cassette.aclose()
        if retriever is not None:
            await retriever.aclose()
        if engine is not None:
            await close_engine(engine)


def mcp_servers(commands: Sequence[str]) -> list[MCPServer]:
    """An `MCPServer` per `--mcp` command line, split as a shell would split it."""
    if not commands:
        return []
    from pes_agent.mcp import MCPServer

    servers: list[MCPServer] = []
    for command in commands:
        words = shlex.split(command)
        if not words:
            raise CLIError('--mcp needs a command, e.g. --mcp "python my_server.py"')
        try:
            servers.append(MCPServer.stdio(*words))
        except ConfigurationError as error:
            raise CLIError(f"--mcp {command!r}: {error}") from None
    return servers


def _why_no_input(*, no_input: bool, as_json: bool, console: Console) -> str | None:
    """Why calls that need approval cannot be asked about here (None: they can)."""
    if no_input:
        return "--no-input"
    if as_json:
        return "--json never asks: its output is JSON only"
    if not sys.stdin.isatty():
        return "stdin is not a terminal, so nobody was asked; as with --no-input"
    if not console.is_terminal:
        return "stdout is not a terminal, so nobody was asked; as with --no-input"
    return None


def agent_options(
    provider: str,
    base_url: str | None,
    tool_specs: Sequence[str],
    system_prompt: str | None,
    mcp_commands: Sequence[str] = (),
) -> tuple[str, ...]:
    """The options that build this agent again: `pes-agent approve` must run with the same
    provider and tools (MCP servers included) as the run it resumes."""
    options = ["--provider", provider]
    if base_url is not None:
        options += ["--base-url", base_url]
    for spec in tool_specs:
        options += ["--tools", spec]
    for command in mcp_commands:
        options += ["--mcp", command]
    if system_prompt is not None:
        options += ["--system", system_prompt]
    return tuple(options)


def store_options(store: StoreLocation) -> tuple[str, ...]:
    """`--db` naming `store` when it was not the default one (a URL's password is not shown)."""
    if store.source == "default":
        return ()
    return ("--db", str(store.path) if store.path is not None else store.describe())


async def _index_retriever(store: StoreLocation, embeddings: str) -> Retriever:
    """The retriever over the index `pes-agent index` built in `store` with `embeddings`."""
    retriever = open_retriever(store, embeddings)
    try:
        indexed = await retriever.store.count()
    except PESAgentError as error:
        await retriever.aclose()
        raise CLIError(error.message) from None
    if indexed == 0:
        await retriever.aclose()
        raise CLIError(
            f"--retrieve: nothing is indexed in {store.describe()} with --embeddings "
            f"{embeddings}; run `pes-agent index PATH... --db {shlex.quote(store.describe())}` "
            "first"
        )
    return retriever


async def demo_command(
    *,
    thread_id: str,
    store: StoreLocation,
    as_json: bool,
    console: Console,
) -> ExitCode:
    """`pes-agent demo`: a whole run offline, on the scripted model and built-in tools."""
    agent = build_agent(
        provider=demo_model(),
        tools=demo_tools(),
        store=store,
    )
    header = RunHeader(
        query=DEMO_QUERY,
        thread_id=thread_id,
        model_label="scripted model (offline demo: no API key, no network)",
        scripted=True,
        store=store.describe(),
    )
    return await execute(
        agent,
        AgentRun(DEMO_QUERY, thread_id, header, as_json, store_args=store_options(store)),
        console=console,
    )
