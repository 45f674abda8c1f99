"""SQLiteStorage specifics: WAL, the event loop, schema versions, lock files."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from pes_agent.config import AgentState
from pes_agent.errors import ConfigurationError, UsageError
from pes_agent.storage import SQLiteStorage
from pes_agent.storage import sqlite as sqlite_module
from pes_agent.storage._filelock import FileLockDirectory
from pes_agent.threads.messages import ConversationMessage, MessageRole


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
    with pytest.raises(ConfigurationError, match=r"schema version 99, newer than the 1") as caught:
        await storage.get_messages("t")
    assert "upgrade pes-agent" in str(caught.value)
    await storage.aclose()
    conn = raw(path)
    assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == 99
    conn.close()


async def test_older_schema_is_migrated_step_by_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file at version 1 is upgraded by the later migration steps and keeps its data."""
    path = tmp_path / "agent.db"
    async with SQLiteStorage(path) as storage:
        await storage.add_messages("t", [message("t", "kept")])

    migrations = {
        **sqlite_module.MIGRATIONS,
        2: ("CREATE TABLE extra_v2 (x INTEGER)",),
        3: ("ALTER TABLE extra_v2 ADD COLUMN y TEXT",),
    }
    monkeypatch.setattr(sqlite_module, "MIGRATIONS", migrations)
    monkeypatch.setattr(sqlite_module, "SCHEMA_VERSION", 3)
    async with SQLiteStorage(path) as storage:
        assert [m.content for m in await storage.get_messages("t")] == ["kept"]
    conn = raw(path)
    try:
        assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == 3
        assert [row[1] for row in conn.execute("PRAGMA table_info(extra_v2)")] == ["x", "y"]
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
    """A path in a directory that does not exist says to check the directory."""
    storage = SQLiteStorage(tmp_path / "missing" / "agent.db")
    with pytest.raises(ConfigurationError, match="directory exists"):
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


async def test_lock_files_are_removed_once_released(tmp_path: Path) -> None:
    """A thread's lock file exists only while the thread is held."""
    storage = SQLiteStorage(tmp_path / "agent.db")
    locks = tmp_path / "agent.db-locks"
    async with storage.lock_thread("t"):
        assert len(list(locks.iterdir())) == 1
    assert list(locks.iterdir()) == []
    await storage.aclose()


async def test_a_stale_unlocked_lock_file_does_not_block(tmp_path: Path) -> None:
    """A lock file left behind by a dead process is taken over, not waited on."""
    storage = SQLiteStorage(tmp_path / "agent.db")
    locks = tmp_path / "agent.db-locks"
    locks.mkdir()
    stale = FileLockDirectory(locks).path_for("t")
    stale.touch()
    async with asyncio.timeout(10), storage.lock_thread("t"):
        pass
    assert not stale.exists()
    await storage.aclose()


async def test_closed_store_refuses_further_use(tmp_path: Path) -> None:
    """Using a store after aclose is a usage error telling to open a new one."""
    storage = SQLiteStorage(tmp_path / "agent.db")
    await storage.list_threads()
    await storage.aclose()
    with pytest.raises(UsageError, match="closed"):
        await storage.list_threads()
