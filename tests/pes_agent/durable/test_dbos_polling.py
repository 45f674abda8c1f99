"""A submitting process polls the runs it awaits together: one status read per poll interval
for all of them, not one per run (DBOSEngine._outcome). Real DBOS on a SQLite file: runs are
enqueued with no worker to take them (they stay queued), and ended by cancelling them; the
engine's own DBOS client counts its status reads."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from dbos import DBOS, DBOSClient
from dbos._error import DBOSAwaitedWorkflowCancelledError

from pes_agent.durable.dbos import RUN_WORKFLOW, DBOSEngine
from tests.pes_agent.storage.conftest import wait_until

INTERVAL_S = 0.02


class Reads:
    """The engine client's status reads: each one's workflow ids, and a failure to inject."""

    def __init__(self, client: DBOSClient) -> None:
        self.ids: list[list[str]] = []
        self.fail_next = False
        self._read = client.list_workflows_async

        async def counted(**kwargs: Any) -> Any:
            self.ids.append(sorted(kwargs.get("workflow_ids") or []))
            if self.fail_next:
                self.fail_next = False
                raise RuntimeError("database down")
            return await self._read(**kwargs)

        client.list_workflows_async = counted  # type: ignore[method-assign]


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[DBOSEngine]:
    url = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    await asyncio.to_thread(DBOS.migrate, url)  # DBOS's tables, as a worker's launch makes them
    engine = DBOSEngine(url, poll_interval_s=INTERVAL_S)
    yield engine
    await engine.aclose()


async def _enqueued(engine: DBOSEngine, *names: str) -> tuple[DBOSClient, list[Any]]:
    """Runs `names` enqueued (no worker: they stay queued) and their handles."""
    client = await engine._submitter()
    handles = [
        await client.enqueue_async(
            {"workflow_name": RUN_WORKFLOW, "queue_name": engine.queue, "workflow_id": name}
        )
        for name in names
    ]
    return client, handles


def _more_reads(reads: Reads, more: int) -> Callable[[], bool]:
    """Whether `more` reads were made since this was called."""
    seen = len(reads.ids)
    return lambda: len(reads.ids) >= seen + more


async def test_runs_awaited_at_once_are_polled_in_one_read_per_interval(
    engine: DBOSEngine,
) -> None:
    client, handles = await _enqueued(engine, "a", "b", "c")
    reads = Reads(client)
    waiting = [asyncio.create_task(engine._outcome(handle)) for handle in handles]
    for ended, name in enumerate("abc", start=1):
        await wait_until(_more_reads(reads, 2), "two more polls")
        await client.cancel_workflow_async(name)
        with pytest.raises(DBOSAwaitedWorkflowCancelledError):
            await asyncio.wait_for(waiting[ended - 1], 10)
    # Every read asked for all the runs still awaited then, in one query; none was left out,
    # and none was read alone while others waited.
    assert reads.ids[0] == ["a", "b", "c"]
    assert all(ids in (["a", "b", "c"], ["b", "c"], ["c"]) for ids in reads.ids), reads.ids
    assert ["b", "c"] in reads.ids
    assert ["c"] in reads.ids
    assert engine._awaited == {}


async def test_a_failed_status_read_is_raised_to_every_caller_waiting(
    engine: DBOSEngine,
) -> None:
    client, handles = await _enqueued(engine, "a", "b")
    reads = Reads(client)
    reads.fail_next = True
    outcomes = await asyncio.wait_for(
        asyncio.gather(*(engine._outcome(h) for h in handles), return_exceptions=True), 10
    )
    assert [str(outcome) for outcome in outcomes] == ["database down", "database down"]
    assert reads.ids == [["a", "b"]]  # one read, failed, for both
    assert engine._awaited == {}


async def test_a_caller_cancelled_while_waiting_is_no_longer_polled(engine: DBOSEngine) -> None:
    client, handles = await _enqueued(engine, "a", "b")
    reads = Reads(client)
    given_up = asyncio.create_task(engine._outcome(handles[0]))
    other = asyncio.create_task(engine._outcome(handles[1]))
    await wait_until(lambda: bool(reads.ids), "a first poll")
    given_up.cancel()
    with pytest.raises(asyncio.CancelledError):
        await given_up
    seen = len(reads.ids)
    await wait_until(_more_reads(reads, 3), "three more polls")
    await client.cancel_workflow_async("b")
    with pytest.raises(DBOSAwaitedWorkflowCancelledError):
        await asyncio.wait_for(other, 10)
    assert all(ids == ["b"] for ids in reads.ids[seen:]), reads.ids
