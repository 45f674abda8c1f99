"""SQLiteStorage specifics: WAL, the event loop, schema versions, lock files."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sqlite3
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from pes_agent import (
    AgentProps,
    ConversationManager,
    ObservationManager,
    StateManager,
    ThreadConfig,
    create_agent,
)
from pes_agent.config import AgentState
from pes_agent.errors import ConfigurationError, StateConflictError, StorageError, UsageError
from pes_agent.observing.types import Observation, ObservationType
from pes_agent.storage import SQLiteStorage
from pes_agent.storage import sqlite as sqlite_module
from pes_agent.storage._codec import dump_observation
from pes_agent.storage._common import ObservationRow
from pes_agent.storage._filelock import ThreadRangeLocks
from pes_agent.testing import ScriptedProvider
from pes_agent.threads.messages import ConversationMessage, MessageRole

from .conftest import assert_holds_exclude


def message(thread_id: str, content: str) -> ConversationMessage:
    return ConversationMessage(thread_id=thread_id, role=MessageRole.USER, content=content)


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


async def test_database_is_created_in_wal_mode_with_its_schema_version(tmp_path: Path) -> None:
    """First use creates the file in WAL mode and records the current schema version."""
    path = tmp_path / "agent.db"
    async with SQLiteStorage(path) as storage:
        await storage.add_messages("t", [message("t", "x")])
    conn = raw(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [
            (sqlite_module.SCHEMA_VERSION,)
        ]
    finally:
        conn.close()


async def test_newer_schema_version_is_a_clear_error(tmp_path: Path) -> None:
    """A file written by a newer pes-agent is refused, naming both versions, and left as it is."""
    path = tmp_path / "agent.db"
    async with SQLiteStorage(path) as storage:
        await storage.list_threads()
    conn = raw(path)
    conn.execute("UPDATE schema_version SET version = 99")
    conn.close()

    storage = SQLiteStorage(path)
    newer = rf"schema version 99, newer than the {sqlite_module.SCHEMA_VERSION}"
    with pytest.raises(ConfigurationError, match=newer) as caught:
        await storage.get_messages("t")
    assert "upgrade pes-agent" in str(caught.value)
    await storage.aclose()
    conn = raw(path)
    assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == 99
    conn.close()


async def test_older_schema_is_migrated_step_by_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file at the current version is upgraded by later migration steps and keeps its data."""
    path = tmp_path / "agent.db"
    async with SQLiteStorage(path) as storage:
        await storage.add_messages("t", [message("t", "kept")])

    current = sqlite_module.SCHEMA_VERSION
    migrations = {
        **sqlite_module.MIGRATIONS,
        current + 1: ("CREATE TABLE extra_next (x INTEGER)",),
        current + 2: ("ALTER TABLE extra_next ADD COLUMN y TEXT",),
    }
    monkeypatch.setattr(sqlite_module, "MIGRATIONS", migrations)
    monkeypatch.setattr(sqlite_module, "SCHEMA_VERSION", current + 2)
    async with SQLiteStorage(path) as storage:
        assert [m.content for m in await storage.get_messages("t")] == ["kept"]
    conn = raw(path)
    try:
        assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == current + 2
        assert [row[1] for row in conn.execute("PRAGMA table_info(extra_next)")] == ["x", "y"]
    finally:
        conn.close()


async def test_a_version_1_file_is_migrated_and_its_turns_become_idempotent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file written before turns were recorded by trace id is migrated on open, keeps its
    history and state, and then commits a trace once."""
    path = tmp_path / "agent.db"
    with monkeypatch.context() as old:
        old.setattr(sqlite_module, "MIGRATIONS", {1: sqlite_module.MIGRATIONS[1]})
        old.setattr(sqlite_module, "SCHEMA_VERSION", 1)
        async with SQLiteStorage(path) as storage:
            await storage.commit_turn("t", [message("t", "kept")], AgentState(data={"n": 1}))
    async with SQLiteStorage(path) as storage:
        assert [m.content for m in await storage.get_messages("t")] == ["kept"]
        for _ in range(2):
            saved = await storage.commit_turn(
                "t", [message("t", "once")], AgentState(data={"n": 2}), trace_id="r"
            )
            assert saved == AgentState(data={"n": 2}, version=2)
        assert [m.content for m in await storage.get_messages("t")] == ["kept", "once"]
    conn = raw(path)
    try:
        version = conn.execute("SELECT version FROM schema_version").fetchone()[0]
        assert version == sqlite_module.SCHEMA_VERSION
    finally:
        conn.close()


async def test_a_file_that_is_not_a_database_is_a_configuration_error(tmp_path: Path) -> None:
    """Pointing the store at some other file fails clearly instead of damaging it."""
    path = tmp_path / "notes.txt"
    path.write_text("not a database " * 100)
    storage = SQLiteStorage(path)
    with pytest.raises(ConfigurationError, match=r"notes\.txt"):
        await storage.list_threads()
    await storage.aclose()
    assert path.read_text().startswith("not a database")


async def test_a_missing_directory_is_a_configuration_error(tmp_path: Path) -> None:
    """A path in a folder that does not exist names the folder."""
    storage = SQLiteStorage(tmp_path / "missing" / "agent.db")
    with pytest.raises(ConfigurationError, match=f"the folder {tmp_path}/missing does not exist"):
        await storage.list_threads()
    await storage.aclose()


async def test_waiting_for_a_busy_database_does_not_block_the_event_loop(tmp_path: Path) -> None:
    """While another connection holds the write lock, a write waits but the loop keeps running."""
    path = tmp_path / "agent.db"
    async with SQLiteStorage(path) as storage:
        blocker = raw(path)
        blocker.execute("BEGIN IMMEDIATE")
        write = asyncio.create_task(storage.set_agent_state("t", AgentState(data={"a": 1})))
        ticks = 0
        for _ in range(20):
            await asyncio.sleep(0.005)
            ticks += 1
        assert not write.done()
        assert ticks == 20
        blocker.execute("COMMIT")
        blocker.close()
        assert (await write).version == 1


@pytest.mark.skipif(sys.platform != "linux", reason="OFD locks are Linux's")
async def test_thread_locks_share_a_few_lock_files_that_stay(tmp_path: Path) -> None:
    """On Linux, every held thread is a byte of a few `<db>-locks/threads-NN` files, which stay:
    no file is made and deleted per thread."""
    storage = SQLiteStorage(tmp_path / "agent.db")
    locks = tmp_path / "agent.db-locks"
    threads = [f"thread-{i}" for i in range(200)]
    async with contextlib.AsyncExitStack() as stack:
        for thread_id in threads:
            await stack.enter_async_context(storage.lock_thread(thread_id))
        held = sorted(p.name for p in locks.iterdir())
    shards = {ThreadRangeLocks.place_for(thread_id)[0] for thread_id in threads}
    assert held == sorted(f"threads-{n:02d}" for n in shards)
    assert sorted(p.name for p in locks.iterdir()) == held
    await storage.aclose()


async def test_two_stores_in_one_process_exclude_each_other_on_a_thread(tmp_path: Path) -> None:
    """A second storage object on the same file waits for the first's hold of a thread, and
    not for its hold of another thread."""
    first = SQLiteStorage(tmp_path / "agent.db")
    second = SQLiteStorage(tmp_path / "agent.db")
    await assert_holds_exclude(first.lock_thread, second.lock_thread)
    await first.aclose()
    await second.aclose()


async def test_a_turn_of_more_messages_than_one_insert_takes_keeps_their_order(
    tmp_path: Path,
) -> None:
    """A turn of 700 messages (three multi-row INSERTs) is saved whole, in order."""
    storage = SQLiteStorage(tmp_path / "agent.db")
    turn = [message("t", f"m{i}") for i in range(700)]
    await storage.commit_turn("t", turn, AgentState(data={"n": 1}), trace_id="run-1")
    assert [m.content for m in await storage.get_messages("t")] == [f"m{i}" for i in range(700)]
    again = await storage.commit_turn("t", turn[:1], AgentState(data={"n": 2}), trace_id="run-1")
    assert again is not None
    assert (again.data, again.version) == ({"n": 1}, 1)
    await storage.aclose()


async def test_closed_store_refuses_further_use(tmp_path: Path) -> None:
    """Using a store after aclose is a usage error telling to open a new one."""
    storage = SQLiteStorage(tmp_path / "agent.db")
    await storage.list_threads()
    await storage.aclose()
    with pytest.raises(UsageError, match="closed"):
        await storage.list_threads()


async def test_damaged_rows_are_storage_errors_naming_store_thread_and_table(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A config or state another program damaged reads as a StorageError naming the store, the
    thread and the table, never a raw pydantic or JSON error; a listing leaves a damaged row
    out with a warning that names them."""
    path = tmp_path / "agent.db"
    storage = SQLiteStorage(path)
    state = StateManager(storage)
    conversation = ConversationManager(storage)
    observations = ObservationManager(storage)
    await state.set_thread_config("t", ThreadConfig(history_limit=2))
    await state.set_agent_state("t", AgentState(data={"n": 1}))
    await conversation.add_messages("t", [message("t", "hi")])
    await observations.record(thread_id="t", trace_id="r", type=ObservationType.PLAN, title="p")
    await observations.get_observations("t")  # written before the file is tampered with
    conn = raw(path)
    conn.execute("UPDATE thread_configs SET config = '[1, 2]'")
    conn.execute("UPDATE agent_states SET data = '{\"broken'")
    conn.execute('UPDATE messages SET body = \'{"role": "nobody"}\'')
    conn.execute("UPDATE observations SET body = 'not json'")
    conn.close()

    reads = {
        "thread_configs": lambda: state.get_thread_config("t"),
        "agent_states": lambda: state.get_agent_state("t"),
    }
    for table, read in reads.items():
        with pytest.raises(StorageError) as caught:
            await read()
        text = str(caught.value)
        assert f"SQLiteStorage({str(path)!r})" in text
        assert f"table {table!r}" in text
        assert "thread 't'" in text
        assert caught.value.thread_id == "t"
        assert not caught.value.transient
    assert await conversation.get_messages("t") == []
    assert await observations.get_observations("t") == []
    for table in ("messages", "observations"):
        [warning] = [r.getMessage() for r in caplog.records if f"table {table!r}" in r.getMessage()]
        assert "storage_row_skipped" in warning
        assert f"SQLiteStorage({str(path)!r})" in warning
        assert "thread 't'" in warning
    await storage.aclose()


async def test_a_state_whose_version_is_damaged_is_a_storage_error(tmp_path: Path) -> None:
    """A state row whose version another program made text reads as a StorageError naming the
    table, never a raw ValueError."""
    path = tmp_path / "agent.db"
    async with SQLiteStorage(path) as storage:
        await storage.set_agent_state("t", AgentState(data={"n": 1}))
        conn = raw(path)
        conn.execute("UPDATE agent_states SET version = 'two'")
        conn.close()
        with pytest.raises(StorageError, match="table 'agent_states'"):
            await storage.get_agent_state("t")


async def test_a_run_on_a_damaged_thread_returns_an_error_result(tmp_path: Path) -> None:
    """process() on a thread whose stored state is damaged answers with status error naming
    the table instead of raising."""
    path = tmp_path / "agent.db"
    async with SQLiteStorage(path) as storage:
        await storage.set_agent_state("t", AgentState(data={"n": 1}))
        conn = raw(path)
        conn.execute("UPDATE agent_states SET data = '[1]'")
        conn.close()
        agent = create_agent(provider=ScriptedProvider(['{"intent": "x"}', "ok"]), storage=storage)
        async with agent:
            result = await agent.process(AgentProps("q", "t"))
    assert result.metadata.status == "error"
    assert result.metadata.error is not None
    assert "agent_states" in result.metadata.error


async def test_a_batch_of_observations_longer_than_one_insert_keeps_its_order(
    tmp_path: Path,
) -> None:
    """The writer thread writes the observations queued meanwhile in one transaction, in
    multi-row INSERTs of at most `_MOST_ROWS` rows: a longer batch lands whole, in the
    order recorded."""
    store = SQLiteStorage(str(tmp_path / "batch.db"))
    count = 2 * sqlite_module._MOST_ROWS + 300 + 7
    observations = [
        Observation(
            thread_id="t", trace_id="r", type=ObservationType.PLAN, title=str(i), content={}
        )
        for i in range(count)
    ]
    rows = [
        ObservationRow(o.id, o.thread_id, o.trace_id, o.type.value, dump_observation(o))
        for o in observations
    ]
    try:
        await store._call(functools.partial(sqlite_module._insert_observations, rows=rows))
        found = await store.get_observations("t")
    finally:
        await store.aclose()
    assert [o.title for o in found] == [str(i) for i in range(count)]


def test_observation_batches_take_few_insert_statements_of_few_sizes() -> None:
    """A batch is split into as few INSERTs as the limit allows, of sizes from a small set:
    every count up to 64, then powers of two."""
    chunks = sqlite_module._observation_chunks
    assert chunks(0, 1024) == []
    assert chunks(14, 1024) == [14]
    assert chunks(1800, 1024) == [1024, 512, 256, 8]
    assert chunks(2100, 128) == [128] * 16 + [52]
    sizes = {size for count in range(1, 5000) for size in chunks(count, 1024)}
    assert sizes <= set(range(1, 65)) | {128, 256, 512, 1024}


async def test_the_database_thread_hands_each_caller_its_own_outcome() -> None:
    """Calls queued at once from a busy loop each get their own result or exception, and a
    cancelled caller does not stop the others'."""
    worker = sqlite_module._DatabaseThread("test")

    def fail() -> int:
        raise ValueError("no")

    calls = [
        asyncio.ensure_future(worker.call(fail if i % 7 == 0 else functools.partial(int, i)))
        for i in range(500)
    ]
    calls[3].cancel()
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    worker.stop()
    for i, outcome in enumerate(outcomes):
        if i == 3:
            assert isinstance(outcome, asyncio.CancelledError)
        elif i % 7 == 0:
            assert isinstance(outcome, ValueError)
        else:
            assert outcome == i


def test_the_database_thread_serves_several_event_loops() -> None:
    """Loops in two threads calling one database thread at once each get their results."""
    worker = sqlite_module._DatabaseThread("test")

    async def many(offset: int) -> list[int]:
        return list(
            await asyncio.gather(
                *(worker.call(functools.partial(int, offset + i)) for i in range(300))
            )
        )

    results: dict[int, list[int]] = {}

    def run(offset: int) -> None:
        results[offset] = asyncio.run(many(offset))

    threads = [threading.Thread(target=run, args=(offset,)) for offset in (0, 1000)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    worker.stop()
    assert results == {0: list(range(300)), 1000: list(range(1000, 1300))}


async def _commit_all_at_once(
    storage: SQLiteStorage, commits: list[Any]
) -> tuple[list[Any], list[str]]:
    """Run `commits` (coroutine functions) while the database thread is held busy, so their
    turns queue up and are written as one batch; their outcomes and the SQL that ran."""
    statements: list[str] = []
    await storage._call(lambda conn: conn.set_trace_callback(statements.append))
    release = threading.Event()
    storage._worker_thread().submit(functools.partial(release.wait, 10))
    pending = [asyncio.ensure_future(commit()) for commit in commits]
    await asyncio.sleep(0.05)
    release.set()
    outcomes = await asyncio.gather(*pending, return_exceptions=True)
    await storage._call(lambda conn: conn.set_trace_callback(None))
    return outcomes, statements


async def test_turns_committed_at_once_are_written_in_one_transaction(tmp_path: Path) -> None:
    """Turns queued together are written in one transaction, each as it would alone."""
    storage = SQLiteStorage(tmp_path / "agent.db")
    commits = [
        functools.partial(
            storage.commit_turn,
            f"t{i}",
            [message(f"t{i}", f"q{i}"), message(f"t{i}", f"a{i}")],
            AgentState(data={"i": i}) if i % 2 else None,
            trace_id=f"run-{i}",
        )
        for i in range(50)
    ]
    outcomes, statements = await _commit_all_at_once(storage, commits)
    assert statements.count("BEGIN IMMEDIATE") == 1
    for i, outcome in enumerate(outcomes):
        if i % 2:
            assert isinstance(outcome, AgentState)
            assert (outcome.data, outcome.version) == ({"i": i}, 1)
        else:
            assert outcome is None
        assert [m.content for m in await storage.get_messages(f"t{i}")] == [f"q{i}", f"a{i}"]
    replayed = await storage.commit_turn("t1", [message("t1", "x")], None, trace_id="run-1")
    assert replayed is not None
    assert replayed.data == {"i": 1}
    await storage.aclose()


async def test_a_turn_that_cannot_go_through_fails_alone_in_a_batch(tmp_path: Path) -> None:
    """In a batch with a replayed trace, a state conflict and a duplicate message id, those
    get their own outcomes and every other turn is saved."""
    storage = SQLiteStorage(tmp_path / "agent.db")
    landed = await storage.commit_turn("r", [message("r", "first")], AgentState(), trace_id="x")
    assert landed is not None
    saved = message("d", "saved")
    await storage.add_messages("d", [saved])
    commits = [
        functools.partial(storage.commit_turn, "a", [message("a", "a1")], None, trace_id="a"),
        functools.partial(storage.commit_turn, "r", [message("r", "again")], None, trace_id="x"),
        functools.partial(
            storage.commit_turn, "c", [message("c", "c1")], AgentState(), expected_version=3
        ),
        functools.partial(storage.commit_turn, "d", [saved], None, trace_id="d"),
        functools.partial(storage.commit_turn, "b", [message("b", "b1")], AgentState()),
    ]
    outcomes, _ = await _commit_all_at_once(storage, commits)
    assert outcomes[0] is None
    assert isinstance(outcomes[1], AgentState)
    assert outcomes[1].version == landed.version
    assert isinstance(outcomes[2], StateConflictError)
    assert isinstance(outcomes[3], StorageError)
    assert "already saved" in str(outcomes[3])
    assert isinstance(outcomes[4], AgentState)
    contents = {t: [m.content for m in await storage.get_messages(t)] for t in "arcdb"}
    assert contents == {"a": ["a1"], "r": ["first"], "c": [], "d": ["saved"], "b": ["b1"]}
    # The failed turn "d" did not claim its trace: a retry with a new message goes through.
    await storage.commit_turn("d", [message("d", "retry")], None, trace_id="d")
    assert [m.content for m in await storage.get_messages("d")] == ["saved", "retry"]
    await storage.aclose()


async def test_observations_recorded_before_a_batched_turn_are_written_before_it(
    tmp_path: Path,
) -> None:
    """A turn that joins a batch queued before an observation was recorded is still written
    after that observation, as every call ran in the order made."""
    storage = SQLiteStorage(tmp_path / "agent.db")
    recorded = Observation(
        thread_id="t", trace_id="r", type=ObservationType.PLAN, title="o", content={}
    )
    commits = [
        functools.partial(storage.commit_turn, "t", [message("t", "first")], None),
        functools.partial(storage.add_observation, recorded),
        functools.partial(storage.commit_turn, "u", [message("u", "second")], None),
    ]
    _, statements = await _commit_all_at_once(storage, commits)
    writes = [sql.split(" (")[0] for sql in statements if sql.startswith("INSERT")]
    assert writes == ["INSERT INTO observations", "INSERT INTO messages"]
    await storage.aclose()
