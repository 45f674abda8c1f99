"""The commands for runs that wait for a person: `approve`, `pending` and `cancel`.

`pes-agent run --no-input` (or a run with no terminal to ask at) pauses when a call needs
approval and exits with code 4; the paused run is kept in the store. `approve THREAD` resumes it
(every pending call approved unless `--deny CALL_ID[=REASON]`), showing the rest of the run live;
it needs the same `--provider` and `--tools` as the run, since it runs the tools and writes the
answer. `pending [THREAD]` lists the waiting runs and `cancel THREAD` drops them.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from rich.console import Console
from rich.text import Text

from pes_agent.approvals import Approve, Decision, Deny, PausedRun
from pes_agent.cli.errors import CLIError, ExitCode
from pes_agent.cli.live import RunHeader, compact_json
from pes_agent.cli.paths import StoreLocation
from pes_agent.cli.runner import (
    AgentRun,
    agent_options,
    build_agent,
    execute,
    mcp_servers,
    open_agent_tools,
    store_options,
)
from pes_agent.cli.store_commands import open_existing_store, write_json
from pes_agent.factory import create_agent
from pes_agent.testing import ScriptedProvider

__all__ = [
    "approve_command",
    "cancel_command",
    "decisions_for",
    "parse_denials",
    "pending_command",
]


def parse_denials(values: Sequence[str]) -> dict[str, str | None]:
    """`--deny CALL_ID[=REASON]` values as call id -> reason (None: no reason given)."""
    denials: dict[str, str | None] = {}
    for value in values:
        call_id, sep, reason = value.partition("=")
        call_id = call_id.strip()
        if not call_id:
            raise CLIError(
                f"--deny {value!r}: write CALL_ID or CALL_ID=REASON, e.g. call_1=too much"
            )
        denials[call_id] = (reason.strip() or None) if sep else None
    return denials


def decisions_for(paused: PausedRun, denials: Mapping[str, str | None]) -> dict[str, Decision]:
    """A decision for each pending call of `paused`: denied when `denials` names it, else
    approved. A denial naming a call that does not wait is a `CLIError` listing those that do."""
    waiting = [p.call_id for p in paused.pending]
    unknown = [call_id for call_id in denials if call_id not in waiting]
    if unknown:
        raise CLIError(
            f"--deny {unknown[0]}: no such call waits for approval in this run; "
            f"the pending calls: {', '.join(waiting)}"
        )
    decisions: dict[str, Decision] = {}
    for call_id in waiting:
        if call_id not in denials:
            decisions[call_id] = Approve()
        else:
            reason = denials[call_id]
            decisions[call_id] = Deny() if reason is None else Deny(reason)
    return decisions


async def _waiting_runs(store: StoreLocation, thread_id: str | None) -> list[PausedRun]:
    async with open_existing_store(store) as storage:
        if storage is None:
            return []
        return await storage.get_paused_runs(thread_id)


async def _paused_run(store: StoreLocation, thread_id: str, trace_id: str | None) -> PausedRun:
    """The run of `thread_id` waiting for approval (the one of `trace_id`, or its prefix)."""
    runs = await _waiting_runs(store, thread_id)
    if trace_id is not None:
        runs = [r for r in runs if r.trace_id == trace_id] or [
            r for r in runs if r.trace_id.startswith(trace_id)
        ]
    if not runs:
        which = f" with trace {trace_id!r}" if trace_id is not None else ""
        raise CLIError(
            f"no run{which} waits for approval on thread {thread_id!r} in {store.describe()}; "
            "`pes-agent pending` lists the runs that do"
        )
    if len(runs) > 1:
        traces = ", ".join(r.trace_id[:12] for r in runs)
        raise CLIError(
            f"{len(runs)} runs wait for approval on thread {thread_id!r} ({traces}); "
            "choose one with --trace"
        )
    return runs[0]


async def approve_command(
    *,
    thread_id: str,
    denials: Mapping[str, str | None],
    trace_id: str | None,
    provider: str,
    base_url: str | None,
    tool_specs: Sequence[str],
    system_prompt: str | None,
    store: StoreLocation,
    as_json: bool,
    console: Console,
    mcp_commands: Sequence[str] = (),
) -> ExitCode:
    """`pes-agent approve`: resume the thread's paused run, every pending call approved except
    those in `denials`, and show the rest of the run. `mcp_commands` start the same MCP
    servers (`--mcp`) as the run had, when its remaining calls are their tools."""
    paused = await _paused_run(store, thread_id, trace_id)
    decisions = decisions_for(paused, denials)
    agent = build_agent(
        provider=provider,
        base_url=base_url,
        tool_specs=tool_specs,
        tools=mcp_servers(mcp_commands),
        store=store,
        system_prompt=system_prompt,
    )
    # The servers' tools are known once they are open: before checking what is missing.
    await open_agent_tools(agent)
    finished = set(paused.results) | set(paused.replaced_steps)
    needed = {
        call.tool_name
        for step, call in enumerate(paused.calls, start=1)
        if step not in finished and call.instruction is None
    }
    missing = sorted(needed - set(agent.tools.names))
    if missing:
        await agent.aclose()
        raise CLIError(
            f"the paused run calls {', '.join(missing)}, which no --tools provides here; "
            "pass the same --tools and --mcp (and --provider) as the run"
        )
    label = provider if base_url is None else f"{provider} at {base_url}"
    header = RunHeader(
        query=paused.props.query,
        thread_id=thread_id,
        model_label=label,
        store=store.describe(),
        resumed=True,
    )
    run = AgentRun(
        paused.props.query,
        thread_id,
        header,
        as_json,
        agent_args=agent_options(provider, base_url, tool_specs, system_prompt, mcp_commands),
        store_args=store_options(store),
        paused=paused,
        decisions=decisions,
    )
    return await execute(agent, run, console=console)


def _when(paused: PausedRun) -> str:
    since = paused.created_at.isoformat(timespec="seconds").replace("+00:00", "Z")
    if paused.deadline is None:
        return f"since {since}"
    deadline = paused.deadline.isoformat(timespec="seconds").replace("+00:00", "Z")
    return f"since {since} · expires {deadline}"


async def pending_command(
    store: StoreLocation, thread_id: str | None, *, console: Console, as_json: bool
) -> ExitCode:
    """`pes-agent pending`: the runs waiting for approval (of one thread, or all)."""
    runs = await _waiting_runs(store, thread_id)
    if as_json:
        write_json(
            [
                {
                    "thread_id": r.thread_id,
                    "trace_id": r.trace_id,
                    "query": r.props.query,
                    "created_at": r.created_at.isoformat(),
                    "deadline": None if r.deadline is None else r.deadline.isoformat(),
                    "pending": [p.model_dump(mode="json") for p in r.pending],
                }
                for r in runs
            ]
        )
        return ExitCode.OK
    if not runs:
        where = f"on thread {thread_id!r}" if thread_id is not None else "anywhere"
        console.print(
            f"no run waits for approval {where} in {store.describe()}",
            highlight=False,
            markup=False,
        )
        return ExitCode.OK
    for paused in runs:
        head = Text("⏸ thread ", style="bold magenta")
        head.append(paused.thread_id, style="bold cyan")
        head.append(f" · trace {paused.trace_id} · {_when(paused)}", style="dim")
        console.print(head, highlight=False, soft_wrap=True)
        console.print(Text("  query ", style="bold").append(paused.props.query), highlight=False)
        for call in paused.pending:
            line = Text(f"  {call.call_id} ", style="cyan")
            line.append(call.tool_name, style="bold")
            line.append(f" {compact_json(call.arguments)}")
            if not call.resolved:
                line.append("  (arguments resolved once the calls before it run)", style="dim")
            console.print(line, highlight=False, soft_wrap=True)
        db = shlex.join(store_options(store))
        hint = (
            f"  pes-agent approve {shlex.quote(paused.thread_id)} [--deny CALL_ID[=REASON]] "
            f"[--provider ... --tools ..., as the run] {db} · "
            f"pes-agent cancel {shlex.quote(paused.thread_id)} {db}"
        ).rstrip()
        console.print(Text(hint, style="dim"), highlight=False, soft_wrap=True)
    return ExitCode.OK


async def cancel_command(store: StoreLocation, thread_id: str, *, console: Console) -> ExitCode:
    """`pes-agent cancel`: end the thread's runs waiting for approval; none of their pending
    calls runs."""
    if not await _waiting_runs(store, thread_id):
        raise CLIError(
            f"no run waits for approval on thread {thread_id!r} in {store.describe()}; "
            "`pes-agent pending` lists the runs that do"
        )
    # Cancelling makes no model call: a provider with nothing to say is enough.
    agent = create_agent(provider=ScriptedProvider([]), storage=store.spec)
    async with agent:
        cancelled = await agent.cancel_pending(thread_id)
    for paused in cancelled:
        calls = ", ".join(f"{p.call_id} {p.tool_name}" for p in paused.pending)
        console.print(
            Text(f"cancelled run {paused.trace_id} of thread {thread_id!r}; never ran: {calls}"),
            highlight=False,
            soft_wrap=True,
        )
    return ExitCode.OK
