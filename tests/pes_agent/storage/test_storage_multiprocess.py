"""Several OS processes on one store: whole turns, crashed workers, observations across processes.

The workers are `storage_worker.py`, run with this interpreter as separate processes.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pes_agent.config import AgentState
from pes_agent.observing.types import Observation, ObservationType
from pes_agent.storage import PostgresStorage, SQLiteStorage, Storage
from pes_agent.threads.messages import MessageRole

from .conftest import drop_schema, require_postgres, wait_until

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("storage_worker.py")
REPO = Path(__file__).resolve().parents[3]


@dataclass
class Store:
    """Where the workers and the test meet: a URL, a schema and the test's own storage."""

    url: str
    schema: str
    storage: Storage
    tmp: Path


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A SQLite file or a fresh PostgreSQL schema, with a storage object for the test."""
    schema = f"pes_test_{uuid.uuid4().hex[:16]}"
    storage: Storage
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'shared.db'}"
        storage = SQLiteStorage(tmp_path / "shared.db")
    else:
        url = require_postgres()
        storage = PostgresStorage(url, schema=schema)
    await storage.list_threads()  # create the schema before the workers race for it
    yield Store(url, schema, storage, tmp_path)
    await storage.aclose()
    if request.param == "postgres":
        await drop_schema(schema)


class Worker:
    """One worker process, its output collected line by line."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.lines: list[str] = []
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, store: Store, *args: str) -> Worker:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(WORKER),
            store.url,
            store.schema,
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
        )
        return cls(process)

    async def _read(self) -> None:
        assert self.process.stdout is not None
        async for line in self.process.stdout:
            self.lines.append(line.decode().rstrip())

    async def finish(self) -> int:
        """Wait (two minutes at most) for the worker to exit and return its exit status."""
        async with asyncio.timeout(120):
            status = await self.process.wait()
            await self._reader
        return status

    async def kill(self) -> None:
        """SIGKILL the worker and reap it."""
        self.process.send_signal(signal.SIGKILL)
        await self.finish()


async def assert_whole_turns(storage: Storage, thread_id: str) -> dict[str, list[int]]:
    """Check the thread holds only whole, distinct turns in per-worker order and a state whose
    version counts them; return each worker's turn numbers."""
    messages = await storage.get_messages(thread_id)
    assert len(messages) % 2 == 0, "a half turn was saved"
    pairs = list(zip(messages[::2], messages[1::2], strict=True))
    for question, answer in pairs:
        assert (question.role, answer.role) == (MessageRole.USER, MessageRole.AI)
        assert question.content == answer.content, "two turns interleaved"
    tags = [question.content for question, _ in pairs]
    assert len(set(tags)) == len(tags), "a turn was saved twice"
    state = await storage.get_agent_state(thread_id) or AgentState()
    assert state.version == len(pairs), "a state update was lost or a turn saved without one"
    assert state.data.get("turns", 0) == len(pairs), "a turn worked from a stale state"
    by_worker: dict[str, list[int]] = {}
    for tag in tags:
        name, number = tag.split(":")
        by_worker.setdefault(name, []).append(int(number))
    for numbers in by_worker.values():
        assert numbers == list(range(len(numbers)))
    return by_worker


async def test_workers_on_one_thread_never_interleave_or_lose_turns(store: Store) -> None:
    """Three processes doing turns on one thread leave every turn whole, none lost, and the
    state's version equal to the number of turns."""
    go = store.tmp / "go"
    workers = [
        await Worker.start(store, "turns", "shared", f"w{n}", "12", str(go)) for n in range(3)
    ]
    go.touch()
    statuses = [await worker.finish() for worker in workers]
    assert statuses == [0, 0, 0], [worker.lines for worker in workers]
    by_worker = await assert_whole_turns(store.storage, "shared")
    assert by_worker == {f"w{n}": list(range(12)) for n in range(3)}


async def test_killed_lock_holder_does_not_block_the_thread(store: Store) -> None:
    """A worker SIGKILLed while holding the thread's lock releases it by dying; its recorded
    observations survive and the next run proceeds."""
    holder = await Worker.start(store, "hold", "shared")
    await wait_until(lambda: "LOCKED" in holder.lines, f"the worker to lock ({holder.lines})")

    entered = asyncio.Event()

    async def next_run() -> None:
        async with store.storage.lock_thread("shared"):
            entered.set()
            await store.storage.commit_turn("shared", [], AgentState(data={"turns": 0}))

    run = asyncio.create_task(next_run())
    await asyncio.sleep(0.3)
    assert not entered.is_set(), "the lock was granted while another process held it"
    await holder.kill()
    async with asyncio.timeout(30):
        await run
    titles = [o.title for o in await store.storage.get_observations("shared")]
    assert titles == ["before-crash-1", "before-crash-2"]
    assert await store.storage.get_messages("shared") == []


async def test_worker_killed_mid_turns_leaves_a_consistent_store(store: Store) -> None:
    """SIGKILLing a worker at an arbitrary point of its turns leaves only whole turns, and the
    other worker finishes all of its own."""
    go = store.tmp / "go"
    victim = await Worker.start(store, "turns", "shared", "victim", "10000", str(go))
    survivor = await Worker.start(store, "turns", "shared", "survivor", "15", str(go))
    go.touch()
    await wait_until(lambda: "TURN 3" in victim.lines, f"the victim's turns ({victim.lines})")
    await victim.kill()
    assert await survivor.finish() == 0, survivor.lines
    async with asyncio.timeout(30), store.storage.lock_thread("shared"):
        by_worker = await assert_whole_turns(store.storage, "shared")
    assert by_worker["survivor"] == list(range(15))
    assert len(by_worker["victim"]) >= 4


@pytest.mark.postgres
async def test_subscriber_sees_observations_written_by_another_process() -> None:
    """A LISTEN subscriber here receives, filtered by type and thread, the observations a
    worker process records."""
    url = require_postgres()
    schema = f"pes_test_{uuid.uuid4().hex[:16]}"
    storage = PostgresStorage(url, schema=schema)
    plans: list[Observation] = []
    everything: list[Observation] = []
    try:
        await storage.subscribe_observations(
            plans.append, types=[ObservationType.PLAN], thread_id="watched", include_own=False
        )
        await storage.subscribe_observations(everything.append)
        worker = await Worker.start(Store(url, schema, storage, Path()), "observe", "watched", "6")
        assert await worker.finish() == 0, worker.lines
        await wait_until(lambda: len(everything) == 7, "all seven observations")
        await wait_until(lambda: len(plans) == 3, "the three plans of the watched thread")
        assert [o.title for o in plans] == ["obs-0", "obs-2", "obs-4"]
        assert {o.thread_id for o in plans} == {"watched"}
        assert {o.trace_id for o in everything} == {f"pid-{worker.process.pid}"}
        assert [o.title for o in everything][-1] == "elsewhere"
    finally:
        await storage.aclose()
        await drop_schema(schema)


OPEN_AT_ONCE = """
import asyncio, sys, time
from pes_agent.storage import SQLiteStorage

folder, start, files = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])

async def main() -> None:
    failures = []
    for number in range(files):
        at = start + number * 0.06
        time.sleep(max(0.0, at - time.time() - 0.002))
        while time.time() < at:
            pass
        storage = SQLiteStorage(f"{folder}/{number}.db")
        try:
            await storage.get_paused_runs("t")
        except Exception as exc:
            failures.append(f"file {number}: {exc}")
        finally:
            await storage.aclose()
    print("\\n".join(failures))
    sys.exit(1 if failures else 0)

asyncio.run(main())
"""


async def test_processes_opening_one_new_sqlite_file_at_once_all_open_it(tmp_path: Path) -> None:
    """Four processes open each of 25 new SQLite files at the same moment (as the workers of
    `pes-agent serve --workers 4` do): every one of them opens it and reads it. Before, the
    loser of the race to switch a new file to WAL got 'database is locked' at once."""
    start = time.time() + 1.5  # all four are up and waiting by then
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            OPEN_AT_ONCE,
            str(tmp_path),
            str(start),
            "25",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            cwd=REPO,
        )
        for _ in range(4)
    ]
    outputs = [(await process.communicate())[0].decode() for process in processes]
    assert [process.returncode for process in processes] == [0] * 4, "\n".join(outputs)
