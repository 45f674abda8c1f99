"""`TemporalEngine`: runs that survive their worker, on Temporal.

```python
from pes_agent.durable.temporal import TemporalEngine     # pip install 'pes-agent[temporal]'

engine = TemporalEngine("127.0.0.1:7233", task_queue="pes-agent")
agent = create_agent(provider=..., tools=[...], storage="postgresql://...", engine=engine)
async with agent, engine.worker(agent):                    # in each worker process
    result = await agent.process(AgentProps("...", "thread-1"))   # same call, same response
```

- **A run is a workflow** (`pes_agent.run`, id `pes-agent/<task queue>/run/<trace id>`; a
  resumption `pes_agent.resume`). Its code is the PES systems themselves — the DAG,
  placeholders, gates and budgets run in the workflow. Its side effects have stable names
  (`docs/durable.md`): tool calls (`pes_agent.tool.<name>`) are activities any worker of the
  queue runs, heartbeating; the rest (load, model calls, pause, claim, commit, and
  `pes_agent.record`, which waits for the run's observations) are *local activities*, run
  by the worker running the workflow, whose agent holds the providers, with no round trip
  through the server. The client's agent may be thin (no tools, no model).
- **A worker dies** (SIGKILL): a tool call it ran stops heartbeating and is tried again on
  another worker after `heartbeat_timeout_s`; a workflow task it held times out after
  `task_timeout_s` and another worker replays the run from its history. Every finished step
  answers from the record — its tool not called again, the turn committed once — and the step
  that was under way runs again (at least once, like any retried call). Tool calls are not
  local activities because a local activity's result is kept only when its workflow task
  ends: a quick call finishing beside a slow one would be done again after a crash.
- **One turn at a time per thread**, across all workers: `process()` sends the run as an
  update to the thread's workflow (`pes_agent.thread`, id `pes-agent/<task queue>/thread/<id>`,
  started by the first update and ended after `thread_idle_s` without turns), which runs its
  turns one after another as child workflows.
- **Cancelling** the task awaiting `process()` cancels the run's workflow (or drops the turn
  if it has not started): its running tool is cancelled, the run ends CANCELED.
- **Determinism.** Workflow code may do no I/O, and ours does none: everything that reaches
  the world goes through `RunEffects` (observations are handed to the worker's own loop,
  which writes them; a replay does not write them again). The workflows run unsandboxed
  (`UnsandboxedWorkflowRunner`): the sandbox would import pes-agent again for every run and
  forbid the clock the observations' timestamps and the run's timings read, which decide
  nothing. What decides the run's course — the plan, the results, the approvals — comes from
  the steps, so a replay takes the same path; a replay that does not (a changed agent) fails
  with Temporal's non-determinism error instead of mixing steps up.
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
from pes_agent.errors import ConfigurationError, PESAgentError, RunError, UsageError
from pes_agent.observing.types import Observation
from pes_agent.protocols import LLMResponse
from pes_agent.run import AgentFinalResponse, AgentProps
from pes_agent.tools.base import ToolContext

try:
    from temporalio import activity, workflow
    from temporalio.client import (
        Client,
        WithStartWorkflowOperation,
        WorkflowExecutionStatus,
        WorkflowUpdateFailedError,
        WorkflowUpdateRPCTimeoutOrCancelledError,
    )
    from temporalio.common import RawValue, RetryPolicy, WorkflowIDConflictPolicy
    from temporalio.exceptions import ActivityError, ApplicationError
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
    "RECORD_ACTIVITY",
    "RESUME_WORKFLOW",
    "RUN_WORKFLOW",
    "THREAD_TURN",
    "THREAD_WORKFLOW",
    "TemporalEngine",
]

T = TypeVar("T")

RUN_WORKFLOW = "pes_agent.run"
"""The workflow type of a run (persisted: runs in flight need it unchanged)."""
RESUME_WORKFLOW = "pes_agent.resume"
"""The workflow type of a paused run's resumption (persisted too)."""
THREAD_WORKFLOW = "pes_agent.thread"
"""The workflow type that runs a thread's turns one at a time (persisted too)."""
THREAD_TURN = "turn"
"""The thread workflow's update that runs one turn."""
RECORD_ACTIVITY = "pes_agent.record"
"""The local activity that ends each run by waiting until its observations are written."""
_TOOL_PREFIX = "pes_agent.tool."

# The agent each task queue's worker in this process runs runs with, and its event loop (the
# activities' and the observations'; workflow code runs on loops of Temporal's own).
_AGENTS: dict[str, tuple[AgentCore, asyncio.AbstractEventLoop]] = {}
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


@activity.defn(dynamic=True)
async def _effect(args: Sequence[RawValue]) -> bytes:
    """Every activity of a run, its outcome pickled: a tool call (`pes_agent.tool.<name>`,
    on any worker of the queue), or a local activity (`pes_agent.load`, ...) doing the effect
    its workflow left in this process under the token it carries."""
    info = activity.info()
    if not info.is_local:
        return await _tool_activity(info, args[0])
    token = activity.payload_converter().from_payload(args[0].payload, str)
    effect = _EFFECTS.pop(token, None)
    if effect is None:  # pragma: no cover - the workflow was evicted while the step waited
        raise ApplicationError(f"no effect {token} in this worker: the run will be replayed")
    try:
        return _pickled(await effect())
    except Exception as error:
        return _pickled(_Failed(error))


async def _tool_activity(info: activity.Info, arg: RawValue) -> bytes:
    """One tool call, by the worker's agent, heartbeating while it runs: a worker that dies
    stops heartbeating and the call is tried again elsewhere; a cancelled run's call hears
    of it at its next heartbeat."""
    name = info.activity_type.removeprefix(_TOOL_PREFIX)
    worker = _AGENTS.get(info.task_queue)
    tool = worker[0].tools.as_mapping().get(name) if worker is not None else None
    if tool is None:  # pragma: no cover - workers of one queue share their tools
        raise ApplicationError(f"no tool {name!r} on this worker", non_retryable=True)
    payload = activity.payload_converter().from_payload(arg.payload, bytes)
    arguments, context = pickle.loads(payload)
    state = context.state
    before = copy.deepcopy(state.data) if state is not None else None
    call = asyncio.ensure_future(run_tool(tool, arguments, context))
    every = info.heartbeat_timeout.total_seconds() / 3 if info.heartbeat_timeout else 1.0
    try:
        while not call.done():
            activity.heartbeat()
            await asyncio.wait((call,), timeout=every)
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
class _Timeouts:
    """What a run's workflow waits for: a step, a worker's workflow task, a tool call's
    heartbeat."""

    step_s: float
    task_s: float
    heartbeat_s: float


class _Effects:
    """A run's side effects as local activities (`pes_agent.durable.effects.RunEffects`)."""

    __slots__ = ("_loop", "_timeouts", "_written")

    # The thread's workflow runs its turns one at a time.
    serialises_turns = True
    # Workflow code runs on Temporal's loops, in its threads; the worker hands runs over.
    runs_elsewhere = True

    def __init__(self, timeouts: _Timeouts, loop: asyncio.AbstractEventLoop) -> None:
        self._timeouts = timeouts
        self._loop = loop  # the worker's: where observations recorded by workflow code go
        self._written: concurrent.futures.Future[Any] | None = None  # the last of them

    async def once(
        self,
        name: str,
        effect: Callable[[], Coroutine[Any, Any, T]],
        *,
        kind: StepKind = "effect",
    ) -> T:
        # Every kind is a local activity: workflow code may do no I/O, not even a read.
        result: T = await self._step(name, effect)
        return result

    async def open_calls(self, steps: int, revisions: int) -> None:
        # Nothing to reserve: Temporal numbers steps as they are scheduled and replays them
        # from the history in the order it recorded, whatever order the calls finish in.
        return None

    async def model_call(
        self, phase: str, call: Callable[[], Coroutine[Any, Any, LLMResponse]]
    ) -> Any:
        return await self._step(f"pes_agent.model.{phase}", call)

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
        timeouts = self._timeouts
        sent = pickle.dumps((arguments, context.model_copy(update={"thread_pool": None})))
        with _cancellation():
            done = await workflow.execute_activity(
                _TOOL_PREFIX + name,
                sent,
                result_type=bytes,
                schedule_to_close_timeout=timedelta(seconds=timeouts.step_s),
                heartbeat_timeout=timedelta(seconds=timeouts.heartbeat_s),
                # Only a worker's death fails it (a tool's error is its outcome): try again.
                retry_policy=RetryPolicy(
                    initial_interval=timedelta(milliseconds=100),
                    maximum_interval=timedelta(seconds=timeouts.heartbeat_s),
                ),
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
        previous = self._written

        async def write_in_order() -> Any:
            if previous is not None:
                with suppress(Exception):
                    await asyncio.wrap_future(previous)
            return await write(observation)

        self._written = asyncio.run_coroutine_threadsafe(write_in_order(), self._loop)
        return observation

    async def flush(self) -> None:
        """Wait until every observation the run recorded is written (`pes_agent.record`,
        once per run, at its end: subscribers see the last ones before the caller's answer)."""
        written = self._written

        async def written_all() -> None:
            if written is not None:
                await asyncio.wrap_future(written)

        await self._step(RECORD_ACTIVITY, written_all)

    async def _step(self, name: str, run: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
        # Not part of the history's identity of the step (its name and number are), so a
        # random token is fine here: it only finds `run` in this process.
        token = uuid.uuid4().hex
        _EFFECTS[token] = run
        try:
            with _cancellation():
                done = await workflow.execute_local_activity(
                    name,
                    token,
                    result_type=bytes,
                    start_to_close_timeout=timedelta(seconds=self._timeouts.step_s),
                    # Model calls retry in their provider; tool calls are not retried in process.
                    retry_policy=RetryPolicy(maximum_attempts=1),
                )
        finally:
            _EFFECTS.pop(token, None)
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


def _worker(job: _Job) -> tuple[AgentCore, asyncio.AbstractEventLoop]:
    # The job's queue, not workflow.info()'s: a Replayer runs the workflow on a queue of its own.
    queue = job.task_queue
    worker = _AGENTS.get(queue)
    if worker is None:  # pragma: no cover - only a worker polls the queue
        raise ApplicationError(f"no pes-agent worker for the task queue {queue!r} here")
    return worker


async def _concluded(effects: _Effects, run: Coroutine[Any, Any, AgentFinalResponse]) -> bytes:
    """The run's response, or the pes-agent error it raised, pickled for the caller; the
    run's last observations written. A cancelled run ends CANCELED."""
    try:
        outcome: AgentFinalResponse | _Failed = await run
    except PESAgentError as error:  # what process() raises (a thread waiting for approval)
        outcome = _Failed(error)
    except asyncio.CancelledError:
        await effects.flush()  # the cancellation's own ERROR observation
        raise
    await effects.flush()
    return _pickled(outcome)


@dataclass(slots=True, frozen=True)
class _Job:
    """A turn as the thread's workflow gets it: which workflow, its input (JSON), its id."""

    workflow: str
    body: str
    run_id: str
    task_queue: str
    step_s: float
    task_s: float
    heartbeat_s: float


@workflow.defn(name=RUN_WORKFLOW, sandboxed=False)
class _RunWorkflow:
    """One run, on a worker: `process()` with its side effects as local activities."""

    @workflow.run
    async def run(self, job: _Job) -> bytes:
        props = AgentProps.model_validate_json(job.body)
        assert props.trace_id is not None  # set by the submitting process
        agent, loop = _worker(job)
        effects = _Effects(_Timeouts(job.step_s, job.task_s, job.heartbeat_s), loop)
        return await _concluded(effects, agent._process_on_engine(props, props.trace_id, effects))


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
        agent, loop = _worker(job)
        effects = _Effects(_Timeouts(job.step_s, job.task_s, job.heartbeat_s), loop)
        return await _concluded(
            effects,
            agent._resume_on_engine(asked.thread_id, asked.trace_id, asked.decisions, effects),
        )


@workflow.defn(name=THREAD_WORKFLOW, sandboxed=False)
class _ThreadWorkflow:
    """A thread's turns, one at a time: each update runs one as a child workflow, in the
    order they arrived. Ends after `idle_s` without a turn (the next turn starts it again)."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()  # FIFO, on the workflow's deterministic loop
        self._arrived = 0
        self._seen = 0
        self._running: dict[str, workflow.ChildWorkflowHandle[Any, bytes]] = {}
        self._dropped: set[str] = set()

    @workflow.run
    async def run(self, idle_s: float) -> None:
        while True:
            self._seen = self._arrived
            try:
                await workflow.wait_condition(self._new_turn, timeout=idle_s)
            except TimeoutError:
                if not self._lock.locked() and workflow.all_handlers_finished():
                    return
            if workflow.info().is_continue_as_new_suggested() and workflow.all_handlers_finished():
                workflow.continue_as_new(idle_s)

    def _new_turn(self) -> bool:
        return self._arrived != self._seen

    @workflow.update(name=THREAD_TURN)
    async def turn(self, job: _Job) -> bytes:
        self._arrived += 1
        async with self._lock:
            if job.run_id in self._dropped:
                raise ApplicationError("the run was cancelled before it started", type="Cancelled")
            child = await workflow.start_child_workflow(
                job.workflow,
                job,
                id=job.run_id,
                result_type=bytes,
                task_timeout=timedelta(seconds=job.task_s),
                # Where `TemporalEngine.find` reads the run's thread.
                memo={"thread_id": workflow.info().workflow_id.partition("/thread/")[2]},
            )
            self._running[job.run_id] = child
            try:
                outcome: bytes = await child
                return outcome
            finally:
                del self._running[job.run_id]

    @workflow.signal(name="cancel")
    def cancel(self, run_id: str) -> None:
        """Cancel the run `run_id`: its workflow if it runs, else its turn before it starts."""
        child = self._running.get(run_id)
        if child is not None:
            child.cancel()
        else:
            self._dropped.add(run_id)


_WORKFLOWS = (_ThreadWorkflow, _RunWorkflow, _ResumeWorkflow)


class _CancelledElsewhere(Exception):
    """The run's workflow was cancelled by another caller (`TemporalEngine.cancel`)."""


def _was_cancelled(error: BaseException) -> bool:
    """Whether a failed turn failed because its run's workflow was cancelled."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, TemporalCancelledError):
            return True
        seen = getattr(seen, "cause", None) or seen.__cause__
    return False


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
        thread_idle_s: float = 60.0,
    ) -> None:
        """Configure the engine.

        Args:
            address: The Temporal frontend, ``HOST:PORT``.
            task_queue: Where runs are sent and workers poll; workflow ids include it, so
                agents on separate queues never share a thread's turns.
            namespace: The Temporal namespace.
            task_timeout_s: A workflow task's timeout: how long a dead worker holds its runs
                before another worker takes them over.
            step_timeout_s: The longest a step (a model or tool call) may run.
            heartbeat_timeout_s: A tool call's worker heartbeats three times in this: when it
                stops, the call is tried again on another worker.
            thread_idle_s: How long a thread's workflow waits for another turn before ending.

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
            ("thread_idle_s", thread_idle_s),
        ):
            if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0:
                raise UsageError(f"{label} must be a number of seconds > 0, got {seconds!r}")
        self.address = address
        self.task_queue = task_queue
        self.namespace = namespace
        self.task_timeout_s = float(task_timeout_s)
        self.step_timeout_s = float(step_timeout_s)
        self.heartbeat_timeout_s = float(heartbeat_timeout_s)
        self.thread_idle_s = float(thread_idle_s)
        self._client: Client | None = None

    def __repr__(self) -> str:
        return f"TemporalEngine({self.address!r}, task_queue={self.task_queue!r})"

    def _id(self, kind: str, key: str) -> str:
        return f"pes-agent/{self.task_queue}/{kind}/{key}"

    # submitting ---------------------------------------------------------------------------
    async def run(self, agent: AgentCore, props: AgentProps) -> AgentFinalResponse:
        """Submit the run `props` (its `trace_id` set) and await its response.

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
        run_id = self._id("run", props.trace_id)
        try:
            return await self._turn(props.thread_id, RUN_WORKFLOW, props.model_dump_json(), run_id)
        except _CancelledElsewhere:
            return cancelled_elsewhere(props.thread_id, props.trace_id, props.user_id)

    async def resume(
        self, agent: AgentCore, thread_id: str, trace_id: str, decisions: dict[str, Decision]
    ) -> AgentFinalResponse:
        """Submit the resumption of the paused run `trace_id` and await its response.

        Raises:
            NotAwaitingApprovalError: No such run waits (resumed or cancelled already).
            UsageError: The decisions do not fit the pending calls (checked on the worker).
        """
        body = _Resumption(thread_id=thread_id, trace_id=trace_id, decisions=decisions)
        # A run may pause again and be resumed again: each resumption is a workflow of its own.
        run_id = self._id("resume", f"{trace_id}/{uuid.uuid4().hex[:12]}")
        return await self._turn(thread_id, RESUME_WORKFLOW, body.model_dump_json(), run_id)

    async def _turn(
        self, thread_id: str, workflow_type: str, body: str, run_id: str
    ) -> AgentFinalResponse:
        """Send the turn to its thread's workflow (starting it if need be) and await the
        outcome; a cancelled caller cancels the run."""
        client = await self._submitter()
        thread = self._id("thread", thread_id)
        job = _Job(
            workflow_type,
            body,
            run_id,
            self.task_queue,
            self.step_timeout_s,
            self.task_timeout_s,
            self.heartbeat_timeout_s,
        )
        start = WithStartWorkflowOperation(
            _ThreadWorkflow.run,
            self.thread_idle_s,
            id=thread,
            task_queue=self.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            task_timeout=timedelta(seconds=self.task_timeout_s),
        )
        try:
            outcome = pickle.loads(
                await client.execute_update_with_start_workflow(
                    THREAD_TURN, job, start_workflow_operation=start, result_type=bytes
                )
            )
        except (asyncio.CancelledError, WorkflowUpdateRPCTimeoutOrCancelledError):
            task = asyncio.current_task()
            if task is None or not task.cancelling():
                raise  # the wait timed out, the caller did not give up
            # The caller gave up: the run stops wherever it runs, as it would in process.
            await asyncio.shield(client.get_workflow_handle(thread).signal("cancel", run_id))
            raise asyncio.CancelledError from None
        except WorkflowUpdateFailedError as error:
            if _was_cancelled(error):
                raise _CancelledElsewhere from None
            raise RunError(f"the run {run_id} did not finish: {error.cause or error}") from error
        if isinstance(outcome, _Failed):
            raise outcome.error
        assert isinstance(outcome, AgentFinalResponse)
        return outcome

    # any process ---------------------------------------------------------------------------
    async def find(self, trace_id: str) -> EngineRun | None:
        """The run `trace_id` as Temporal records it (its workflow, not a resumption).

        Args:
            trace_id: The run's trace id.

        Returns:
            The run (`EngineRun`), or None when it was never submitted to this engine.
        """
        client = await self._submitter()
        handle = client.get_workflow_handle(self._id("run", trace_id), result_type=bytes)
        try:
            described = await handle.describe()
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return None
            raise
        thread_id = str(await described.memo_value("thread_id", ""))
        status = described.status
        if status == WorkflowExecutionStatus.RUNNING:
            state = "running"
        elif status == WorkflowExecutionStatus.COMPLETED:
            outcome = pickle.loads(await handle.result())
            is_response = isinstance(outcome, AgentFinalResponse)
            state = outcome.metadata.status if is_response else "error"
        elif status == WorkflowExecutionStatus.CANCELED:
            state = "cancelled"
        else:
            state = "error"
        return EngineRun(trace_id=trace_id, thread_id=thread_id, status=state)

    async def cancel(self, trace_id: str) -> EngineRun | None:
        """Cancel the run `trace_id` from any process: its workflow and its running tool
        activities (they heartbeat, so they hear of it); its caller gets `cancelled`.

        Args:
            trace_id: The run's trace id.

        Returns:
            The run as found before cancelling (one that had ended is left as it was), or
            None when it was never submitted to this engine.
        """
        found = await self.find(trace_id)
        if found is not None and found.running:
            client = await self._submitter()
            await client.get_workflow_handle(self._id("run", trace_id)).cancel()
        return found

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
            agent: The agent whose tools and providers the runs use.

        Yields:
            Nothing: leave the block to stop the worker.

        Raises:
            UsageError: This process already runs a worker on this task queue.
        """
        if self.task_queue in _AGENTS:
            raise UsageError(
                f"this process already runs a pes-agent worker on the task queue "
                f"{self.task_queue!r}; start another process for another worker"
            )
        await agent.tools.open_sources()
        client: Client | None = await self._connect()
        assert client is not None
        _AGENTS[self.task_queue] = (agent, asyncio.get_running_loop())
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
            _AGENTS.pop(self.task_queue, None)
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
        if self.task_queue in _AGENTS:
            raise UsageError(
                f"this process runs a pes-agent worker on the task queue {self.task_queue!r}"
            )
        _AGENTS[self.task_queue] = (agent, asyncio.get_running_loop())
        try:
            yield Replayer(workflows=list(_WORKFLOWS), workflow_runner=UnsandboxedWorkflowRunner())
        finally:
            _AGENTS.pop(self.task_queue, None)
