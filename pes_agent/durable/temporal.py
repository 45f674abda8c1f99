"""`TemporalEngine`: runs that survive their worker, on Temporal.

```python
from pes_agent.durable.temporal import TemporalEngine     # pip install 'pes-agent[temporal]'

engine = TemporalEngine("127.0.0.1:7233", task_queue="pes-agent")
agent = create_agent(provider=..., tools=[...], storage="postgresql://...", engine=engine)
async with agent, engine.worker(agent):                    # in each worker process
    result = await agent.process(AgentProps("...", "thread-1"))   # same call, same response
```

- **A run is a workflow** (`pes_agent.run`, id `pes-agent/<task queue>/run/<trace id>`; its
  n-th resumption `pes_agent.resume`, id `pes-agent/<task queue>/resume/<trace id>/<n>`),
  started by the caller directly, and eagerly (its first workflow task handed back with the
  start, no trip through the task queue) when this process runs a worker of the queue. Its
  code is the PES systems themselves — the DAG, placeholders, gates and budgets run in the
  workflow. Its side effects have stable names (`docs/durable.md`): tool calls
  (`pes_agent.tool.<name>`) are activities any worker of the queue runs, heartbeating; the
  rest (load, model calls, pause, claim, commit, and `pes_agent.end_turn`, which waits for the
  run's observations and hands the thread's turn back) are *local activities*, run by the
  worker running the workflow, whose agent holds the providers, with no round trip through
  the server. The client's agent may be thin (no tools, no model).
- **A worker dies** (SIGKILL): a tool call it ran stops heartbeating and is tried again on
  another worker after `heartbeat_timeout_s`; a workflow task it held times out after
  `task_timeout_s` and another worker replays the run from its history. Every finished step
  answers from the record — its tool not called again, the turn committed once — and the step
  that was under way runs again (at least once, like any retried call). Tool calls are not
  local activities because a local activity's result is kept only when its workflow task
  ends: a quick call finishing beside a slow one would be done again after a crash.
- **One turn at a time per thread**, across all workers: a run's first step (`pes_agent.load`,
  a resumption's `pes_agent.claim`) takes the thread's turn in the agent's storage
  (`TurnLeases`, a lease named after the run's workflow) before it reads anything, in the
  same local activity; `pes_agent.end_turn` gives it back. A run that finds the turn taken
  waits (a durable timer, 0.1 s doubling to 2 s) and claims again; a lease whose workflow no
  longer runs (terminated, timed out) is broken by the next claimer. Runs waiting for one
  thread start in no particular order, never side by side.
- **Retries.** A step's error is its outcome, raised in the workflow as it was raised on the
  worker: never retried by Temporal, except a model call's retryable `ProviderError` (one the
  provider's own retries left, or a provider without them), tried 3 times in all (0.5 s, then
  1 s apart). Refusals (`ProviderError.refusal`) and usage errors are not retried. A tool
  call's activity is retried only when its worker is lost (its error is its outcome).
- **Cancelling** the task awaiting `process()` cancels the run's workflow, wherever it is: a
  run waiting for its thread's turn ends there, a running tool hears of it at its next
  heartbeat; the run ends CANCELED. `TemporalEngine.cancel(trace_id)` does the same from any
  process; `find(trace_id)` gives the run's latest resumption's status.
- **Determinism.** Workflow code may do no I/O, and ours does none: everything that reaches
  the world goes through `RunEffects` (observations are handed to the worker's own loop,
  which writes them; a replay does not write them again). The workflows run unsandboxed
  (`UnsandboxedWorkflowRunner`): the sandbox would import pes-agent again for every run and
  forbid the clock the observations' timestamps and the run's timings read, which decide
  nothing. What decides the run's course — the plan, the results, the approvals, the turn —
  comes from the steps, so a replay takes the same path; a replay that does not (a changed
  agent) fails with Temporal's non-determinism error instead of mixing steps up.
  `TemporalEngine.replayer(agent)` replays a history to check it.
- **Values in the history** are pickled (the steps' outcomes and the run's response, like
  DBOS's steps): the workers and submitters must share pes-agent's version.
- **Streaming dispatch** is an in-process optimisation: on an engine, a plan's calls start once
  the planning step has finished. An `approval_handler` (in-run approvals) is asked in the
  local activity `pes_agent.approval`: it may do I/O, and a replay gets its decision.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import gc
import itertools
import pickle
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from pes_agent.approvals.models import Decision
from pes_agent.durable.effects import (
    EngineRun,
    StepKind,
    ToolOutcome,
    cancelled_elsewhere,
    run_tool,
)
from pes_agent.errors import (
    ConfigurationError,
    PESAgentError,
    ProviderError,
    RunError,
    UsageError,
)
from pes_agent.observing.logs import get_logger
from pes_agent.observing.types import Observation
from pes_agent.protocols import LLMResponse
from pes_agent.run import AgentFinalResponse, AgentProps
from pes_agent.storage.base import TurnLeases
from pes_agent.tools.base import ToolContext

try:
    from temporalio import activity, workflow
    from temporalio.client import (
        Client,
        WorkflowExecutionStatus,
        WorkflowFailureError,
        WorkflowHandle,
    )
    from temporalio.common import (
        RawValue,
        RetryPolicy,
        WorkflowIDConflictPolicy,
        WorkflowIDReusePolicy,
    )
    from temporalio.exceptions import (
        ActivityError,
        ApplicationError,
        WorkflowAlreadyStartedError,
    )
    from temporalio.exceptions import CancelledError as TemporalCancelledError
    from temporalio.service import RPCError, RPCStatusCode
    from temporalio.worker import Replayer, UnsandboxedWorkflowRunner, Worker
except ImportError as error:  # pragma: no cover - the extra is installed in CI
    raise ConfigurationError(
        "TemporalEngine needs the temporalio package: pip install 'pes-agent[temporal]'"
    ) from error

if TYPE_CHECKING:
    from pes_agent.core import AgentCore

__all__ = [
    "END_TURN_ACTIVITY",
    "MODEL_RETRY_POLICY",
    "RESUME_WORKFLOW",
    "RUN_WORKFLOW",
    "STEP_RETRY_POLICY",
    "TemporalEngine",
    "tool_retry_policy",
]

T = TypeVar("T")

_log = get_logger("pes_agent.durable.temporal")

RUN_WORKFLOW = "pes_agent.run"
"""The workflow type of a run (persisted: runs in flight need it unchanged)."""
RESUME_WORKFLOW = "pes_agent.resume"
"""The workflow type of a paused run's resumption (persisted too)."""
END_TURN_ACTIVITY = "pes_agent.end_turn"
"""The local activity that ends each run: its observations written, its thread's turn given
back."""
_TOOL_PREFIX = "pes_agent.tool."
_MODEL_PREFIX = "pes_agent.model."
_COMMIT_STEP = "pes_agent.commit_turn"

MODEL_RETRY_POLICY = RetryPolicy(
    initial_interval=timedelta(seconds=0.5),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=8),
    maximum_attempts=3,
)
"""A model call's local activity: a retryable `ProviderError` is tried again (the timings of
the library's `RetryPolicy` defaults); refusals, usage errors and every other error are its
outcome, not retried."""
STEP_RETRY_POLICY = RetryPolicy(maximum_attempts=1)
"""Every other local activity (load, pause, claim, commit, end turn): its error is its
outcome, raised in the workflow; not retried by Temporal (the commit retries a transient
storage error itself, as in process)."""


def tool_retry_policy(heartbeat_timeout_s: float) -> RetryPolicy:
    """A tool call's activity: tried again, every 0.1 s doubling up to the heartbeat timeout,
    until its step timeout, when its worker is lost (it stops heartbeating); a tool's own error
    is its outcome, never retried."""
    return RetryPolicy(
        initial_interval=timedelta(milliseconds=100),
        maximum_interval=timedelta(seconds=heartbeat_timeout_s),
    )


_Write = Callable[[Observation], Coroutine[Any, Any, Observation]]

# Waiting for a thread's turn: the first wait, its growth, its longest.
_TURN_WAIT_S = (0.1, 2.0, 2.0)


@dataclass(slots=True, frozen=True)
class _Worker:
    """This process's worker of a task queue: its agent, its event loop (the activities' and
    the observations'; workflow code runs on loops of Temporal's own) and its client (None in
    a `Replayer`), which a submitter in this process shares to start runs eagerly."""

    agent: AgentCore
    loop: asyncio.AbstractEventLoop
    client: Client | None
    server: tuple[str, str]  # (address, namespace)


# The worker each task queue has in this process.
_WORKERS: dict[str, _Worker] = {}
# Each side effect a workflow scheduled, by the token its local activity carries. Local
# activities run in the process whose workflow scheduled them, so the effect is here; a
# workflow replayed after a worker died makes its effects anew, with new tokens.
_EFFECTS: dict[str, Callable[[], Coroutine[Any, Any, Any]]] = {}


class _Failed:
    """A step's error as its outcome, raised again where the workflow awaits the step."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Failed, (self.error,))


class _Busy:
    """A first step's outcome when another run holds the thread's turn: `holder` does."""

    __slots__ = ("holder",)

    def __init__(self, holder: str) -> None:
        self.holder = holder

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Busy, (self.holder,))


def _pickled(value: Any) -> bytes:
    """`value` as the history keeps it; a step's value or error that cannot be pickled
    becomes the step's error."""
    try:
        return pickle.dumps(value)
    except Exception as error:
        if isinstance(value, _Failed):
            value = f"{type(value.error).__name__}: {value.error}"
        else:
            value = f"its result could not be kept (pickled): {type(error).__name__}: {error}"
        return pickle.dumps(_Failed(RunError(value)))


def _retried(error: ProviderError, info: activity.Info) -> bool:
    """Whether Temporal tries this model call again (`MODEL_RETRY_POLICY`)."""
    return (
        info.activity_type.startswith(_MODEL_PREFIX)
        and error.retryable
        and error.refusal is None
        and info.attempt < (MODEL_RETRY_POLICY.maximum_attempts or 1)
    )


@activity.defn(dynamic=True)
async def _effect(args: Sequence[RawValue]) -> bytes:
    """Every activity of a run, its outcome pickled: a tool call (`pes_agent.tool.<name>`,
    on any worker of the queue), or a local activity (`pes_agent.load`, ...) doing the effect
    its workflow left in this process under the token it carries."""
    info = activity.info()
    if not info.is_local:
        return await _tool_activity(info, args[0])
    token = activity.payload_converter().from_payload(args[0].payload, str)
    effect = _EFFECTS.get(token)  # left there for a retried attempt; the workflow removes it
    if effect is None:  # pragma: no cover - the workflow was evicted while the step waited
        raise ApplicationError(f"no effect {token} in this worker: the run will be replayed")
    try:
        return _pickled(await effect())
    except ProviderError as error:
        if _retried(error, info):
            raise ApplicationError(str(error), type=type(error).__name__) from None
        return _pickled(_Failed(error))
    except Exception as error:
        return _pickled(_Failed(error))


async def _tool_activity(info: activity.Info, arg: RawValue) -> bytes:
    """One tool call, by the worker's agent, heartbeating while it runs: a worker that dies
    stops heartbeating and the call is tried again elsewhere; a cancelled run's call hears
    of it at its next heartbeat."""
    name = info.activity_type.removeprefix(_TOOL_PREFIX)
    worker = _WORKERS.get(info.task_queue)
    tool = worker.agent.tools.as_mapping().get(name) if worker is not None else None
    if tool is None:  # pragma: no cover - workers of one queue share their tools
        raise ApplicationError(f"no tool {name!r} on this worker", non_retryable=True)
    payload = activity.payload_converter().from_payload(arg.payload, bytes)
    arguments, context = pickle.loads(payload)
    state = context.state
    before = copy.deepcopy(state.data) if state is not None else None
    call = asyncio.ensure_future(run_tool(tool, arguments, context))
    every = info.heartbeat_timeout.total_seconds() / 3 if info.heartbeat_timeout else 1.0
    try:
        # A heartbeat only once the call has run a while: a quick call sends none (each is a
        # round trip to the server); a cancelled run's call hears of it at the next one.
        while not (await asyncio.wait((call,), timeout=every))[0]:
            activity.heartbeat()
    finally:
        call.cancel()
    changes = _StateChanges.between(before, state.data) if state is not None else None
    try:
        return pickle.dumps((call.result(), changes))
    except Exception as error:  # the output cannot be kept: the call failed, not retried
        kept = ToolOutcome(failure=f"its output could not be kept (pickled): {error}")
        return pickle.dumps((kept, changes))


@dataclass(slots=True, frozen=True)
class _StateChanges:
    """What a tool changed in its copy of the run's state (`context.state.data`, saved with
    the turn when state saving is implicit), for the workflow to apply to the run's own."""

    changed: dict[str, Any]
    removed: tuple[str, ...]

    @classmethod
    def between(cls, before: Any, after: dict[str, Any]) -> _StateChanges | None:
        changed = {k: v for k, v in after.items() if k not in before or before[k] != v}
        removed = tuple(k for k in before if k not in after)
        return cls(changed, removed) if changed or removed else None

    def apply(self, data: dict[str, Any]) -> None:
        # Key by key: calls running side by side that change other keys keep their changes.
        data.update(self.changed)
        for key in self.removed:
            data.pop(key, None)


@dataclass(slots=True, frozen=True)
class _Job:
    """A run's workflow input: its body (`AgentProps` or `_Resumption`, as JSON), its queue and
    its timeouts."""

    body: str
    task_queue: str
    step_s: float
    task_s: float
    heartbeat_s: float


@dataclass(slots=True, frozen=True)
class _Turn:
    """A run's hold on its thread's turn, named after its workflow (`TurnLeases`)."""

    thread_id: str
    owner: str  # "<workflow id>#<run id>#<namespace>"

    async def claim(self, worker: _Worker) -> str:
        """Take the turn, breaking a lease whose workflow no longer runs; who holds it now."""
        storage = worker.agent.storage
        assert isinstance(storage, TurnLeases)  # checked when the worker started
        holder = await storage.claim_turn(self.thread_id, self.owner)
        if holder != self.owner and not await _still_running(worker, holder):
            holder = await storage.claim_turn(self.thread_id, self.owner, breaking=holder)
        return holder

    async def release(self, worker: _Worker) -> None:
        storage = worker.agent.storage
        assert isinstance(storage, TurnLeases)
        await storage.release_turn(self.thread_id, self.owner)


async def _still_running(worker: _Worker, holder: str) -> bool:
    """Whether the workflow holding a thread's turn still runs. A holder this worker cannot
    ask about (another namespace's, or not a workflow's) is taken to: it is never broken."""
    named = holder.rsplit("#", 2)
    if worker.client is None or len(named) != 3 or named[2] != worker.server[1]:
        return True
    workflow_id, run_id, _ = named
    try:
        described = await worker.client.get_workflow_handle(workflow_id, run_id=run_id).describe()
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return described.status == WorkflowExecutionStatus.RUNNING


class _Effects:
    """A run's side effects as local activities (`pes_agent.durable.effects.RunEffects`)."""

    __slots__ = (
        "_hander",
        "_held",
        "_job",
        "_recorded",
        "_turn",
        "_unwaited",
        "_worker",
        "_written",
    )

    # The run takes its thread's turn itself, in its first step (see the module docstring).
    serialises_turns = True
    # Workflow code runs on Temporal's loops, in its threads; the worker hands runs over.
    runs_elsewhere = True

    def __init__(self, job: _Job, worker: _Worker, thread_id: str) -> None:
        self._job = job
        self._worker = worker  # its loop: where observations recorded by workflow code go
        info = workflow.info()
        self._turn = _Turn(thread_id, f"{info.workflow_id}#{info.run_id}#{info.namespace}")
        self._held = False  # whether the run may hold its thread's turn
        # Observations recorded by workflow code wait here, in the workflow's thread, for the
        # worker's loop to write them. The run's next step takes them if the workflow
        # schedules one in the same activation (the local activity writes them first, on the
        # loop it runs on: no wake-up of that loop of their own); what no step took is handed
        # to the loop once the activation has nothing left to run (`_hand_over`), so that a
        # run waiting on its tool calls has its observations written meanwhile.
        self._recorded: list[tuple[Observation, _Write]] = []
        self._hander: asyncio.Task[None] | None = None  # `_hand_over`, once anything is recorded
        self._written: concurrent.futures.Future[None] | None = None  # the last batch's write
        self._unwaited = False  # recorded since the last step began: it waits for them

    async def once(
        self,
        name: str,
        effect: Callable[[], Coroutine[Any, Any, T]],
        *,
        kind: StepKind = "effect",
    ) -> T:
        # Every kind is a local activity: workflow code may do no I/O, not even a read.
        if not self._held:
            return await self._first(name, effect)
        if name != _COMMIT_STEP:
            result: T = await self._step(name, effect)
            return result
        # The turn's last step: its commit, and its last observations written. The thread's
        # next run may start as soon as it has ended, so the same local activity gives the
        # turn back (one activity less per run than a step of its own).
        turn, worker = self._turn, self._worker

        async def commit_then_release() -> T:
            done = await effect()
            await turn.release(worker)
            return done

        committed: T = await self._step(name, commit_then_release)
        self._held = False
        return committed

    async def _first(self, name: str, effect: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """The run's first step: take the thread's turn, then do `effect`, in one local
        activity; while another run holds the turn, wait and try again."""
        turn, worker = self._turn, self._worker

        async def take_then_do() -> Any:
            holder = await turn.claim(worker)
            return _Busy(holder) if holder != turn.owner else await effect()

        first, growth, longest = _TURN_WAIT_S
        for attempt in itertools.count():
            self._held = True  # maybe taken, even if the step fails or is cancelled
            outcome = await self._step(name, take_then_do)
            if not isinstance(outcome, _Busy):
                result: T = outcome
                return result
            self._held = False
            await workflow.sleep(min(first * growth**attempt, longest))
        raise AssertionError("unreachable: the loop above returns")

    async def open_calls(self, steps: int, revisions: int) -> None:
        # Nothing to reserve: Temporal numbers steps as they are scheduled and replays them
        # from the history in the order it recorded, whatever order the calls finish in.
        return None

    async def model_call(
        self, phase: str, call: Callable[[], Coroutine[Any, Any, LLMResponse]]
    ) -> Any:
        return await self._step(_MODEL_PREFIX + phase, call, MODEL_RETRY_POLICY)

    async def tool_call(
        self,
        name: str,
        call: Callable[[], Coroutine[Any, Any, ToolOutcome]],
        *,
        arguments: dict[str, Any],
        context: ToolContext,
    ) -> ToolOutcome:
        # An activity of its own, not a local one: a local activity's result is kept only
        # when the workflow task ends, so a quick call finishing beside a slow one would be
        # done again if the worker died meanwhile. Recorded as it finishes, it is not.
        job = self._job
        sent = pickle.dumps((arguments, context.model_copy(update={"thread_pool": None})))
        with _cancellation():
            done = await workflow.execute_activity(
                _TOOL_PREFIX + name,
                sent,
                result_type=bytes,
                schedule_to_close_timeout=timedelta(seconds=job.step_s),
                heartbeat_timeout=timedelta(seconds=job.heartbeat_s),
                retry_policy=tool_retry_policy(job.heartbeat_s),
            )
        outcome, changes = pickle.loads(done)
        assert isinstance(outcome, ToolOutcome)
        if changes is not None and context.state is not None:
            changes.apply(context.state.data)
        return outcome

    async def record(
        self,
        observation: Observation,
        write: Callable[[Observation], Coroutine[Any, Any, Observation]],
    ) -> Observation:
        if not workflow.in_workflow():
            # A step's own observations (a model call's stream): the step is an activity.
            return await write(observation)
        # Workflow code does no I/O: the worker's own loop writes it, after the run's earlier
        # ones. A replay does not write again what was written when first recorded; only
        # what a workflow task that never completed recorded may be written twice.
        if workflow.unsafe.is_replaying():
            return observation
        self._unwaited = True
        self._recorded.append((observation, write))
        if self._hander is None:
            self._hander = asyncio.get_running_loop().create_task(self._hand_over())
        return observation

    async def _hand_over(self) -> None:
        """Each time an activation has nothing left to run (when Temporal checks workflow
        conditions) and workflow code recorded observations no step took: have the worker's
        loop write them, after the batches before them. One wake-up of that loop per
        activation at most, and none when the activation schedules a step. The condition
        reads workflow state only: it adds nothing to the history."""
        while True:
            await workflow.wait_condition(lambda: bool(self._recorded))
            self._send()

    def _send(self) -> None:
        batch, self._recorded = self._recorded, []
        finished: concurrent.futures.Future[None] = concurrent.futures.Future()
        asyncio.run_coroutine_threadsafe(
            _write_batch(batch, self._written, finished), self._worker.loop
        )
        self._written = finished

    def close(self) -> None:
        """The run's code has ended (maybe raising): hand over what is left, and stop."""
        if self._recorded:
            self._send()
        if self._hander is not None:
            self._hander.cancel()

    async def end(self) -> None:
        """End the run (`pes_agent.end_turn`): wait until every observation it recorded is
        written (subscribers see the last ones before the caller's answer), then give its
        thread's turn back. Skipped when there is neither to do: a committed run did both in
        its commit step; a run cancelled while waiting for its turn holds none."""
        held, turn, worker = self._held, self._turn, self._worker
        if not self._unwaited and not held:
            return

        async def end_turn() -> None:
            if held:
                await turn.release(worker)

        await self._step(END_TURN_ACTIVITY, end_turn)
        self._held = False

    async def _step(
        self,
        name: str,
        run: Callable[[], Coroutine[Any, Any, Any]],
        retry_policy: RetryPolicy = STEP_RETRY_POLICY,
    ) -> Any:
        # The run's observations recorded so far are written first: what the step records
        # itself (a model call's stream, the commit's final response) comes after them. The
        # step takes those not handed over yet and writes them itself (`carried`); should it
        # never begin (the run cancelled or evicted meanwhile), they are handed over below.
        previous, waits = self._written, self._unwaited
        self._unwaited = False
        carried: list[list[tuple[Observation, _Write]]] = []
        finished: concurrent.futures.Future[None] | None = None
        if self._recorded:
            carried.append(self._recorded)
            self._recorded = []
            finished = self._written = concurrent.futures.Future()

        async def in_order() -> Any:
            batch = _take(carried)
            if batch is not None and finished is not None:
                await _write_carried(batch, previous, finished)
            elif waits:
                # Written elsewhere: by the batches handed over, or by this step's first
                # attempt (a model call tried again).
                last = finished or previous
                if last is not None and not last.done():
                    with suppress(Exception):  # a failed write is logged by the store
                        await asyncio.wrap_future(last)
            return await run()

        # Not part of the history's identity of the step (its name and number are), so a
        # random token is fine here: it only finds `run` in this process.
        token = uuid.uuid4().hex
        _EFFECTS[token] = in_order
        try:
            with _cancellation():
                done = await workflow.execute_local_activity(
                    name,
                    token,
                    result_type=bytes,
                    start_to_close_timeout=timedelta(seconds=self._job.step_s),
                    retry_policy=retry_policy,
                )
        finally:
            _EFFECTS.pop(token, None)
            left = _take(carried)
            if left is not None and finished is not None:  # the step never began
                asyncio.run_coroutine_threadsafe(
                    _write_batch(left, previous, finished), self._worker.loop
                )
        outcome = pickle.loads(done)
        if isinstance(outcome, _Failed):
            raise outcome.error
        return outcome


@contextmanager
def _cancellation() -> Iterator[None]:
    """A step cancelled with its run (the workflow sees `ActivityError` caused by a
    cancellation) raises `CancelledError`, as a cancelled call does in process: the run ends
    CANCELED instead of taking the step for a failed call."""
    try:
        yield
    except ActivityError as error:
        if isinstance(error.cause, TemporalCancelledError):
            raise asyncio.CancelledError from error
        raise


async def _write_batch(
    batch: list[tuple[Observation, _Write]],
    previous: concurrent.futures.Future[None] | None,
    finished: concurrent.futures.Future[None],
) -> None:
    """Write `batch` on the worker's loop once the batch before it is written, then mark it
    `finished` (whatever became of the writes: a failed one is logged by the store)."""
    try:
        # Awaiting a done future would still cost a wake-up of the loop: skipped.
        if previous is not None and not previous.done():
            with suppress(Exception):
                await asyncio.wrap_future(previous)
        for observation, write in batch:
            with suppress(Exception):
                await write(observation)
    finally:
        finished.set_result(None)


async def _write_carried(
    batch: list[tuple[Observation, _Write]],
    previous: concurrent.futures.Future[None] | None,
    finished: concurrent.futures.Future[None],
) -> None:
    """`_write_batch` for a step that carries the batch: shielded, so a step cancelled while
    it writes (the run cancelled) still writes the whole batch, as a batch handed over is."""
    await asyncio.shield(_write_batch(batch, previous, finished))


def _take(box: list[T]) -> T | None:
    """The one item of `box`, taken out; None when it was taken already. The workflow's
    thread and the worker's loop may both try: `list.pop` lets one of them have it."""
    try:
        return box.pop()
    except IndexError:
        return None


def _worker(job: _Job) -> _Worker:
    # The job's queue, not workflow.info()'s: a Replayer runs the workflow on a queue of its own.
    worker = _WORKERS.get(job.task_queue)
    if worker is None:  # pragma: no cover - only a worker polls the queue
        raise ApplicationError(f"no pes-agent worker for the task queue {job.task_queue!r} here")
    return worker


async def _concluded(effects: _Effects, run: Coroutine[Any, Any, AgentFinalResponse]) -> bytes:
    """The run's response, or the pes-agent error it raised, pickled for the caller; the run
    ended (`_Effects.end`). A cancelled run ends CANCELED."""
    try:
        try:
            outcome: AgentFinalResponse | _Failed = await run
        except PESAgentError as error:  # what process() raises (a thread waiting for approval)
            outcome = _Failed(error)
        except asyncio.CancelledError:
            await effects.end()  # the cancellation's own ERROR observation; the turn given back
            raise
        await effects.end()
        return _pickled(outcome)
    finally:
        effects.close()


@workflow.defn(name=RUN_WORKFLOW, sandboxed=False)
class _RunWorkflow:
    """One run, on a worker: `process()` with its side effects as local activities."""

    @workflow.run
    async def run(self, job: _Job) -> bytes:
        props = AgentProps.model_validate_json(job.body)
        assert props.trace_id is not None  # set by the submitting process
        worker = _worker(job)
        effects = _Effects(job, worker, props.thread_id)
        return await _concluded(
            effects, worker.agent._process_on_engine(props, props.trace_id, effects)
        )


class _Resumption(BaseModel):
    """What a resumption's workflow gets: the paused run and the decisions."""

    thread_id: str
    trace_id: str
    decisions: dict[str, Decision]


@workflow.defn(name=RESUME_WORKFLOW, sandboxed=False)
class _ResumeWorkflow:
    """The resumption of a paused run, on a worker: `resume()` with its side effects as local
    activities."""

    @workflow.run
    async def run(self, job: _Job) -> bytes:
        asked = _Resumption.model_validate_json(job.body)
        worker = _worker(job)
        effects = _Effects(job, worker, asked.thread_id)
        return await _concluded(
            effects,
            worker.agent._resume_on_engine(
                asked.thread_id, asked.trace_id, asked.decisions, effects
            ),
        )


_WORKFLOWS = (_RunWorkflow, _ResumeWorkflow)


class _CancelledElsewhere(Exception):
    """The run's workflow was cancelled by another caller (`TemporalEngine.cancel`)."""


def _was_cancelled(error: BaseException) -> bool:
    """Whether a failed run failed because its workflow was cancelled."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, TemporalCancelledError):
            return True
        seen = getattr(seen, "cause", None) or seen.__cause__
    return False


@dataclass(slots=True, frozen=True)
class _Found:
    """A run's workflow as `TemporalEngine.find` reads it."""

    handle: WorkflowHandle[Any, bytes]
    run: EngineRun
    refused: bool  # a resumption that never happened (its claim was refused)


class TemporalEngine:
    """Durable runs on Temporal (see the module docstring).

    Configured here, connected when first used: `worker(agent)` runs runs in this process; an
    agent built with `create_agent(engine=engine)` submits its runs to the task queue.
    """

    def __init__(
        self,
        address: str,
        *,
        task_queue: str = "pes-agent",
        namespace: str = "default",
        task_timeout_s: float = 10.0,
        step_timeout_s: float = 3600.0,
        heartbeat_timeout_s: float = 5.0,
    ) -> None:
        """Configure the engine.

        Args:
            address: The Temporal frontend, ``HOST:PORT``.
            task_queue: Where runs are sent and workers poll; workflow ids include it.
            namespace: The Temporal namespace.
            task_timeout_s: A workflow task's timeout: how long a dead worker holds its runs
                before another worker takes them over.
            step_timeout_s: The longest a step (a model or tool call) may run.
            heartbeat_timeout_s: A tool call's worker heartbeats three times in this: when it
                stops, the call is tried again on another worker.

        Raises:
            UsageError: An argument is out of range (the message says the fix).
        """
        if not isinstance(address, str) or ":" not in address:
            raise UsageError(f"TemporalEngine needs the server as 'HOST:PORT', got {address!r}")
        for label, value in (("task_queue", task_queue), ("namespace", namespace)):
            if not isinstance(value, str) or not value.strip():
                raise UsageError(f"{label} must be a non-empty str, got {value!r}")
        for label, seconds in (
            ("task_timeout_s", task_timeout_s),
            ("step_timeout_s", step_timeout_s),
            ("heartbeat_timeout_s", heartbeat_timeout_s),
        ):
            if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0:
                raise UsageError(f"{label} must be a number of seconds > 0, got {seconds!r}")
        self.address = address
        self.task_queue = task_queue
        self.namespace = namespace
        self.task_timeout_s = float(task_timeout_s)
        self.step_timeout_s = float(step_timeout_s)
        self.heartbeat_timeout_s = float(heartbeat_timeout_s)
        self._client: Client | None = None

    def __repr__(self) -> str:
        return f"TemporalEngine({self.address!r}, task_queue={self.task_queue!r})"

    def _id(self, kind: str, key: str) -> str:
        return f"pes-agent/{self.task_queue}/{kind}/{key}"

    def _job(self, body: BaseModel) -> _Job:
        return _Job(
            body.model_dump_json(),
            self.task_queue,
            self.step_timeout_s,
            self.task_timeout_s,
            self.heartbeat_timeout_s,
        )

    # submitting ---------------------------------------------------------------------------
    async def run(self, agent: AgentCore, props: AgentProps) -> AgentFinalResponse:
        """Start the run `props` (its `trace_id` set) as a workflow and await its response.

        A run whose trace id names a workflow still running is not started again: this awaits
        that one.

        Args:
            agent: The submitting agent (its storage is the workers').
            props: The run; its `trace_id` names the workflow.

        Returns:
            The run's response, as a worker's `process()` returned it.

        Raises:
            UsageError: What `process()` raises on the worker (a thread waiting for approval,
                say), raised here.
        """
        assert props.trace_id is not None
        client, eager = await self._starter()
        handle = await client.start_workflow(
            RUN_WORKFLOW,
            self._job(props),
            id=self._id("run", props.trace_id),
            task_queue=self.task_queue,
            result_type=bytes,
            task_timeout=timedelta(seconds=self.task_timeout_s),
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            memo={"thread_id": props.thread_id},  # where `find` reads the run's thread
            request_eager_start=eager,
        )
        try:
            return await self._outcome(handle)
        except _CancelledElsewhere:
            return cancelled_elsewhere(props.thread_id, props.trace_id, props.user_id)

    async def resume(
        self, agent: AgentCore, thread_id: str, trace_id: str, decisions: dict[str, Decision]
    ) -> AgentFinalResponse:
        """Start the resumption of the paused run `trace_id` and await its response.

        Raises:
            NotAwaitingApprovalError: No such run waits (resumed or cancelled already).
            UsageError: The decisions do not fit the pending calls (checked on the worker).
        """
        body = _Resumption(thread_id=thread_id, trace_id=trace_id, decisions=decisions)
        client, eager = await self._starter()
        # A run may pause again and be resumed again: resumption n is the workflow
        # resume/<trace id>/<n>, the first number no workflow has had (`find` walks them).
        for number in itertools.count(1):
            try:
                handle = await client.start_workflow(
                    RESUME_WORKFLOW,
                    self._job(body),
                    id=self._id("resume", f"{trace_id}/{number}"),
                    task_queue=self.task_queue,
                    result_type=bytes,
                    task_timeout=timedelta(seconds=self.task_timeout_s),
                    id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                    memo={"thread_id": thread_id},
                    request_eager_start=eager,
                )
                break
            except WorkflowAlreadyStartedError:
                continue
        try:
            return await self._outcome(handle)
        except _CancelledElsewhere:
            return cancelled_elsewhere(thread_id, trace_id, None)

    async def _outcome(self, handle: WorkflowHandle[Any, bytes]) -> AgentFinalResponse:
        """The run's response; a cancelled caller cancels the run's workflow."""
        try:
            outcome = pickle.loads(await handle.result())
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                # The caller gave up: the run stops wherever it is, as it would in process
                # (unless it has just ended: then there is nothing to stop).
                with suppress(RPCError):
                    await asyncio.shield(handle.cancel())
            raise
        except WorkflowFailureError as error:
            if _was_cancelled(error):
                raise _CancelledElsewhere from None
            raise RunError(f"the run {handle.id} did not finish: {error.cause or error}") from error
        if isinstance(outcome, _Failed):
            raise outcome.error
        assert isinstance(outcome, AgentFinalResponse)
        return outcome

    # any process ---------------------------------------------------------------------------
    async def find(self, trace_id: str) -> EngineRun | None:
        """The run `trace_id` as Temporal records it: its latest resumption's workflow when it
        was resumed (one refused, its decisions not fitting say, is passed over), else its
        own.

        Args:
            trace_id: The run's trace id.

        Returns:
            The run (`EngineRun`), or None when it was never submitted to this engine.
        """
        found = await self._latest(trace_id)
        return None if found is None else found.run

    async def cancel(self, trace_id: str) -> EngineRun | None:
        """Cancel the run `trace_id` (its latest resumption) from any process: its workflow
        and its running tool activities (they heartbeat, so they hear of it); its caller gets
        `cancelled`.

        Args:
            trace_id: The run's trace id.

        Returns:
            The run as found before cancelling (one that had ended is left as it was), or
            None when it was never submitted to this engine.
        """
        found = await self._latest(trace_id)
        if found is None:
            return None
        if found.run.running:
            await found.handle.cancel()
        return found.run

    async def _latest(self, trace_id: str) -> _Found | None:
        """The run's workflow, then each of its resumptions in turn until one is missing: the
        last that happened."""
        client = await self._submitter()
        latest = await self._described(client, self._id("run", trace_id), trace_id)
        if latest is None:
            return None
        for number in itertools.count(1):
            later = await self._described(
                client, self._id("resume", f"{trace_id}/{number}"), trace_id
            )
            if later is None:
                return latest
            if not later.refused:
                latest = later
        raise AssertionError("unreachable: the loop above returns")

    async def _described(self, client: Client, workflow_id: str, trace_id: str) -> _Found | None:
        handle = client.get_workflow_handle(workflow_id, result_type=bytes)
        try:
            described = await handle.describe()
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return None
            raise
        thread_id = str(await described.memo_value("thread_id", ""))
        status, refused = described.status, False
        if status == WorkflowExecutionStatus.RUNNING:
            state = "running"
        elif status == WorkflowExecutionStatus.COMPLETED:
            outcome = pickle.loads(await handle.result())
            if isinstance(outcome, AgentFinalResponse):
                state = outcome.metadata.status
            else:  # a pes-agent error: a run refused on its worker
                state, refused = "error", workflow_id.startswith(self._id("resume", ""))
        elif status == WorkflowExecutionStatus.CANCELED:
            state = "cancelled"
        else:
            state = "error"
        return _Found(
            handle, EngineRun(trace_id=trace_id, thread_id=thread_id, status=state), refused
        )

    async def running(self, thread_id: str) -> list[EngineRun]:
        """The runs of `thread_id` still running (resumptions included), whichever process
        submitted them, from Temporal's visibility store (which may lag a moment behind).

        Args:
            thread_id: The thread.

        Returns:
            Its running runs, as `EngineRun`s (status `running`).
        """
        client = await self._submitter()
        prefix = f"pes-agent/{self.task_queue}/"  # every run's and resumption's id (`_id`)
        query = f'WorkflowId STARTS_WITH "{prefix}" AND ExecutionStatus = "Running"'
        runs = []
        async for execution in client.list_workflows(query):
            if execution.workflow_type not in (RUN_WORKFLOW, RESUME_WORKFLOW):
                continue
            if str(await execution.memo_value("thread_id", "")) != thread_id:
                continue
            kind, _, key = execution.id.removeprefix(prefix).partition("/")
            trace_id = key.rpartition("/")[0] if kind == "resume" else key
            runs.append(EngineRun(trace_id=trace_id, thread_id=thread_id, status="running"))
        return runs

    async def _connect(self) -> Client:
        """A client of the Temporal server; a `ConfigurationError` saying what to check when
        the server cannot be reached."""
        try:
            return await Client.connect(self.address, namespace=self.namespace)
        except RuntimeError as error:  # the SDK's core reports a failed connection so
            raise ConfigurationError(
                f"cannot reach the Temporal server at {self.address} (namespace "
                f"{self.namespace!r}): start it (temporal server start-dev) or check the "
                f"address; {str(error).splitlines()[0][:200]}"
            ) from None

    async def _starter(self) -> tuple[Client, bool]:
        """The client to start a run with, and whether to start it eagerly: the client of
        this process's worker of the queue, if any (Temporal hands an eagerly started
        workflow's first task to a worker of the client that started it), else our own."""
        worker = _WORKERS.get(self.task_queue)
        if (
            worker is not None
            and worker.client is not None
            and worker.server == (self.address, self.namespace)
        ):
            return worker.client, True
        return await self._submitter(), False

    async def _submitter(self) -> Client:
        if self._client is None:
            self._client = await self._connect()
        return self._client

    async def aclose(self) -> None:
        """Let go of the submitting client (a worker closes its own)."""
        self._client = None
        # The SDK's client must be collected while the loop runs (temporalio/sdk-python#300:
        # collected at interpreter exit it aborts the process).
        gc.collect()

    # working ------------------------------------------------------------------------------
    @asynccontextmanager
    async def worker(self, agent: AgentCore) -> AsyncIterator[None]:
        """Run `agent`'s runs in this process while the block lasts.

        Opens the agent's tool sources first (workflow code may do no I/O), then polls the
        task queue. On leaving, the steps under way are cancelled and their runs left to be
        taken over by another worker.

        Args:
            agent: The agent whose tools and providers the runs use; its storage lends the
                threads' turns (`TurnLeases`: every bundled store does).

        Yields:
            Nothing: leave the block to stop the worker.

        Raises:
            UsageError: This process already runs a worker on this task queue, or the agent's
                storage lends no turns.
        """
        if self.task_queue in _WORKERS:
            raise UsageError(
                f"this process already runs a pes-agent worker on the task queue "
                f"{self.task_queue!r}; start another process for another worker"
            )
        if not isinstance(agent.storage, TurnLeases):
            raise UsageError(
                f"a Temporal worker's agent needs a storage that lends threads' turns "
                f"(pes_agent.storage.TurnLeases: claim_turn, release_turn), and "
                f"{type(agent.storage).__name__} does not: use a bundled one "
                "(storage='sqlite:///agent.db' or 'postgresql://...')"
            )
        await agent.tools.open_sources()
        client: Client | None = await self._connect()
        assert client is not None
        loop = asyncio.get_running_loop()
        _WORKERS[self.task_queue] = _Worker(agent, loop, client, (self.address, self.namespace))
        try:
            async with Worker(
                client,
                task_queue=self.task_queue,
                workflows=list(_WORKFLOWS),
                activities=[_effect],
                workflow_runner=UnsandboxedWorkflowRunner(),
                # A dead worker's runs leave its sticky queue for the shared one this soon.
                sticky_queue_schedule_to_start_timeout=timedelta(seconds=self.task_timeout_s),
            ):
                yield
        finally:
            _WORKERS.pop(self.task_queue, None)
            client = None
            gc.collect()  # temporalio/sdk-python#300, as in aclose()

    @asynccontextmanager
    async def replayer(self, agent: AgentCore) -> AsyncIterator[Replayer]:
        """A `Replayer` of this engine's workflows, with `agent` standing in for the worker's
        (its tools are not called: every step answers from the history); check a history
        with `await replayer.replay_workflow(history)` before deploying a changed agent.

        Raises:
            UsageError: This process runs a worker on this task queue.
        """
        if self.task_queue in _WORKERS:
            raise UsageError(
                f"this process runs a pes-agent worker on the task queue {self.task_queue!r}"
            )
        loop = asyncio.get_running_loop()
        _WORKERS[self.task_queue] = _Worker(agent, loop, None, (self.address, self.namespace))
        try:
            yield Replayer(workflows=list(_WORKFLOWS), workflow_runner=UnsandboxedWorkflowRunner())
        finally:
            _WORKERS.pop(self.task_queue, None)
