"""`load_snapshot`: a new turn's paused runs, config, state and history in one read, equal to
the separate reads on every backend, and through the separate reads for any other `Storage`."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from typing import Any

import pytest

from pes_agent.config import AgentState, LLMParams, RunOptions, ThreadConfig
from pes_agent.errors import StorageError, UsageError
from pes_agent.pes.settings import AgentDefaults, resolve_history_limit
from pes_agent.storage import InMemoryStorage, PostgresStorage, SQLiteStorage, Storage
from pes_agent.storage.base import HistoryLimit, ThreadSnapshot, ThreadSnapshots, load_snapshot

from .conftest import POSTGRES_URL
from .test_storage_contract import DAMAGED, ai, paused_run, user, write_raw

DEFAULTS = AgentDefaults(
    system_prompt="",
    history_limit=2,
    state_saving="implicit",
    max_concurrency=4,
    tool_timeout_s=30.0,
    max_tool_calls=10,
    llm_params=LLMParams(),
)


def run_rule(options: RunOptions | None = None) -> HistoryLimit:
    """The history limit a run with `options` on an agent with `DEFAULTS` applies."""
    return lambda config: resolve_history_limit(DEFAULTS, config, options)


async def separately(storage: Storage, thread_id: str, history_limit: HistoryLimit) -> Any:
    """The snapshot as the separate reads of the `Storage` protocol return it."""
    paused = await storage.get_paused_runs(thread_id)
    if paused:
        return ThreadSnapshot(paused, None, None, [])
    config = await storage.get_thread_config(thread_id)
    state = await storage.get_agent_state(thread_id)
    limit = history_limit(config)
    messages = [] if limit == 0 else await storage.get_messages(thread_id, limit=limit)
    return ThreadSnapshot([], config, state, messages)


class SeparateReadsOnly:
    """A `Storage` of someone else's making: an in-memory store without `load_snapshot`,
    noting each method called."""

    def __init__(self) -> None:
        self.inner = InMemoryStorage()
        self.called: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if name == "load_snapshot":
            raise AttributeError(name)
        self.called.append(name)
        return getattr(self.inner, name)


async def write_raw_config_or_state(
    storage: Storage, table: str, thread_id: str, body: str
) -> None:
    """Store `body` as the thread's config or state, past the codec."""
    if isinstance(storage, SQLiteStorage | PostgresStorage):
        await storage.initialize()  # the schema
    if isinstance(storage, SQLiteStorage):
        columns = "thread_id, config" if table == "thread_configs" else "thread_id, data, version"
        values: tuple[Any, ...] = (
            (thread_id, body)
            if table == "thread_configs"
            else (
                thread_id,
                body,
                1,
            )
        )
        with closing(sqlite3.connect(storage.path, isolation_level=None)) as conn:
            marks = ", ".join("?" * len(values))
            conn.execute(f"INSERT INTO {table} ({columns}) VALUES ({marks})", values)
    elif isinstance(storage, PostgresStorage):
        import asyncpg  # type: ignore[import-untyped]

        conn = await asyncpg.connect(POSTGRES_URL)
        try:
            if table == "thread_configs":
                sql = f'INSERT INTO "{storage.schema}".{table} VALUES ($1, $2)'
                await conn.execute(sql, thread_id, body)
            else:
                sql = f'INSERT INTO "{storage.schema}".{table} VALUES ($1, $2, 1)'
                await conn.execute(sql, thread_id, body)
        finally:
            await conn.close()
    else:
        assert isinstance(storage, InMemoryStorage)
        if table == "thread_configs":
            await storage._write_config(thread_id, body)
        else:
            await storage._write_state(thread_id, body, None)


def test_every_bundled_store_reads_snapshots() -> None:
    """The bundled stores satisfy `ThreadSnapshots`; a Storage without the method does not."""
    assert isinstance(InMemoryStorage(), ThreadSnapshots)
    assert isinstance(SQLiteStorage(":memory:"), ThreadSnapshots)
    assert not isinstance(SeparateReadsOnly(), ThreadSnapshots)
    assert isinstance(SeparateReadsOnly(), Storage)


@pytest.mark.parametrize("configured", [None, 3, 0], ids=["no-config", "config-3", "config-0"])
@pytest.mark.parametrize("with_state", [False, True], ids=["no-state", "state"])
@pytest.mark.parametrize("call_limit", [None, 1], ids=["no-option", "option-1"])
async def test_a_snapshot_equals_the_separate_reads(
    storage: Storage, configured: int | None, with_state: bool, call_limit: int | None
) -> None:
    """Config or none, state or none, the history limit from the agent, the thread's config or
    the call's options: the snapshot holds what the separate reads return."""
    if configured is not None:
        await storage.set_thread_config("t", ThreadConfig(history_limit=configured))
    if with_state:
        await storage.set_agent_state("t", AgentState(data={"step": 1}))
        await storage.set_agent_state("t", AgentState(data={"step": 2}))
    await storage.add_messages("t", [user("t", str(n)) for n in range(5)])
    await storage.add_messages("other", [user("other", "not mine")])
    await storage.save_paused_run(paused_run("other", "r1"))
    rule = run_rule(RunOptions(history_limit=call_limit))

    snapshot = await storage.load_snapshot("t", history_limit=rule)  # type: ignore[attr-defined]

    assert snapshot == await separately(storage, "t", rule)
    expected = call_limit if call_limit is not None else configured
    expected = expected if expected is not None else DEFAULTS.history_limit
    assert [m.content for m in snapshot.messages] == [str(n) for n in range(5)][5 - expected :]
    assert snapshot.state == (AgentState(data={"step": 2}, version=2) if with_state else None)


async def test_an_unknown_thread_reads_as_empty(storage: Storage) -> None:
    """A thread with nothing stored: no paused run, config, state or message."""
    snapshot = await load_snapshot(storage, "nobody", history_limit=lambda config: None)
    assert snapshot == ThreadSnapshot([], None, None, [])


async def test_a_none_limit_reads_the_whole_history(storage: Storage) -> None:
    """A history limit of None reads every message, as `get_messages(limit=None)` does."""
    everything = [user("t", str(n)) for n in range(4)]
    await storage.add_messages("t", everything)
    snapshot = await load_snapshot(storage, "t", history_limit=lambda config: None)
    assert snapshot.messages == everything


async def test_a_waiting_run_is_all_a_snapshot_reads(storage: Storage) -> None:
    """With a run waiting for approval, the snapshot holds the paused runs (as
    `get_paused_runs` lists them) and nothing else, even when the thread's config is damaged."""
    await storage.add_messages("t", [user("t", "hello")])
    await storage.save_paused_run(first := paused_run("t", "r1"))
    await storage.save_paused_run(second := paused_run("t", "r2"))
    await write_raw_config_or_state(storage, "thread_configs", "t", '{"history_limit": "many"}')

    snapshot = await load_snapshot(storage, "t", history_limit=run_rule())

    assert snapshot == ThreadSnapshot([first, second], None, None, [])
    assert snapshot.paused == await storage.get_paused_runs("t")


@pytest.mark.parametrize(
    ("table", "body"),
    [
        ("thread_configs", '{"history_limit": "many"}'),
        ("thread_configs", '{"no_such_setting": 1}'),
        ("agent_states", "[1, 2]"),
    ],
)
async def test_a_damaged_config_or_state_raises_as_its_own_read_does(
    storage: Storage, table: str, body: str
) -> None:
    """A config or state that cannot be read is the same StorageError, naming the store,
    table and thread, as `get_thread_config` or `get_agent_state` raises."""
    await write_raw_config_or_state(storage, table, "t", body)
    read_alone = storage.get_thread_config if table == "thread_configs" else storage.get_agent_state
    with pytest.raises(StorageError) as alone:
        await read_alone("t")
    with pytest.raises(StorageError) as together:
        await load_snapshot(storage, "t", history_limit=run_rule())
    assert str(together.value) == str(alone.value)
    assert f"table {table!r}" in str(together.value)
    assert "thread 't'" in str(together.value)


async def test_damaged_messages_cost_a_snapshot_no_message(
    storage: Storage, caplog: pytest.LogCaptureFixture
) -> None:
    """Damaged rows among the newest are left out with a warning and the snapshot reaches
    further back, as `get_messages` does."""
    first, second, third = user("t", "first"), ai("t", "second"), user("t", "third")
    await storage.add_messages("t", [first, second])
    for key, body in DAMAGED.items():
        await write_raw(storage, "messages", "t", key, body)
    await storage.add_messages("t", [third])

    snapshot = await load_snapshot(storage, "t", history_limit=lambda config: 2)

    assert snapshot.messages == [second, third]
    assert snapshot.messages == await storage.get_messages("t", limit=2)
    assert any("storage_row_skipped" in r.getMessage() for r in caplog.records)


async def test_only_damaged_paused_runs_leave_the_rest_to_read(storage: Storage) -> None:
    """A waiting run that cannot be read is left out: with no readable one, the snapshot
    holds the config, state and history as if none waited."""
    await storage.set_thread_config("t", ThreadConfig(history_limit=1))
    await storage.add_messages("t", [user("t", "old"), user("t", "new")])
    await write_raw(storage, "paused_runs", "t", "broken", DAMAGED["wrong-shape"])

    snapshot = await load_snapshot(storage, "t", history_limit=run_rule())

    assert snapshot == await separately(storage, "t", run_rule())
    assert snapshot.config == ThreadConfig(history_limit=1)
    assert [m.content for m in snapshot.messages] == ["new"]


@pytest.mark.parametrize("limit", [-1, 1.5, True])
async def test_a_bad_history_limit_is_a_usage_error(storage: Storage, limit: Any) -> None:
    """A history limit that is neither None nor an int >= 0 is refused as `get_messages`
    refuses it."""
    await storage.add_messages("t", [user("t", "hello")])
    with pytest.raises(UsageError, match="limit must be"):
        await load_snapshot(storage, "t", history_limit=lambda config: limit)


async def test_a_storage_without_snapshots_is_read_with_the_separate_calls() -> None:
    """`load_snapshot` on a Storage lacking the method reads it with the protocol's calls,
    to the same result."""
    custom = SeparateReadsOnly()
    await custom.inner.set_thread_config("t", ThreadConfig(history_limit=1))
    await custom.inner.set_agent_state("t", AgentState(data={"a": 1}))
    await custom.inner.add_messages("t", [user("t", "old"), user("t", "new")])

    snapshot = await load_snapshot(custom, "t", history_limit=run_rule())  # type: ignore[arg-type]

    assert snapshot == await separately(custom.inner, "t", run_rule())
    assert custom.called == [
        "get_paused_runs",
        "get_thread_config",
        "get_agent_state",
        "get_messages",
    ]
    await custom.inner.save_paused_run(waiting := paused_run("t", "r1"))
    blocked = await load_snapshot(custom, "t", history_limit=run_rule())  # type: ignore[arg-type]
    assert blocked == ThreadSnapshot([waiting], None, None, [])


async def test_a_snapshot_after_aclose_raises_the_usage_error(storage: Storage) -> None:
    """Like every other method, a closed store refuses to read a snapshot."""
    await storage.aclose()
    with pytest.raises(UsageError, match="closed"):
        await load_snapshot(storage, "t", history_limit=run_rule())
