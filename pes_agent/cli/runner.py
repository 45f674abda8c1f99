"""The commands that run the agent: `run` (a real model) and `demo` (the scripted one)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.text import Text

from pes_agent.cli.demo import DEMO_QUERY, demo_model, demo_tools
from pes_agent.cli.errors import CLIError, ExitCode, exit_code_for, report
from pes_agent.cli.index import open_retriever
from pes_agent.cli.live import RunHeader, make_view
from pes_agent.cli.paths import StoreLocation
from pes_agent.cli.store_commands import write_json
from pes_agent.cli.tool_loading import load_tools
from pes_agent.config import ProviderConfig
from pes_agent.core import AgentCore
from pes_agent.errors import ConfigurationError, PESAgentError, UsageError
from pes_agent.factory import create_agent
from pes_agent.providers.base import LLMProvider
from pes_agent.retrieval.retriever import Retriever
from pes_agent.run import AgentFinalResponse, AgentProps

__all__ = ["AgentRun", "build_agent", "demo_command", "new_thread_id", "run_command"]

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
    message = str(error)
    if variable is not None and variable in message:
        return (
            f"no API key for {provider}: set {variable} "
            "(or try `pes-agent demo`, which runs offline with no key)"
        )
    if "key" in message.lower():
        return f"{message} (or try `pes-agent demo`, which runs offline with no key)"
    return None


def build_agent(
    *,
    provider: str | LLMProvider,
    base_url: str | None = None,
    tool_specs: Sequence[str] = (),
    tools: Sequence[Any] = (),
    store: StoreLocation,
    system_prompt: str | None = None,
    retriever: Retriever | None = None,
) -> AgentCore:
    """An agent for the command line; every configuration mistake becomes a one-line `CLIError`."""
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
        return create_agent(
            provider=spec,
            tools=all_tools,
            storage=store.spec,
            system_prompt=system_prompt,
            retriever=retriever,
        )
    except ConfigurationError as error:
        hint = _key_hint(provider, error) if isinstance(provider, str) else None
        raise CLIError(hint or str(error)) from None
    except UsageError as error:
        raise CLIError(str(error)) from None


@dataclass(frozen=True, slots=True)
class AgentRun:
    """One query to run on a thread, and how to show it."""

    query: str
    thread_id: str
    header: RunHeader
    as_json: bool


async def _process(agent: AgentCore, run: AgentRun, console: Console) -> AgentFinalResponse:
    props = AgentProps(run.query, run.thread_id)
    if run.as_json:
        return await agent.process(props)
    view = make_view(console, run.header)
    with view:
        detach = view.attach(agent, run.thread_id)
        try:
            result = await agent.process(props)
        except asyncio.CancelledError:
            view.cancel()
            raise
        finally:
            detach()
        view.finish(result)
    return result


async def execute(agent: AgentCore, run: AgentRun, *, console: Console) -> ExitCode:
    """Run `run` on `agent` (closing it afterwards), show it, and return the exit code."""
    async with agent:
        result = await _process(agent, run, console)
    metadata = result.metadata
    if run.as_json:
        write_json(result.model_dump(mode="json"))
    else:
        hint = Text(
            f"thread {run.thread_id} · continue it with --thread {run.thread_id} · "
            f"timeline: pes-agent trace {run.thread_id} --html trace.html",
            style="dim",
        )
        console.print(hint, highlight=False, soft_wrap=True)
    if metadata.status == "error":
        report(f"the run failed: {metadata.error}")
    return exit_code_for(metadata.status)


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
) -> ExitCode:
    """`pes-agent run`: answer `query` with a real model; with `embeddings` (`--retrieve`),
    searching the index of `store` built with those embeddings first."""
    if not query.strip():
        raise CLIError('the query is empty; e.g. pes-agent run "What is 12 * 7?"')
    retriever = await _index_retriever(store, embeddings) if embeddings is not None else None
    try:
        agent = build_agent(
            provider=provider,
            base_url=base_url,
            tool_specs=tool_specs,
            store=store,
            system_prompt=system_prompt,
            retriever=retriever,
        )
        thread = thread_id or new_thread_id()
        label = provider if base_url is None else f"{provider} at {base_url}"
        header = RunHeader(query=query, thread_id=thread, model_label=label, store=store.describe())
        return await execute(
            agent,
            AgentRun(query, thread, header, as_json),
            console=console,
        )
    finally:
        if retriever is not None:
            await retriever.aclose()


async def _index_retriever(store: StoreLocation, embeddings: str) -> Retriever:
    """The retriever over the index `pes-agent index` built in `store` with `embeddings`."""
    retriever = open_retriever(store, embeddings)
    try:
        indexed = await retriever.store.count()
    except PESAgentError as error:
        await retriever.aclose()
        raise CLIError(str(error)) from None
    if indexed == 0:
        await retriever.aclose()
        raise CLIError(
            f"--retrieve: nothing is indexed in {store.describe()} with --embeddings "
            f"{embeddings}; run `pes-agent index PATH... --db {store.describe()}` first"
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
        AgentRun(DEMO_QUERY, thread_id, header, as_json),
        console=console,
    )
