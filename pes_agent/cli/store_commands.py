"""The commands that read a store: `threads`, `history`, `observations` and `trace`."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
import stat
import sys
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from pes_agent.cli.errors import CLIError, ExitCode
from pes_agent.cli.live import compact_json, format_duration
from pes_agent.cli.paths import StoreLocation
from pes_agent.observing.timeline import build_timeline, render_html
from pes_agent.observing.types import Observation, ObservationType
from pes_agent.storage import Storage, open_storage
from pes_agent.threads.messages import MessageRole
from pes_agent.threads.reserved import user_threads

__all__ = [
    "history_command",
    "observations_command",
    "open_existing_store",
    "parse_observation_types",
    "threads_command",
    "trace_command",
]

# The tables of the indexes `pes-agent index` (and a default `SQLiteVectorStore`) keep in the
# store's file: a file holding only those is a pes-agent file with no threads yet.
_INDEX_TABLE_PREFIXES = ("pes_index_", "pes_vectors")

_ROLE_STYLE = {
    MessageRole.USER: "bold cyan",
    MessageRole.AI: "bold green",
    MessageRole.SYSTEM: "bold magenta",
    MessageRole.TOOL: "bold yellow",
}


def write_json(data: Any) -> None:
    """Print `data` as JSON: UTF-8 where stdout takes it, ASCII escapes where it cannot
    (a C locale, a cron job) — valid and lossless either way."""
    encoding = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "")
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=encoding != "utf8") + "\n")


def _cut(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def parse_observation_types(values: Iterable[str]) -> list[ObservationType]:
    """`--type` values as observation types, in any case, `-` or `_`; an unknown one is a
    `CLIError` listing the valid types."""
    types: list[ObservationType] = []
    for value in values:
        name = value.strip().upper().replace("-", "_")
        try:
            types.append(ObservationType(name))
        except ValueError:
            valid = ", ".join(t.value for t in ObservationType)
            raise CLIError(f"unknown observation type {value!r}; valid types: {valid}") from None
    return types


@asynccontextmanager
async def open_existing_store(location: StoreLocation) -> AsyncIterator[Storage | None]:
    """The store at `location`, closed afterwards; None when its SQLite file does not exist
    or holds no threads yet (a read never creates or changes one). A file that cannot be read
    as one is a `CLIError` saying why."""
    if location.path is not None and (
        not location.path.exists() or not _holds_threads(location.path)
    ):
        yield None
        return
    # A listing leaves out a row it cannot read, with a warning naming it: show that warning
    # (the command's other log lines stay quiet), or the reader never learns the row exists.
    storage_log = logging.getLogger("pes_agent.storage")
    level = storage_log.level
    if storage_log.getEffectiveLevel() > logging.WARNING:
        storage_log.setLevel(logging.WARNING)
    storage = open_storage(location.spec)
    try:
        yield storage
    finally:
        await storage.aclose()
        storage_log.setLevel(level)


def _holds_threads(path: Path) -> bool:
    """Whether the SQLite file `path` has pes-agent's schema (False: it is empty, or holds
    only an index of `pes-agent index`); a `CLIError` saying what is wrong when it cannot be
    read as a pes-agent database. Opened read-only to look."""
    if path.is_dir():
        raise CLIError(f"{path} is a folder, not a database file: check --db / PES_AGENT_DB")
    if not os.access(path, os.R_OK):
        info = path.stat()
        raise CLIError(
            f"cannot read {path}: permission denied (it is {stat.filemode(info.st_mode)}, owned "
            f"by uid {info.st_uid}; this process runs as uid {os.geteuid()}): change its "
            "permissions, or run as its owner"
        )
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            tables = [
                str(row[0])
                for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            ]
        finally:
            conn.close()
    except sqlite3.DatabaseError as error:
        if "not a database" in str(error):
            raise CLIError(
                f"{path} is not an SQLite database; a read command never changes it: check "
                "--db / PES_AGENT_DB"
            ) from None
        raise CLIError(f"cannot read {path} as an SQLite database ({error})") from None
    if "schema_version" in tables:
        return True
    if all(name.startswith(_INDEX_TABLE_PREFIXES) for name in tables if name != "sqlite_sequence"):
        return False
    raise CLIError(
        f"{path} is not a pes-agent database (it has no pes-agent tables); a read command "
        "never changes it: check --db / PES_AGENT_DB"
    )


async def _require_thread(
    storage: Storage | None, location: StoreLocation, thread_id: str
) -> Storage:
    if storage is None:
        raise CLIError(
            f"no threads in {location.describe()}: nothing has run there yet "
            "(try `pes-agent demo`, or pass --db)"
        )
    if thread_id not in user_threads(await storage.list_threads()):
        raise CLIError(
            f"no thread {thread_id!r} in {location.describe()}; "
            "`pes-agent threads` lists the threads there"
        )
    return storage


async def threads_command(location: StoreLocation, *, console: Console, as_json: bool) -> ExitCode:
    """List the store's threads with their message count, last activity and last query."""
    async with open_existing_store(location) as storage:
        rows: list[dict[str, Any]] = []
        if storage is not None:
            # The HTTP server's own records (owners, workers) live beside the threads.
            for thread_id in user_threads(await storage.list_threads()):
                messages = await storage.get_messages(thread_id)
                last_query = next(
                    (m.content for m in reversed(messages) if m.role is MessageRole.USER), None
                )
                rows.append(
                    {
                        "thread_id": thread_id,
                        "messages": len(messages),
                        "last_activity": messages[-1].timestamp.isoformat() if messages else None,
                        "last_query": last_query,
                    }
                )
    if as_json:
        write_json(rows)
        return ExitCode.OK
    if not rows:
        console.print(
            f"no threads in {location.describe()} yet — try `pes-agent demo`",
            highlight=False,
            markup=False,
        )
        return ExitCode.OK
    table = Table(title=f"threads in {location.describe()}", title_justify="left")
    widest = max(len(row["thread_id"]) for row in rows)
    table.add_column("thread", style="cyan", no_wrap=True, min_width=widest)
    table.add_column("messages", justify="right", no_wrap=True, min_width=8)
    table.add_column("last activity", no_wrap=True)
    # rich squeezes the other columns rather than cut a long cell: cut it here.
    room = max(console.width - widest - 8 - 19 - 13, 20)
    table.add_column("last query", no_wrap=True)
    for row in rows:
        activity = row["last_activity"]
        # Text, not str: thread ids and queries are data, never rich markup.
        table.add_row(
            Text(row["thread_id"]),
            str(row["messages"]),
            activity[:19].replace("T", " ") if activity else "",
            Text(_cut(row["last_query"] or "", room)),
        )
    console.print(table)
    return ExitCode.OK


async def history_command(
    location: StoreLocation,
    thread_id: str,
    *,
    limit: int | None,
    console: Console,
    as_json: bool,
) -> ExitCode:
    """Print a thread's messages, oldest first."""
    async with open_existing_store(location) as storage:
        storage = await _require_thread(storage, location, thread_id)
        messages = await storage.get_messages(thread_id, limit=limit)
    if as_json:
        write_json([m.model_dump(mode="json") for m in messages])
        return ExitCode.OK
    if not messages:
        console.print(f"thread {thread_id!r} has no messages", highlight=False, markup=False)
    for message in messages:
        head = Text(message.role.value, style=_ROLE_STYLE.get(message.role, "bold"))
        head.append(f"  {message.timestamp.isoformat()[:19].replace('T', ' ')}", style="dim")
        status = message.metadata.get("status")
        if status:
            head.append(f"  {status}", style="dim")
        console.print(head)
        console.print(Text(message.content), highlight=False, soft_wrap=not console.is_terminal)
        console.print()
    return ExitCode.OK


async def observations_command(
    location: StoreLocation,
    thread_id: str,
    *,
    types: Sequence[ObservationType],
    trace_id: str | None,
    console: Console,
    as_json: bool,
) -> ExitCode:
    """Print a thread's observations (optionally of some types or one run) in recorded order."""
    async with open_existing_store(location) as storage:
        storage = await _require_thread(storage, location, thread_id)
        observations = await storage.get_observations(
            thread_id, types=list(types) or None, trace_id=trace_id
        )
    if as_json:
        write_json([o.model_dump(mode="json") for o in observations])
        return ExitCode.OK
    if not observations:
        console.print("no observations match", highlight=False)
    terminal = console.is_terminal
    for observation in observations:
        line = Text(observation.timestamp.strftime("%H:%M:%S.%f")[:-3], style="dim")
        line.append(f"  {observation.trace_id[:8]}  ", style="dim")
        line.append(f"{observation.type.value:<20}", style="bold")
        line.append(f" {observation.title}  ")
        line.append(compact_json(observation.content), style="dim")
        if terminal:
            line.no_wrap = True
            line.overflow = "ellipsis"
        console.print(line, highlight=False, soft_wrap=not terminal)
    return ExitCode.OK


def _pick_trace(observations: list[Observation], wanted: str | None, thread_id: str) -> str:
    traces = list(dict.fromkeys(o.trace_id for o in observations))
    if not traces:
        raise CLIError(f"thread {thread_id!r} has no recorded runs")
    if wanted is None:
        return traces[-1]
    matches = [t for t in traces if t == wanted] or [t for t in traces if t.startswith(wanted)]
    if len(matches) == 1:
        return matches[0]
    recent = ", ".join(t[:12] for t in traces[-5:])
    if not matches:
        raise CLIError(
            f"no run with trace id {wanted!r} in thread {thread_id!r}; its latest: {recent}"
        )
    raise CLIError(f"trace id {wanted!r} matches {len(matches)} runs; give more of it")


async def trace_command(
    location: StoreLocation,
    thread_id: str,
    *,
    trace_id: str | None,
    out: Path,
    console: Console,
) -> ExitCode:
    """Write the HTML timeline of one run (default: the thread's latest) to `out`."""
    async with open_existing_store(location) as storage:
        storage = await _require_thread(storage, location, thread_id)
        observations = await storage.get_observations(thread_id)
        chosen = _pick_trace(observations, trace_id, thread_id)
        messages = await storage.get_messages(thread_id)
    timeline = build_timeline(observations, chosen, messages=messages)
    try:
        await asyncio.to_thread(out.write_text, render_html(timeline), encoding="utf-8")
    except OSError as error:
        raise CLIError(f"cannot write {out}: {error.strerror or error}") from None
    tools = sum(1 for span in timeline.spans if span.kind == "tool")
    console.print(
        f"wrote {out} — run {chosen} of thread {thread_id!r}: "
        f"{len(timeline.spans) - tools} LLM calls, {tools} tool calls, "
        f"{format_duration(timeline.duration_ms)}, {timeline.status}; open it in a browser",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    return ExitCode.OK
