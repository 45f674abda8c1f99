"""A submitting process polls the runs it awaits together: one status read per poll interval
for all of them, not one per run (DBOSEngine._outcome), with a fake DBOS client."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from pes_agent.durable.dbos import DBOSEngine


@dataclass
class _Status:
    workflow_id: str
    status: str


@dataclass
class _Handle:
    workflow_id: str

    async def get_status(self) -> Any:  # pragma: no cover - must not be called
        raise AssertionError("each run's status is not read on its own")

    async def get_result(self, polling_interval_sec: float) -> str:
        return f"result of {self.workflow_id}"


@dataclass
class _Client:
    """Answers PENDING for a run until `reads_until_done[run]` reads have seen it."""

    reads_until_done: dict[str, int]
    reads: list[list[str]] = field(default_factory=list)
    fail: bool = False

    async def list_workflows_async(self, *, workflow_ids: list[str], **_: Any) -> list[_Status]:
        self.reads.append(sorted(workflow_ids))
        if self.fail:
            raise RuntimeError("database down")
        seen = len(self.reads)
        return [
            _Status(w, "SUCCESS" if seen >= self.reads_until_done[w] else "PENDING")
            for w in workflow_ids
        ]

    def destroy(self) -> None:
        pass


def _engine(client: _Client) -> DBOSEngine:
    engine = DBOSEngine("sqlite:///unused.sqlite", poll_interval_s=0.01)
    engine._client = client  # type: ignore[assignment]
    return engine


async def test_runs_awaited_at_once_are_polled_in_one_read_per_interval() -> None:
    client = _Client({"a": 1, "b": 2, "c": 3})
    engine = _engine(client)
    results = await asyncio.wait_for(
        asyncio.gather(*(engine._outcome(_Handle(w)) for w in "abc")),  # type: ignore[arg-type]
        5,
    )
    assert results == ["result of a", "result of b", "result of c"]
    # One read per interval, of the runs still awaited then.
    assert client.reads == [["a", "b", "c"], ["b", "c"], ["c"]]
    assert engine._awaited == {}
    await engine.aclose()


async def test_a_failed_status_read_is_raised_to_every_caller_waiting() -> None:
    client = _Client({"a": 9, "b": 9}, fail=True)
    engine = _engine(client)
    outcomes = await asyncio.gather(
        *(engine._outcome(_Handle(w)) for w in "ab"),  # type: ignore[arg-type]
        return_exceptions=True,
    )
    assert [str(o) for o in outcomes] == ["database down", "database down"]
    assert engine._awaited == {}
    await engine.aclose()


async def test_a_caller_cancelled_while_waiting_is_no_longer_polled() -> None:
    client = _Client({"a": 10**6, "b": 3})
    engine = _engine(client)
    waiting = asyncio.create_task(engine._outcome(_Handle("a")))  # type: ignore[arg-type]
    other = asyncio.create_task(engine._outcome(_Handle("b")))  # type: ignore[arg-type]
    await asyncio.sleep(0.005)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert await asyncio.wait_for(other, 5) == "result of b"
    assert all(read == ["b"] for read in client.reads)
    await engine.aclose()
