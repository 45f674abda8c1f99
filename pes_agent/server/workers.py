"""What the worker processes serving one store tell each other: the runs each executes, and
the requests to cancel them.

Several `pes-agent serve` processes (or `--workers N`) on one database each execute their own
runs. So that any of them can answer for a run another one executes (cancel it, stream its
events, list it as running), each keeps a *worker record* in the agent's storage, beside the
threads, as the state of the reserved id `WORKER_PREFIX + worker_id`:

    {"worker": ID, "pid": 1234, "machine": ID|null, "seen": UNIX_TIME, "stopped": BOOL,
     "runs": {TRACE_ID: {"thread_id", "user_id", "status", "ended_at"}},
     "cancel": {TRACE_ID: UNIX_TIME_REQUESTED}}

and lists itself in the directory (the reserved id `DIRECTORY`: `{"workers": {ID: UNIX_TIME}}`).
A worker that never executes a run writes neither.

- A worker rewrites its record when its runs change, `settle_s` after the change (so that the
  write does not hold up the run's own first reads of the store) and at most every
  `min_interval_s` (a busy worker writes a few times a second, not twice per run; a run
  shorter than that may never be listed), and at least every `heartbeat_s` while runs
  execute. A running run in a record not refreshed for `stale_s` is taken for lost: its worker
  stopped. On the machine the worker ran on (Linux: the same kernel boot and pid namespace,
  `machine`), its runs are lost as soon as its process is gone, killed or not.
- Another worker asks for a cancel by adding the run to the record's `cancel` map, as a
  compare-and-set on the record's version, so neither side overwrites what the other wrote.
  While a worker has runs executing it reads its record every `poll_s` and cancels the runs
  named there; with none executing it reads and writes nothing at all.
- Finished runs stay in the record for `retention_s` (the newest `max_finished`), so a cancel
  that comes too late is answered "finished" rather than "unknown".
- A worker stopping writes its record a last time, `stopped`. Busy workers (once a minute)
  drop from the directory, and delete the record of, a worker stopped (or, on their machine,
  gone) for `retention_s`, whose record has nothing left to tell, or silent for a day (killed
  elsewhere: its runs were `lost`).

Records are written through the storage directly, not through `StateManager`: bookkeeping is
not a state change of a thread, so it records no STATE_UPDATE observation.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pes_agent.config import AgentState
from pes_agent.errors import StateConflictError, StorageError, UsageError
from pes_agent.observing.logs import get_logger
from pes_agent.server.runs import RunHandle
from pes_agent.storage.base import Storage
from pes_agent.threads.reserved import RESERVED_PREFIX

__all__ = ["DIRECTORY", "WORKER_PREFIX", "SharedRun", "WorkerDirectory"]

_log = get_logger("pes_agent.server")

#: The reserved id whose state lists the worker ids.
DIRECTORY = RESERVED_PREFIX + "workers"
#: Each worker's record is the state of this prefix + its id.
WORKER_PREFIX = RESERVED_PREFIX + "worker:"

# How often a busy worker checks that the directory still lists it, and when a worker silent
# for longer without having stopped (killed) is dropped from the directory with its record.
_REGISTER_EVERY_S = 60.0
_FORGET_AFTER_S = 86_400.0
# Compare-and-set attempts before giving up (each conflict means someone else's write landed).
_ATTEMPTS = 10


def _machine() -> str | None:
    """What makes a pid in a record name a process this one can see: the kernel's boot and
    this process's pid namespace (Linux); None where that cannot be told."""
    if sys.platform != "linux":
        return None
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as boot:
            boot_id = boot.read().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None
    return f"{boot_id}/{namespace}"


_MACHINE = _machine()


def _number(value: object) -> float:
    """A time read from a worker record: 0 (long ago) for anything but a number, so one
    damaged field never fails a listing."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return 0.0


def _process_gone(record: Mapping[str, Any]) -> bool:
    """Whether the process that wrote `record` is known to have exited: it ran where this one
    runs, and no process has its pid any more. (A pid taken again since looks alive: the
    record then goes stale as usual.)"""
    pid = record.get("pid")
    if _MACHINE is None or record.get("machine") != _MACHINE or not isinstance(pid, int):
        return False
    if pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return True
    except OSError:
        return False  # it exists, as another user's
    return False


@dataclass(frozen=True, slots=True)
class SharedRun:
    """A run another worker executes or lately finished, as its record says.

    `status` is `running`, the final status (`success`, `partial`, `error`, `cancelled`,
    `awaiting_approval`), or `lost` for a run still marked running by a worker that stopped
    refreshing its record (it died or hangs).
    """

    trace_id: str
    thread_id: str
    user_id: str | None
    worker_id: str
    status: str

    @property
    def running(self) -> bool:
        """Whether the run still executes on its worker."""
        return self.status == "running"


def _status(handle: RunHandle) -> str:
    if handle.response is not None:
        return str(handle.response.metadata.status)
    # A failure to start or a crash; without either, the task was cancelled before it ran.
    return "error" if handle.failure is not None else "cancelled"


class WorkerDirectory:
    """This worker's record of its runs, and a reader of the other workers' records.

    The app tells it when a run starts (`started`) and ends (`ended`); everything else happens
    in one background task that lives only while runs execute (or a change waits to be written).
    """

    def __init__(
        self,
        storage: Storage,
        *,
        poll_s: float = 0.25,
        min_interval_s: float = 0.05,
        settle_s: float = 0.01,
        heartbeat_s: float = 10.0,
        stale_s: float = 30.0,
        retention_s: float = 300.0,
        max_finished: int = 100,
    ) -> None:
        if not 0 < min_interval_s <= poll_s < heartbeat_s < stale_s:
            raise UsageError("need 0 < min_interval_s <= poll_s < heartbeat_s < stale_s")
        if not 0 <= settle_s <= min_interval_s:
            raise UsageError("need 0 <= settle_s <= min_interval_s")
        self.worker_id = uuid.uuid4().hex
        self._storage = storage
        self._poll_s = poll_s
        self._min_interval_s = min_interval_s
        self._settle_s = settle_s
        self._heartbeat_s = heartbeat_s
        self._stale_s = stale_s
        self._retention_s = retention_s
        self._max_finished = max_finished
        self._live: dict[str, RunHandle] = {}
        self._finished: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._dirty = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._registered_at = float("-inf")
        self._closed = False
        self._recorded = False  # whether this worker ever wrote its record

    @property
    def key(self) -> str:
        """The reserved id holding this worker's record."""
        return WORKER_PREFIX + self.worker_id

    # -- this worker's runs --------------------------------------------------------------

    def started(self, handle: RunHandle) -> None:
        """Note a run this worker executes from now on."""
        self._finished.pop(handle.trace_id, None)
        self._live[handle.trace_id] = handle
        self._changed()

    def ended(self, handle: RunHandle) -> None:
        """Note that a run `started` here has ended (its handle holds how)."""
        if self._live.get(handle.trace_id) is handle:
            del self._live[handle.trace_id]
        self._finished[handle.trace_id] = {
            "thread_id": handle.thread_id,
            "user_id": handle.user_id,
            "status": _status(handle),
            "ended_at": time.time(),
        }
        self._finished.move_to_end(handle.trace_id)
        while len(self._finished) > self._max_finished:
            self._finished.popitem(last=False)
        self._changed()

    def _changed(self) -> None:
        self._dirty.set()
        if self._closed or (self._task is not None and not self._task.done()):
            return
        self._task = asyncio.get_running_loop().create_task(
            self._loop(), name=f"pes-agent worker record {self.worker_id}"
        )

    async def _loop(self) -> None:
        failures = 0
        while not self._closed:
            # A run that just started reads its thread, and the next run of a client follows
            # the end of its last at once: the record waits until they are past the store,
            # rather than queue in front of them (a SQLite store has one connection).
            await asyncio.sleep(self._settle_s)
            self._dirty.clear()
            try:
                await self._sync()
                failures = 0
            except UsageError:
                return  # the storage was closed: nothing more to write
            except Exception:
                failures += 1
                _log.exception("server_worker_record_failed", worker_id=self.worker_id)
                if not self._live and failures >= 3:
                    return  # nothing runs: the next run's start tries again
                self._dirty.set()
                await asyncio.sleep(min(5.0, self._poll_s * 2**failures))
            if not self._live and not self._dirty.is_set():
                return  # idle: `_changed` starts the task again
            await asyncio.sleep(self._min_interval_s - self._settle_s)
            if not self._dirty.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._dirty.wait(), self._poll_s - self._min_interval_s)

    def _runs(self, now: float) -> dict[str, dict[str, Any]]:
        while self._finished:
            trace_id, entry = next(iter(self._finished.items()))
            if now - entry["ended_at"] <= self._retention_s:
                break
            del self._finished[trace_id]
        runs = {
            trace_id: {
                "thread_id": handle.thread_id,
                "user_id": handle.user_id,
                "status": "running",
                "ended_at": None,
            }
            for trace_id, handle in self._live.items()
        }
        for trace_id, entry in self._finished.items():
            runs.setdefault(trace_id, entry)
        return runs

    async def _sync(self, *, stopping: bool = False) -> None:
        """Cancel the runs other workers asked to, and write the record if anything changed
        (`stopping`: write it, marked stopped)."""
        for _ in range(_ATTEMPTS):
            saved = await self._storage.get_agent_state(self.key)
            record = saved.data if saved is not None else {}
            requested = record.get("cancel") or {}
            for trace_id in requested:
                handle = self._live.get(trace_id)
                if handle is not None and handle.task is not None and not handle.done:
                    _log.info(
                        "server_run_cancel_requested",
                        thread_id=handle.thread_id,
                        trace_id=trace_id,
                        worker_id=self.worker_id,
                    )
                    handle.task.cancel()
            now = time.time()
            runs = self._runs(now)
            beat_due = bool(self._live) and now - float(record.get("seen", 0)) >= self._heartbeat_s
            unchanged = not requested and not beat_due and runs == record.get("runs")
            if saved is not None and unchanged and not stopping:
                break
            fresh = {
                "worker": self.worker_id,
                "pid": os.getpid(),
                "machine": _MACHINE,
                "seen": now,
                "stopped": stopping,
                "runs": runs,
                "cancel": {},
            }
            try:
                await self._storage.set_agent_state(
                    self.key,
                    AgentState(data=fresh),
                    expected_version=saved.version if saved is not None else 0,
                )
            except StateConflictError:
                continue  # a cancel request landed meanwhile: read it
            self._recorded = True
            break
        if not stopping:  # a stopping worker has no business listing itself again
            await self._register()

    async def _register(self) -> None:
        """Make sure the directory lists this worker (checked once a minute at most), and
        drop the workers gone for good (`_gone`)."""
        now = time.time()
        if now - self._registered_at < _REGISTER_EVERY_S:
            return
        for _ in range(_ATTEMPTS):
            saved = await self._storage.get_agent_state(DIRECTORY)
            workers: dict[str, float] = dict((saved.data if saved else {}).get("workers") or {})
            forget = [
                worker_id
                for worker_id, at in workers.items()
                if worker_id != self.worker_id
                and now - float(at) > self._retention_s
                and await self._gone(worker_id, float(at), now)
            ]
            listed = self.worker_id in workers and now - float(workers[self.worker_id]) < 3600
            if listed and not forget:
                break
            for worker_id in forget:
                del workers[worker_id]
            workers[self.worker_id] = now
            try:
                await self._storage.set_agent_state(
                    DIRECTORY,
                    AgentState(data={"workers": workers}),
                    expected_version=saved.version if saved is not None else 0,
                )
            except StateConflictError:
                continue
            for worker_id in forget:
                await self._storage.delete_thread(WORKER_PREFIX + worker_id)
            break
        self._registered_at = now

    async def _gone(self, worker_id: str, listed_at: float, now: float) -> bool:
        """Whether a worker's record has nothing left to tell: it stopped (or its process is
        known to be gone) over `retention_s` ago, or it has been silent for a day (killed
        elsewhere; its runs were lost). A worker that stopped never writes again, so dropping
        its record races with nobody."""
        saved = await self._storage.get_agent_state(WORKER_PREFIX + worker_id)
        if saved is None:
            return now - listed_at > _FORGET_AFTER_S
        silent_s = now - float(saved.data.get("seen", 0))
        if saved.data.get("stopped") or _process_gone(saved.data):
            return silent_s > self._retention_s
        return silent_s > _FORGET_AFTER_S

    async def aclose(self) -> None:
        """Write the record one last time, marked stopped (the runs cancelled at shutdown as
        ended), then stop. A worker that never executed a run writes nothing."""
        self._closed = True
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        if not (self._recorded or self._live or self._finished):
            return
        try:
            await self._sync(stopping=True)
        except Exception:
            _log.warning("server_worker_record_not_written", worker_id=self.worker_id)

    # -- the other workers' runs ---------------------------------------------------------

    async def _records(self) -> list[tuple[str, AgentState]]:
        """The other workers' records that can be read: one damaged record (or directory
        entry) is left out with a warning, never failing the listing of the others."""
        directory = await self._storage.get_agent_state(DIRECTORY)
        workers = (directory.data if directory else {}).get("workers")
        if not isinstance(workers, dict):
            workers = {}
        others = [
            worker_id
            for worker_id in workers
            if isinstance(worker_id, str) and worker_id != self.worker_id
        ]
        states = await asyncio.gather(
            *(self._storage.get_agent_state(WORKER_PREFIX + worker_id) for worker_id in others),
            return_exceptions=True,
        )
        found = []
        for worker_id, state in zip(others, states, strict=True):
            if isinstance(state, StorageError):
                _log.warning(
                    "server_worker_record_skipped", worker_id=worker_id, error=state.message
                )
            elif isinstance(state, BaseException):
                raise state
            elif state is not None and isinstance(state.data.get("runs") or {}, dict):
                found.append((worker_id, state))
            elif state is not None:
                _log.warning(
                    "server_worker_record_skipped", worker_id=worker_id, error="runs not a map"
                )
        return found

    def _shared(
        self, worker_id: str, record: Mapping[str, Any], trace_id: str, now: float
    ) -> SharedRun | None:
        entry = (record.get("runs") or {}).get(trace_id)
        if not isinstance(entry, dict):
            return None
        status = str(entry.get("status"))
        silent_s = now - _number(record.get("seen"))
        if status == "running" and (
            record.get("stopped") or silent_s > self._stale_s or _process_gone(record)
        ):
            status = "lost"
        user_id = entry.get("user_id")
        return SharedRun(
            trace_id=trace_id,
            thread_id=str(entry.get("thread_id")),
            user_id=user_id if isinstance(user_id, str) else None,
            worker_id=worker_id,
            status=status,
        )

    async def others(self) -> list[SharedRun]:
        """The runs the other workers execute or lately finished."""
        now = time.time()
        found = []
        for worker_id, state in await self._records():
            for trace_id in state.data.get("runs") or {}:
                shared = self._shared(worker_id, state.data, trace_id, now)
                if shared is not None:
                    found.append(shared)
        return found

    async def _locate(self, trace_id: str) -> tuple[SharedRun, AgentState] | None:
        """The other workers' entry for `trace_id`, and the record holding it. A run resumed
        after approval on another worker than the one it paused on has two entries: the one
        running wins, else the one that ended last."""
        now = time.time()
        best: tuple[SharedRun, AgentState] | None = None
        best_key = (False, 0.0)
        for worker_id, state in await self._records():
            shared = self._shared(worker_id, state.data, trace_id, now)
            if shared is None:
                continue
            ended_at = state.data["runs"][trace_id].get("ended_at")
            key = (shared.running, _number(ended_at))
            if best is None or key > best_key:
                best, best_key = (shared, state), key
        return best

    async def find(self, trace_id: str) -> SharedRun | None:
        """The run `trace_id` if another worker executes it or lately finished it."""
        located = await self._locate(trace_id)
        return located[0] if located is not None else None

    async def request_cancel(self, trace_id: str) -> SharedRun | None:
        """Ask the worker executing `trace_id` to cancel it.

        Returns the run as found when the request was written (`running`), or as it ended
        if it already had (then nothing is asked); None when no other worker knows the run.
        The executing worker notices within about `poll_s`.
        """
        for _ in range(_ATTEMPTS):
            located = await self._locate(trace_id)
            if located is None:
                return None
            shared, state = located
            if not shared.running:
                return shared
            record = dict(state.data)
            record["cancel"] = {**(record.get("cancel") or {}), trace_id: time.time()}
            try:
                await self._storage.set_agent_state(
                    WORKER_PREFIX + shared.worker_id,
                    AgentState(data=record),
                    expected_version=state.version,
                )
            except StateConflictError:
                continue  # the worker wrote its record meanwhile: look again
            return shared
        raise StorageError(
            "the cancel request could not be written: the worker's record kept changing; try again",
            transient=True,
            trace_id=trace_id,
        )
