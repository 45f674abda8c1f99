"""`DBOSEngine`: runs that survive their worker, on DBOS, on SQLite or PostgreSQL.

```python
from pes_agent.durable.dbos import DBOSEngine     # pip install 'pes-agent[dbos]'

engine = DBOSEngine("sqlite:///runs.sqlite", worker_id="worker-1")
agent = create_agent(provider=..., tools=[...], storage="sqlite:///agent.db", engine=engine)
async with engine.worker(agent):                  # this process runs runs too
    result = await agent.process(AgentProps("...", "thread-1"))
```

A run is the DBOS workflow `pes_agent.run`; its side effects are steps (names in
`pes_agent.durable.effects`), kept in DBOS's system database beside the workflow. When a worker
dies mid-run, the run is taken over where it stood: steps that had finished answer from the
record (their tools are not called again, the turn is committed once), and the step that was
running runs again (at least once, like any retried call).

- **Workers.** `engine.worker(agent)` launches DBOS in this process and runs submitted runs
  with `agent`, which holds the tools and providers. Give each live worker its own
  `worker_id` and reuse it when that worker restarts: at launch, a worker takes over the runs
  its previous life left unfinished (DBOS recovers the workflows of its executor id). Two live
  workers must never share an id.
- **Submitting.** `agent.process(...)` on an agent with `engine=` enqueues the run on the
  engine's queue (DBOS's client: the submitting process need not be a worker) and awaits its
  response; cancelling the awaiting task cancels the workflow and its running steps.
- **One turn at a time per thread**, across every worker: the queue is partitioned by thread id
  with one run at a time per partition.
- **The database.** ``sqlite:///PATH`` (one machine; its file opened in WAL mode) or
  ``postgresql://...`` (workers on several machines). The agent's own storage is separate and
  must be shared by the workers and the submitting processes (SQLite file or PostgreSQL).
- **Cancelling from anywhere.** `engine.cancel(trace_id)` cancels the run's workflow (its id
  is `pes-agent-run-TRACE_ID`, a resumption's `pes-agent-resume-TRACE_ID-...`) from any
  process; the process awaiting it gets a response of status `cancelled`.
  `engine.find(trace_id)` says where a run stands, from DBOS's record.
- **Streaming dispatch** is an in-process optimisation: on an engine, a plan's calls start once
  the planning step has finished.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from pes_agent.durable.effects import (
    CURRENT_STEP,
    EngineRun,
    StepKind,
    ToolOutcome,
    cancelled_elsewhere,
)
from pes_agent.errors import ConfigurationError, UsageError
from pes_agent.observing.types import Observation
from pes_agent.protocols import LLMResponse
from pes_agent.run import AgentFinalResponse, AgentProps
from pes_agent.tools.base import ToolContext

try:
    import sqlalchemy
    from dbos import (
        DBOS,
        DBOSClient,
        SetWorkflowID,
        StepOptions,
        StepReservation,
        WorkflowHandleAsync,
        WorkflowStatus,
    )
    from dbos._error import DBOSAwaitedWorkflowCancelledError, DBOSWorkflowCancelledError
except ImportError as error:  # pragma: no cover - the extra is installed in CI
    raise ConfigurationError(
        "DBOSEngine needs the dbos package: pip install 'pes-agent[dbos]'"
    ) from error

if TYPE_CHECKING:
    from pes_agent.approvals.models import Decision
    from pes_agent.core import AgentCore

__all__ = ["RESUME_WORKFLOW", "RUN_WORKFLOW", "DBOSEngine"]

T = TypeVar("T")

RUN_WORKFLOW = "pes_agent.run"
"""The DBOS workflow name of a run (persisted: runs in flight need it unchanged)."""
RESUME_WORKFLOW = "pes_agent.resume"
"""The DBOS workflow name of a paused run's resumption (persisted too)."""

# DBOS's workflow statuses, as `EngineRun.status` says them (SUCCESS: the response's status).
_STATUSES = {
    "ENQUEUED": "queued",
    "DELAYED": "queued",
    "PENDING": "running",
    "ERROR": "error",
    "MAX_RECOVERY_ATTEMPTS_EXCEEDED": "error",
    "CANCELLED": "cancelled",
}

# The agent this process's worker runs runs with, and its engine (DBOS is one instance per
# process).
_worker_agent: AgentCore | None = None
_worker_engine: DBOSEngine | None = None
# Workflows this worker starts itself, until they begin: their first life, nothing to replay.
_first_lives: set[str] = set()


class _Carried:
    """A step's outcome kept with the reads the run made just before it (`once(...,
    kind="read")`), so that a replay finds those reads in the step's record."""

    __slots__ = ("output", "reads")

    def __init__(self, reads: tuple[Any, ...], output: Any) -> None:
        self.reads = reads
        self.output = output

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Carried, (self.reads, self.output))


class _Effects:
    """A run's side effects as DBOS steps (`pes_agent.durable.effects.RunEffects`).

    `recorded` maps the ids of the steps an earlier life of this workflow finished to their
    outputs: empty on a run's first life. Until a step runs for real, the run replays
    (`replaying`).

    A read (`once(..., kind="read")`, the thread's load) is no step of its own: it reserves
    the next step id, and the run's next sequential step runs there with the read kept in
    its record (`_Carried`); a DAG's calls start side by side, so before them the read is
    recorded alone, under its own name. A replay finds the read in that record, or reads
    again when the earlier life died before it: nothing recorded depended on it then. An
    idempotent effect (the turn's commit) is done with no step: the store dedupes it.
    """

    __slots__ = (
        "_asks",
        "_calls",
        "_live",
        "_read_name",
        "_reads",
        "_recorded",
        "_replayed_reads",
        "_revised",
        "_revisions",
        "_slot",
        "_task",
        "cancelled",
    )

    # The queue's partitions run one turn per thread, and the run also holds the store's lock.
    serialises_turns = False
    # The workflow runs on the worker's loop: the agent's aclose() waits for it.
    runs_elsewhere = False

    def __init__(self, recorded: dict[int, Any] | None = None) -> None:
        self._calls: list[StepReservation] = []
        self._asks: list[StepReservation] = []  # each call's step before its tool call
        self._revisions: list[StepReservation] = []
        self._revised = 0
        self._recorded = recorded or {}
        self._live = not self._recorded
        # Reads waiting for the next step's record, at the step id reserved for them.
        self._slot: StepReservation | None = None
        self._read_name = ""
        self._reads: list[Any] = []
        self._replayed_reads: tuple[Any, ...] = ()
        # The workflow's own task (made inside it), cancelled when DBOS says the run was.
        self._task = asyncio.current_task()
        self.cancelled: DBOSWorkflowCancelledError | None = None

    def replaying(self) -> bool:
        step = CURRENT_STEP.get()
        if 1 <= step <= len(self._calls):
            return self._calls[step - 1].step_id in self._recorded
        return not self._live

    def _running(
        self, effect: Callable[[], Coroutine[Any, Any, T]]
    ) -> Callable[[], Coroutine[Any, Any, T]]:
        """`effect`, marking the run live when DBOS actually runs it (a recorded step is
        answered without running its function)."""

        async def run() -> T:
            self._live = True
            return await effect()

        return run

    async def _guarded(self, step: Coroutine[Any, Any, T]) -> T:
        """`step` awaited. DBOS refusing or stopping it because the run was cancelled (from
        any process) raises `DBOSWorkflowCancelledError`, a BaseException nothing of the run
        would handle: instead the run's task is cancelled, so the run ends as a cancelled
        run does in process (its cancellation and stopped calls recorded), and the workflow
        raises DBOS's error again at its top (`_cancellable`)."""
        try:
            return await step
        except DBOSWorkflowCancelledError as error:
            if self.cancelled is None:
                self.cancelled = error
                if self._task is not None:
                    self._task.cancel()
            raise asyncio.CancelledError(str(error)) from None

    async def once(
        self,
        name: str,
        effect: Callable[[], Coroutine[Any, Any, T]],
        *,
        kind: StepKind = "effect",
    ) -> T:
        if kind == "read":
            return await self._read(name, effect)
        if kind == "idempotent":
            # Done again on a replay that gets here (the store writes nothing twice): what
            # the run records after it is written then, as it may not have been before.
            self._live = True
            return await effect()
        step = CURRENT_STEP.get()
        if 1 <= step <= len(self._asks):
            # A call's own step before its tool call (its approval), in its reserved place.
            reservation = self._asks[step - 1]
            return await self._guarded(reservation.run_async(_options(name), self._running(effect)))
        return await self._step(_options(name, preemptible=False), effect)

    async def open_calls(self, steps: int, revisions: int) -> None:
        # The calls start side by side: a read waiting for the next step is recorded now,
        # alone, or whichever call ran first would carry it.
        await self._record_reads()
        # Reserved now, in order, before any call starts: each call's step keeps its place
        # whatever order the calls finish in, on the first run and on every replay.
        self._calls = [DBOS.reserve_step() for _ in range(steps)]
        self._revisions = [DBOS.reserve_step() for _ in range(revisions)]
        self._asks = [DBOS.reserve_step() for _ in range(steps)]
        self._revised = 0

    async def model_call(
        self, phase: str, call: Callable[[], Coroutine[Any, Any, LLMResponse]]
    ) -> Any:
        name = f"pes_agent.model.{phase}"
        if phase == "language_step":
            return await self._in_call(name, call)
        if phase == "reevaluation" and self._revised < len(self._revisions):
            reservation = self._revisions[self._revised]
            self._revised += 1
            return await self._guarded(reservation.run_async(_options(name), self._running(call)))
        return await self._step(_options(name), call)

    async def tool_call(
        self,
        name: str,
        call: Callable[[], Coroutine[Any, Any, ToolOutcome]],
        *,
        arguments: dict[str, Any],
        context: ToolContext,
    ) -> ToolOutcome:
        # The workflow runs where the tools are: the call runs in this process.
        return await self._in_call(f"pes_agent.tool.{name}", call)

    async def record(
        self,
        observation: Observation,
        write: Callable[[Observation], Coroutine[Any, Any, Observation]],
    ) -> Observation:
        # A DBOS workflow's code may do I/O: written at once, unless an earlier life of the
        # run recorded it (then it is not recorded, published nor traced again).
        if self.replaying():
            return observation
        return await write(observation)

    async def _read(self, name: str, read: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """`read()`'s outcome, kept for the next step's record; on a replay, the outcome that
        record kept when there is one."""
        if self._slot is None:
            self._slot = DBOS.reserve_step()
            self._read_name = name
            self._reads = []
            kept = self._recorded.get(self._slot.step_id)
            self._replayed_reads = kept.reads if isinstance(kept, _Carried) else ()
        index = len(self._reads)
        value: T = (
            self._replayed_reads[index] if index < len(self._replayed_reads) else await read()
        )
        self._reads.append(value)
        return value

    async def _step(self, options: StepOptions, effect: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """`effect` as the run's next step, keeping the reads made since the last one."""
        slot, reads = self._slot, tuple(self._reads)
        if slot is None:
            return await self._guarded(DBOS.run_step_async(options, self._running(effect)))
        self._slot, self._reads = None, []

        async def carrying() -> _Carried:
            return _Carried(reads, await effect())

        carried: _Carried = await self._guarded(slot.run_async(options, self._running(carrying)))
        output: T = carried.output
        return output

    async def _record_reads(self) -> None:
        """The reads waiting for the next step, recorded now as a step of their own."""
        if self._slot is not None:

            async def nothing() -> None:
                return None

            await self._step(_options(self._read_name, preemptible=False), nothing)

    async def _in_call(self, name: str, call: Callable[[], Coroutine[Any, Any, T]]) -> T:
        step = CURRENT_STEP.get()
        if 1 <= step <= len(self._calls):
            reserved = self._calls[step - 1]
            return await self._guarded(reserved.run_async(_options(name), self._running(call)))
        # Beyond the places kept (a custom executor): the next step id, its name checked, so
        # a replay that starts calls in another order fails loudly rather than mixing them up.
        return await self._step(_options(name), call)


def _options(name: str, *, preemptible: bool = True) -> StepOptions:
    # Preemptible: cancelling the run cancels the step's task (a slow tool stops); it costs
    # a check of the run's status as the step starts, so the quick steps of the run's own
    # bookkeeping (load, pause, claim, commit) go without. No DBOS retries: model calls retry
    # in their provider, and tool calls are not retried in process either.
    return {"name": name, "preemptible": preemptible, "retries_allowed": False}


async def _effects() -> _Effects:
    """The effects of the workflow running now, knowing which of its steps an earlier life
    finished (read outside DBOS's own record: a workflow's reads are steps, replayed too)."""
    workflow_id = DBOS.workflow_id
    engine = _worker_engine
    if workflow_id is None or engine is None:  # pragma: no cover - only inside a worker's run
        return _Effects()
    if workflow_id in _first_lives:
        # Started just now by this worker (`_submit`): nothing recorded yet to replay.
        _first_lives.discard(workflow_id)
        return _Effects()
    client = await engine._submitter()
    # With their outputs: a read the run made is kept in the record of the step after it.
    steps = await client.list_workflow_steps_async(workflow_id, load_output=True)
    return _Effects({step["function_id"]: step["output"] for step in steps})


@contextmanager
def _cancellable(effects: _Effects) -> Iterator[None]:
    """The workflow's body: a run that ended cancelled because DBOS cancelled it
    (`_Effects._guarded`) raises DBOS's own error, as DBOS expects of a cancelled workflow."""
    try:
        yield
    except asyncio.CancelledError:
        if effects.cancelled is None:
            raise  # the worker stopping: the run is left to be taken over
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        raise effects.cancelled from None


def _worker() -> AgentCore:
    agent = _worker_agent
    if agent is None:  # pragma: no cover - DBOS runs workflows only where a worker launched
        raise UsageError(
            "no pes-agent worker in this process: use `async with engine.worker(agent)`"
        )
    return agent


@DBOS.workflow(name=RUN_WORKFLOW)
async def _run_workflow(props: AgentProps) -> AgentFinalResponse:
    """One run, on a worker: `process()` with its side effects as steps."""
    assert props.trace_id is not None  # set by the submitting process
    effects = await _effects()
    with _cancellable(effects):
        return await _worker()._process_on_engine(props, props.trace_id, effects)


@DBOS.workflow(name=RESUME_WORKFLOW)
async def _resume_workflow(
    thread_id: str, trace_id: str, decisions: dict[str, Decision]
) -> AgentFinalResponse:
    """The resumption of a paused run, on a worker: `resume()` with its side effects as steps."""
    effects = await _effects()
    with _cancellable(effects):
        return await _worker()._resume_on_engine(thread_id, trace_id, decisions, effects)


_WORKFLOWS: dict[str, Callable[..., Coroutine[Any, Any, AgentFinalResponse]]] = {
    RUN_WORKFLOW: _run_workflow,
    RESUME_WORKFLOW: _resume_workflow,
}


class DBOSEngine:
    """Durable runs on DBOS (see the module docstring).

    The engine is configured here and does nothing until used: `worker(agent)` launches DBOS
    in this process; an agent built with `create_agent(engine=engine)` submits its runs.
    """

    def __init__(
        self,
        database_url: str,
        *,
        worker_id: str = "pes-agent-worker",
        app_name: str = "pes-agent",
        app_version: str = "1",
        queue: str = "pes-agent-runs",
        concurrency: int = 16,
        poll_interval_s: float = 0.05,
    ) -> None:
        """Configure the engine.

        Args:
            database_url: DBOS's system database: ``sqlite:///PATH`` or ``postgresql://...``.
            worker_id: This process's DBOS executor id when it is a worker. Unique per live
                worker, and the same when the worker restarts, so it takes over its runs.
            app_name: The DBOS application; workers and submitters of one agent share it.
            app_version: Runs are recovered only by workers of the same version: change it
                when a new release changes what a run does, and old runs keep their workers.
            queue: The DBOS queue runs are submitted to.
            concurrency: The most runs one worker runs at once.
            poll_interval_s: How often the queue and a run's result are polled.

        Raises:
            UsageError: An argument is out of range (the message says the fix).
        """
        if not isinstance(database_url, str) or not database_url.startswith(
            ("sqlite:///", "postgresql://", "postgres://", "postgresql+psycopg://")
        ):
            raise UsageError(
                "DBOSEngine needs its database as 'sqlite:///PATH' or 'postgresql://USER@HOST/DB'"
                f", got {database_url!r}"
            )
        if not isinstance(concurrency, int) or concurrency < 1:
            raise UsageError(f"concurrency must be an int >= 1, got {concurrency!r}")
        if not isinstance(poll_interval_s, int | float) or not 0 < poll_interval_s <= 10:
            raise UsageError(
                f"poll_interval_s must be a number of seconds in (0, 10], got {poll_interval_s!r}"
            )
        for label, value in (("worker_id", worker_id), ("app_name", app_name), ("queue", queue)):
            if not isinstance(value, str) or not value.strip():
                raise UsageError(f"{label} must be a non-empty str, got {value!r}")
        self.database_url = database_url
        self.worker_id = worker_id
        self.app_name = app_name
        self.app_version = app_version
        self.queue = queue
        self.concurrency = concurrency
        self.poll_interval_s = float(poll_interval_s)
        self._client: DBOSClient | None = None
        self._client_engine: sqlalchemy.Engine | None = None
        # The runs this process awaits, and the task polling them (`_outcome`).
        self._awaited: dict[str, list[asyncio.Future[None]]] = {}
        self._watcher: asyncio.Task[None] | None = None
        self._client_lock = asyncio.Lock()
        self._working = False  # this process runs this engine's worker

    def __repr__(self) -> str:
        where = self.database_url.split("@")[-1] if "@" in self.database_url else self.database_url
        return f"DBOSEngine({where!r}, worker_id={self.worker_id!r})"

    # submitting ---------------------------------------------------------------------------
    async def run(self, agent: AgentCore, props: AgentProps) -> AgentFinalResponse:
        """Submit the run `props` (its `trace_id` set) and await its response.

        Args:
            agent: The submitting agent (its storage is the workers').
            props: The run; its `trace_id` names the workflow (`pes-agent-run-TRACE_ID`).

        Returns:
            The run's response, as a worker's `process()` returned it.

        Raises:
            UsageError: What `process()` raises on the worker (a thread waiting for approval,
                say), raised here.
        """
        assert props.trace_id is not None
        return await self._submit(
            RUN_WORKFLOW,
            _run_id(props.trace_id),
            props.thread_id,
            props.trace_id,
            props.user_id,
            props,
        )

    async def resume(
        self, agent: AgentCore, thread_id: str, trace_id: str, decisions: dict[str, Decision]
    ) -> AgentFinalResponse:
        """Submit the resumption of the paused run `trace_id` and await its response.

        Args:
            agent: The submitting agent.
            thread_id: The thread the run paused on.
            trace_id: The paused run's trace id.
            decisions: `Approve()` or `Deny(reason)` for each pending call id.

        Returns:
            The run's response, as a worker's `resume()` returned it.

        Raises:
            NotAwaitingApprovalError: No such run waits (resumed or cancelled already).
            UsageError: The decisions do not fit the pending calls (checked on the worker as
                the run is claimed, raised here).
        """
        # A run may pause again and be resumed again: each resumption is a workflow of its own.
        workflow_id = f"{_resume_prefix(trace_id)}{uuid.uuid4().hex[:12]}"
        return await self._submit(
            RESUME_WORKFLOW, workflow_id, thread_id, trace_id, None, thread_id, trace_id, decisions
        )

    async def _submit(
        self,
        workflow: str,
        workflow_id: str,
        thread_id: str,
        trace_id: str,
        user_id: str | None,
        *args: Any,
    ) -> AgentFinalResponse:
        """Enqueue `workflow(*args)` on the thread's partition and await its result; a
        cancelled caller cancels it, and a run cancelled elsewhere (`cancel`) answers
        `cancelled`. A worker process starts it itself instead of enqueuing it."""
        if self._working:
            # A worker starts it itself: no queue and no polling, so a run costs only its
            # steps. Its turn on the thread is still its own: the run takes the thread's lock
            # in the agent's storage, which every process shares.
            _first_lives.add(workflow_id)
            with SetWorkflowID(workflow_id):
                started = await DBOS.start_workflow_async(_WORKFLOWS[workflow], *args)
            outcome = started.get_result()
            cancel = DBOS.cancel_workflow_async
        else:
            client = await self._submitter()
            handle: WorkflowHandleAsync[AgentFinalResponse] = await client.enqueue_async(
                {
                    "workflow_name": workflow,
                    "queue_name": self.queue,
                    "queue_partition_key": thread_id,
                    "workflow_id": workflow_id,
                    "app_version": self.app_version,
                },
                *args,
            )
            outcome = self._outcome(handle)
            cancel = client.cancel_workflow_async
        try:
            return await outcome
        except DBOSAwaitedWorkflowCancelledError:
            return cancelled_elsewhere(thread_id, trace_id, user_id)
        except asyncio.CancelledError:
            # The caller gave up: the run stops wherever it runs, as it would in process.
            await asyncio.shield(cancel(workflow_id))
            raise
        finally:
            _first_lives.discard(workflow_id)  # begun by now (or not ours: a reused trace id)

    async def _outcome(self, handle: WorkflowHandleAsync[AgentFinalResponse]) -> AgentFinalResponse:
        """The workflow's result once it ended, polled so that a cancel lands between reads.

        The runs this process awaits are polled together (`_watch`): one read of their
        statuses per `poll_interval_s`, however many there are, rather than a read each."""
        workflow_id = handle.workflow_id
        ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._awaited.setdefault(workflow_id, []).append(ended)
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.create_task(self._watch())
        try:
            await ended
        finally:
            waiting = self._awaited.get(workflow_id, [])
            if ended in waiting:
                waiting.remove(ended)
            if not waiting:
                self._awaited.pop(workflow_id, None)
        return await _unbroken(handle.get_result(polling_interval_sec=self.poll_interval_s))

    async def _watch(self) -> None:
        """While runs are awaited: read their statuses in one query per poll interval and wake
        the callers of those that ended (all of them with the error of a read that failed)."""
        while self._awaited:
            await asyncio.sleep(self.poll_interval_s)
            awaited = dict(self._awaited)
            if not awaited:
                return
            try:
                client = await self._submitter()
                statuses = await _unbroken(
                    client.list_workflows_async(
                        workflow_ids=list(awaited), load_input=False, load_output=False
                    )
                )
            except Exception as error:
                woken = [waiter for waiters in awaited.values() for waiter in waiters]
                for waiter in woken:
                    if not waiter.done():
                        waiter.set_exception(error)
                continue
            for status in statuses:
                if status.status not in ("ENQUEUED", "PENDING", "DELAYED"):
                    for waiter in awaited.get(status.workflow_id, []):
                        if not waiter.done():
                            waiter.set_result(None)

    # any process ---------------------------------------------------------------------------
    async def find(self, trace_id: str) -> EngineRun | None:
        """The run `trace_id` (its latest resumption, if it was resumed) as DBOS records it.

        Args:
            trace_id: The run's trace id.

        Returns:
            The run (`EngineRun`), or None when it was never submitted to this engine.
        """
        found = await self._latest(trace_id)
        return _engine_run(trace_id, found) if found is not None else None

    async def running(self, thread_id: str) -> list[EngineRun]:
        """The runs of `thread_id` still queued or running (resumptions included), whichever
        process submitted them: read from DBOS's workflow table, each run's thread from its
        input.

        Args:
            thread_id: The thread.

        Returns:
            Its runs that go on, oldest first.
        """
        client = await self._submitter()
        going = await client.list_workflows_async(
            status=["ENQUEUED", "DELAYED", "PENDING"],
            name=[RUN_WORKFLOW, RESUME_WORKFLOW],
            load_input=True,
            load_output=False,
        )
        runs = []
        for status in going:
            found = _thread_and_trace(status)
            if found is not None and found[0] == thread_id:
                runs.append(_engine_run(found[1], status, thread_id))
        return runs

    async def cancel(self, trace_id: str) -> EngineRun | None:
        """Cancel the run `trace_id`, from any process (its workflow, and its running steps
        on whichever worker runs it); the process awaiting it gets a `cancelled` response.

        Args:
            trace_id: The run's trace id.

        Returns:
            The run as found before cancelling (one that had ended is left as it was), or
            None when it was never submitted to this engine.
        """
        found = await self._latest(trace_id)
        if found is None:
            return None
        run = _engine_run(trace_id, found)
        if run.running:
            client = await self._submitter()
            await client.cancel_workflow_async(found.workflow_id)
        return run

    async def _latest(self, trace_id: str) -> WorkflowStatus | None:
        """The workflow of the run `trace_id`: its latest resumption, else the run itself."""
        client = await self._submitter()
        prefix = _resume_prefix(trace_id)
        resumptions = [
            status
            for status in await client.list_workflows_async(
                workflow_id_prefix=prefix, sort_desc=True, load_input=True, load_output=True
            )
            # A longer trace id may start with this one and a dash: keep this run's own.
            if len(status.workflow_id) == len(prefix) + 12
        ]
        if resumptions:
            return resumptions[0]
        runs = await client.list_workflows_async(
            workflow_ids=[_run_id(trace_id)], load_input=True, load_output=True
        )
        return runs[0] if runs else None

    async def _submitter(self) -> DBOSClient:
        """The one client of this engine's submissions, made by the first (runs submitted at
        once wait for it rather than each making a client of their own)."""
        async with self._client_lock:
            if self._client is None:
                # On SQLite, the connections tuned as the worker's are (`_engine_for`).
                self._client_engine = _engine_for(self.database_url)
                self._client = await asyncio.to_thread(
                    DBOSClient,
                    system_database_url=_system_url(self.database_url),
                    system_database_engine=self._client_engine,
                    application_name=self.app_name,
                )
            return self._client

    async def aclose(self) -> None:
        """Close the submitting client's connections (a worker closes its own)."""
        watcher, self._watcher = self._watcher, None
        if watcher is not None and not watcher.done():
            watcher.cancel()
            await asyncio.wait([watcher])  # its read ends before the client's pool closes
        client, self._client = self._client, None
        engine, self._client_engine = self._client_engine, None
        if client is not None:
            client.destroy()  # closes its pool's connections: quick
        if engine is not None:
            engine.dispose()  # an engine given to the client is the giver's to close

    # working ------------------------------------------------------------------------------
    @asynccontextmanager
    async def worker(self, agent: AgentCore) -> AsyncIterator[None]:
        """Run `agent`'s runs in this process while the block lasts (one worker per process).

        At launch the worker takes over the runs its `worker_id` left unfinished, then takes
        runs from the queue, at most `concurrency` at once and one at a time per thread.

        Args:
            agent: The agent whose tools and providers the runs use.

        Yields:
            Nothing: leave the block to stop the worker (runs under way are left to be taken
            over by the next worker with this id).

        Raises:
            UsageError: This process already runs a worker.
        """
        global _worker_agent, _worker_engine
        if _worker_agent is not None:
            raise UsageError(
                "this process already runs a pes-agent worker (DBOS runs one per process); "
                "start another process for another worker"
            )
        _worker_agent, _worker_engine = agent, self
        try:
            dbos = DBOS(
                config={
                    "name": self.app_name,
                    "system_database_url": _system_url(self.database_url),
                    "system_database_engine": _engine_for(self.database_url),
                    "application_version": self.app_version,
                    "executor_id": self.worker_id,
                    "log_level": os.environ.get("PES_DBOS_LOG_LEVEL", "WARNING"),
                    "notification_listener_polling_interval_sec": self.poll_interval_s,
                }
            )
            # Launched in a thread: at launch DBOS takes over this worker's unfinished runs,
            # and it would block this loop waiting for them to be scheduled on it.
            await asyncio.to_thread(DBOS.launch)
            # Then the runs taken from the queue run on this loop, not on DBOS's own: the
            # agent's clients (a provider's HTTP connections) live on the loop that closes
            # them. On DBOS's loop, closing the agent after the worker failed ("Event loop
            # is closed"), as soon as a run had used a real provider.
            dbos._background_event_loop.set_main_loop()
            await DBOS.register_queue_async(
                self.queue,
                worker_concurrency=self.concurrency,
                partition_concurrency=1,
                polling_interval_sec=self.poll_interval_s,
            )
            self._working = True
            yield
        finally:
            self._working = False
            _worker_agent = _worker_engine = None
            await asyncio.to_thread(DBOS.destroy)
            # DBOS made its thread pool the loop's default executor and has shut it down:
            # give the loop a working one back, for asyncio.to_thread everywhere else.
            asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor())


async def _unbroken(read: Coroutine[Any, Any, T]) -> T:
    """`read`'s outcome; cancelled, it lets `read` end first. A DBOS client's read runs in a
    thread holding a database connection: left running past a cancel, its connection could
    outlive the client's pool (closed by `aclose`) and be dropped unclosed."""
    task = asyncio.ensure_future(read)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait([task])
        if not task.cancelled():
            task.exception()  # retrieved: the caller was cancelled, that is what it sees
        raise


def _run_id(trace_id: str) -> str:
    return f"pes-agent-run-{trace_id}"


def _resume_prefix(trace_id: str) -> str:
    return f"pes-agent-resume-{trace_id}-"


def _thread_and_trace(status: WorkflowStatus) -> tuple[str, str] | None:
    """The thread and trace id of a run's or resumption's workflow, from its input (None
    for an input that is not one of ours)."""
    args = status.input["args"] if status.input is not None else ()
    if status.name == RUN_WORKFLOW and args and isinstance(args[0], AgentProps):
        props = args[0]
        return (props.thread_id, props.trace_id) if props.trace_id is not None else None
    if status.name == RESUME_WORKFLOW and len(args) >= 2:
        thread_id, trace_id = args[0], args[1]
        if isinstance(thread_id, str) and isinstance(trace_id, str):
            return thread_id, trace_id
    return None


def _engine_run(trace_id: str, status: WorkflowStatus, thread_id: str | None = None) -> EngineRun:
    if status.status == "SUCCESS":
        output = status.output
        state: str = output.metadata.status if isinstance(output, AgentFinalResponse) else "success"
    else:
        state = _STATUSES.get(status.status, "running")
    if thread_id is None:
        # Its input names it (a run a worker started itself has no queue partition).
        found = _thread_and_trace(status) if status.input is not None else None
        thread_id = found[0] if found is not None else status.queue_partition_key
    return EngineRun(
        trace_id=trace_id,
        thread_id=thread_id or "",
        status=state,
        worker_id=status.executor_id,
    )


def _system_url(database_url: str) -> str:
    if database_url.startswith("postgres://"):
        return "postgresql://" + database_url.removeprefix("postgres://")
    return database_url


def _engine_for(database_url: str) -> sqlalchemy.Engine | None:
    """SQLite in WAL mode with synchronous=NORMAL (a commit per step costs a fraction of the
    default's), for the worker and the client alike; None lets DBOS build PostgreSQL's engine.

    An engine given to DBOS replaces the one it would build, so each connection is also set up
    as DBOS sets up its own: writers begin IMMEDIATE transactions (DBOS serialises them
    so), foreign keys on."""
    if not database_url.startswith("sqlite:///"):
        return None
    engine = sqlalchemy.create_engine(database_url, connect_args={"timeout": 30})

    @sqlalchemy.event.listens_for(engine, "connect")
    def _tune(connection: Any, _record: Any) -> None:
        connection.isolation_level = "IMMEDIATE"
        cursor = connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    return engine
