"""AgentCore: one `process()` call drives a run entity through the PES systems."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, Self, TypeVar

from ecs_core import EntityId, TerminalComponent, World
from pes_agent._closing import AsyncCloseable, ClosedOnExit, close_all
from pes_agent.approvals.gate import (
    ApprovalGate,
    ApprovalHandler,
    ApprovalPredicate,
    ask_always,
    decided_content,
)
from pes_agent.approvals.models import ApprovalContext, Approve, Decision, Deny, PausedRun
from pes_agent.config import LLMParams, ProviderConfig, Reevaluate, StateSaving
from pes_agent.errors import (
    NotAwaitingApprovalError,
    RunError,
    ThreadAwaitingApprovalError,
    UsageError,
)
from pes_agent.observing.logs import get_logger
from pes_agent.observing.streams import StreamSocket
from pes_agent.observing.types import ObservationType
from pes_agent.pes.components import (
    Executed,
    Finalized,
    Paused,
    Planned,
    Resumed,
    Retrieved,
    RunFailed,
    RunSpec,
    RunTimings,
)
from pes_agent.pes.finalization import ErrorHandlingSystem, FinalizationSystem, run_status
from pes_agent.pes.llm_call import RunModelCaller
from pes_agent.pes.pausing import PauseSystem
from pes_agent.pes.planning import PlanningSystem
from pes_agent.pes.recorder import RunRecorder
from pes_agent.pes.resources import ResourceTable, RunResources
from pes_agent.pes.retrieval import RetrievalSystem
from pes_agent.pes.synthesis import SynthesisSystem
from pes_agent.pes.tool_execution import ToolSystem
from pes_agent.protocols import Executor, ObservationRecorder, Planner, Synthesizer
from pes_agent.providers.base import LLMProvider
from pes_agent.retrieval.retriever import Retriever
from pes_agent.run import AgentFinalResponse, AgentProps, ExecutionMetadata, RunStatus
from pes_agent.storage.base import Storage
from pes_agent.threads._running import enclosing_run, running
from pes_agent.threads.conversation import ConversationManager
from pes_agent.threads.ids import check_thread_id
from pes_agent.threads.messages import ConversationMessage, MessageRole
from pes_agent.threads.state import StateManager, ThreadContext
from pes_agent.tools.registry import ToolRegistry
from pes_agent.usage import Usage

__all__ = ["AgentCore", "ProviderSource"]

_log = get_logger("pes_agent.agent")

# Each phase needs one tick at most; a run still open after this many is a bug we report.
_MAX_TICKS = 8
# Finished runs hand their world back for reuse, so its cached queries are built only once.
_SPARE_WORLDS = 64
_CANCELLED_BY_CLOSE = "the run was cancelled: the agent was closed (aclose timeout) while it ran"


class ProviderSource(Protocol):
    """Hands out provider clients by configuration, creating each once."""

    def get(self, spec: ProviderConfig) -> LLMProvider: ...


@dataclass(slots=True, eq=False)
class _InFlight:
    """A `process()` call under way, which `aclose()` waits for and may cancel."""

    task: asyncio.Task[Any]
    thread_id: str
    trace_id: str
    result: AgentFinalResponse | None = None
    cancelled_by_close: bool = False

    def cancel_for_close(self) -> None:
        if not self.cancelled_by_close:
            self.cancelled_by_close = True
            self.task.cancel()

    def take_close_cancel(self) -> bool:
        """Whether the cancellation being handled is aclose()'s alone, consuming it if so.

        Then the run ends as `cancelled` instead of raising: its caller did not cancel it.
        """
        if not self.cancelled_by_close:
            return False
        self.cancelled_by_close = False
        return self.task.uncancel() == 0


class AgentCore(ClosedOnExit):
    """A plan-execute-synthesize agent. Build one with `create_agent(...)`.

    `process()` is safe to call concurrently: runs on different threads proceed in parallel,
    runs on the same thread are serialised so their turns never interleave.
    """

    def __init__(
        self,
        *,
        provider: LLMProvider,
        providers: ProviderSource,
        tools: ToolRegistry,
        storage: Storage,
        observations: ObservationRecorder,
        planner: Planner,
        executor: Executor,
        synthesizer: Synthesizer,
        system_prompt: str,
        history_limit: int,
        state_saving: StateSaving,
        max_concurrency: int,
        tool_timeout_s: float,
        max_tool_calls: int,
        llm_params: LLMParams,
        owned: Sequence[AsyncCloseable] = (),
        reevaluate: Reevaluate = "never",
        max_revisions: int = 2,
        retriever: Retriever | None = None,
        require_approval: frozenset[str] = frozenset(),
        approval_predicate: ApprovalPredicate | None = None,
        approval_handler: ApprovalHandler | None = None,
        approval_timeout_s: float | None = None,
    ) -> None:
        self.tools = tools
        self.state = StateManager(storage, observations=observations)
        self.conversation = ConversationManager(storage)
        self.observations = observations
        self.stream = StreamSocket()
        self._provider = provider
        self._providers = providers
        self._storage = storage
        # What aclose() closes: only what create_agent built; objects passed in stay open.
        self._owned = tuple(owned)
        self._system_prompt = system_prompt
        self._history_limit = history_limit
        self._state_saving = state_saving
        self._max_concurrency = max_concurrency
        self._tool_timeout_s = tool_timeout_s
        self._max_tool_calls = max_tool_calls
        self._reevaluate: Reevaluate = reevaluate
        self._max_revisions = max_revisions
        self._llm_params = llm_params
        self._require_approval = require_approval
        self._approval_predicate = approval_predicate
        self._approval_handler = approval_handler
        # The live services of each run; the systems find them by run entity.
        self._resources = ResourceTable()
        resources = self._resources
        self._systems: list[tuple[Any, int]] = [
            *([(RetrievalSystem(resources, retriever), -10)] if retriever is not None else []),
            (PlanningSystem(resources, planner), 0),
            (ToolSystem(resources, executor, tools.as_mapping()), 5),
            (SynthesisSystem(resources, synthesizer), 10),
            (FinalizationSystem(resources, storage, state_saving), 20),
            (PauseSystem(resources, storage, approval_timeout_s), 15),
            (ErrorHandlingSystem(resources), 99),
        ]
        self._spare_worlds: list[World] = []
        self._closed = False
        self._runs: set[_InFlight] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._released = asyncio.Event()

    @property
    def storage(self) -> Storage:
        """The store holding this agent's threads, for records kept beside them (the HTTP
        server keeps its owner records and worker directory there). Use `state`,
        `conversation` and `observations` for the threads themselves."""
        return self._storage

    # A timeout parameter rather than asyncio.timeout(): past it the runs are cancelled but
    # the close still completes, and the caller gets no TimeoutError for a close that worked.
    async def aclose(self, *, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Let the runs under way finish, then close the provider clients and storage.

        From the moment `aclose()` starts, `process()` raises a `UsageError`. The runs under
        way go on and save their turns. With `timeout` (seconds), those still going after it
        are cancelled: each returns status `"cancelled"`, keeps its observations and saves no
        turn. Only what `create_agent` built is closed: a provider or storage object given to
        it stays open for its owner.
        """
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0
        ):
            raise UsageError(f"timeout must be a number of seconds >= 0, got {timeout!r}")
        if any(_inside(run) for run in self._runs):
            raise UsageError(
                "aclose() was called from inside a run of this agent (a tool or a subscriber?); "
                "it waits for the runs under way, so it would wait forever: close the agent "
                "after process() returns"
            )
        if self._closed:
            await self._released.wait()
            return
        self._closed = True
        try:
            if self._runs:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._idle.wait(), timeout)
        finally:
            # Past the timeout (or when aclose() itself is cancelled) what still runs is
            # cancelled, and the storage closes only once no run can write to it any more.
            for run in self._runs:
                run.cancel_for_close()
            await self._idle.wait()
            try:
                await close_all(self._owned)
            finally:
                self._released.set()

    async def __aenter__(self) -> Self:
        """Open the tool sources (MCP servers) now, so the first run does not wait for them.

        If one cannot be opened the agent is closed and the `ToolSourceError` raised.
        """
        try:
            await self.tools.open_sources()
        except BaseException:
            await self.aclose()
            raise
        return self

    def _take_world(self) -> World:
        if self._spare_worlds:
            return self._spare_worlds.pop()
        world = World()
        for system, priority in self._systems:
            world.register_system(system, priority)
        return world

    def _give_back_world(self, world: World) -> None:
        if len(self._spare_worlds) < _SPARE_WORLDS and not world.entities():
            self._spare_worlds.append(world)

    async def process(self, props: AgentProps) -> AgentFinalResponse:
        """Plan, execute and synthesize an answer to `props.query` on `props.thread_id`.

        Runtime failures (provider down, unusable plan, storage error) come back as a response
        with `metadata.status == "error"` (when only saving the turn failed, with the answer as
        its content); tool failures as `"partial"`; a run `aclose(timeout=...)` stopped as
        `"cancelled"`. Only invalid arguments raise (`UsageError`), and a caller cancelling
        its own task gets `CancelledError`.
        """
        if not isinstance(props, AgentProps):
            raise UsageError(
                f"process() takes AgentProps, got {type(props).__name__}; "
                'call agent.process(AgentProps("your question", "thread-1"))'
            )
        check_thread_id(props.thread_id)  # props validated from data skipped AgentProps' check
        if self._closed:
            raise UsageError("this agent was closed with aclose(); create a new one")
        if enclosing_run(props.thread_id) is not None:
            raise UsageError(
                f"process() was called for thread {props.thread_id!r} from inside a run on "
                "that same thread (a tool or a subscriber?); runs on one thread take turns, so "
                "it would wait forever: use another thread_id for the inner run"
            )
        task = asyncio.current_task()
        if task is None:
            raise UsageError("process() must be awaited inside an asyncio task")
        trace_id = props.trace_id or uuid.uuid4().hex
        started = time.perf_counter()
        # Registered before the first await, so an aclose() starting now waits for this run.
        run = _InFlight(task, props.thread_id, trace_id)
        self._runs.add(run)
        self._idle.clear()
        try:
            return await self._locked_run(props, trace_id, started, run)
        except asyncio.CancelledError:
            if not run.take_close_cancel():
                raise
            # aclose() cancelled the run before it began (waiting for its thread or loading
            # it), or after it ended (releasing the thread): report what it came to.
            if run.result is not None:
                return run.result
            return await self._ended_early(
                props, trace_id, started, "cancelled", _CANCELLED_BY_CLOSE, status="cancelled"
            )
        finally:
            self._runs.discard(run)
            if not self._runs:
                self._idle.set()

    async def _locked_run(
        self, props: AgentProps, trace_id: str, started: float, run: _InFlight
    ) -> AgentFinalResponse:
        async with contextlib.AsyncExitStack() as stack:
            try:
                await stack.enter_async_context(self._storage.lock_thread(props.thread_id))
            except RunError as error:
                # The store is unreachable: a runtime failure like any other, not a raise.
                return await self._load_failure(props, trace_id, started, error.message)
            try:
                waiting = await self._storage.get_paused_runs(props.thread_id)
            except RunError as error:
                return await self._load_failure(props, trace_id, started, error.message)
            if waiting:
                raise ThreadAwaitingApprovalError(
                    f"thread {props.thread_id!r} has a run waiting for approval (trace id "
                    f"{waiting[0].trace_id!r}); a thread runs one turn at a time: finish it "
                    f"with await agent.resume({props.thread_id!r}, {waiting[0].trace_id!r}, "
                    "{call_id: Approve() or Deny(reason)}) or drop it with "
                    f"await agent.cancel_pending({props.thread_id!r})",
                    thread_id=props.thread_id,
                    trace_id=waiting[0].trace_id,
                )
            with running(props.thread_id, trace_id):
                run.result = await self._run(props, trace_id, started, run)
                return run.result
        raise AssertionError("unreachable: the block above always returns")

    async def _run(
        self,
        props: AgentProps,
        trace_id: str,
        started: float,
        run: _InFlight,
        paused: PausedRun | None = None,
        decisions: dict[str, Decision] | None = None,
    ) -> AgentFinalResponse:
        thread_id = props.thread_id
        log = _log.bind(thread_id=thread_id, trace_id=trace_id)
        options = props.options
        try:
            # Before anything is planned: the planner must see the sources' tool schemas.
            await self.tools.open_sources()
        except RunError as error:
            return await self._ended_early(
                props, trace_id, started, "tools", error.message, status="error"
            )
        try:
            context = await self.state.load_context(thread_id)
            limit = _first(
                options.history_limit if options else None,
                context.config.history_limit,
                self._history_limit,
            )
            history = await self._storage.get_messages(thread_id, limit=limit) if limit else []
            provider = self._provider_for(props, context)
        except RunError as error:
            return await self._load_failure(props, trace_id, started, error.message)
        except UsageError as error:
            # A thread's saved configuration is data, not code: report it as a failed run.
            return await self._load_failure(props, trace_id, started, str(error))
        load_ms = (time.perf_counter() - started) * 1000

        enabled = self._enabled_tools(context, options.enabled_tools if options else None)
        recorder = RunRecorder(self.observations, thread_id, trace_id)
        llm = RunModelCaller(
            provider=provider,
            recorder=recorder,
            stream=self.stream,
            params=(options.llm_params if options and options.llm_params else None)
            or self._llm_params,
        )
        timings = RunTimings()
        timings.phases.load_ms = load_ms
        spec = RunSpec(
            props=props,
            trace_id=trace_id,
            thread=context,
            history=history,
            system_prompt=_first(
                options.system_prompt if options else None,
                context.config.system_prompt,
                self._system_prompt,
            ),
            tool_schemas=self.tools.schemas(sorted(enabled)),
            enabled_tools=enabled,
            llm_params=llm.params,
            max_tool_calls=_first(
                options.max_tool_calls if options else None, self._max_tool_calls
            ),
            tool_timeout_s=_first(
                options.tool_timeout_s if options else None, self._tool_timeout_s
            ),
            max_concurrency=self._max_concurrency,
            state_snapshot=context.state.model_copy(deep=True).data,
            reevaluate=_first(options.reevaluate if options else None, self._reevaluate),
            max_revisions=_first(options.max_revisions if options else None, self._max_revisions),
        )
        gate = self._gate(props, trace_id, context, recorder, paused, decisions)
        world = self._take_world()
        entity = world.create_entity(spec, timings)
        if paused is not None:
            # The plan was made before the pause: execution continues where it stopped.
            world.add_component(entity, Planned(output=paused.planning))
            world.add_component(entity, Resumed(calls=list(paused.calls)))
        self._resources.attach(
            world, entity, RunResources(llm=llm, recorder=recorder, approvals=gate)
        )
        cancelled_by_close = False
        try:
            await self._tick_until_done(world, entity)
        except asyncio.CancelledError:
            cancelled_by_close = run.take_close_cancel()
            log.info("run_cancelled", by_aclose=cancelled_by_close)
            await asyncio.shield(
                recorder.record(
                    ObservationType.ERROR,
                    "Run cancelled",
                    {
                        "phase": "cancelled",
                        "error": _CANCELLED_BY_CLOSE
                        if cancelled_by_close
                        else "the run was cancelled",
                    },
                )
            )
            if not cancelled_by_close:
                raise
        finally:
            components = dict(world.components_of(entity))
            self._resources.detach(world, entity)
            world.delete_entity(entity)
            self._give_back_world(world)

        failed: RunFailed | None = components.get(RunFailed)
        executed: Executed | None = components.get(Executed)
        stopped: Paused | None = components.get(Paused)
        results = executed.results if executed is not None else []
        status: RunStatus
        problem: str | None = None
        if stopped is not None and failed is None and not cancelled_by_close:
            status = "awaiting_approval"
            results = list(stopped.results.values())
            response = _awaiting_message(thread_id, trace_id, stopped)
        elif cancelled_by_close:
            status, problem = "cancelled", _CANCELLED_BY_CLOSE
            response = _error_message(thread_id, trace_id, problem, status)
        elif failed is not None:
            status, problem = "error", failed.message
            # Saving the turn failed after the answer was written: the caller still gets it.
            unsaved: Finalized | None = components.get(Finalized)
            response = (
                unsaved.message
                if unsaved is not None
                else _error_message(thread_id, trace_id, problem, status)
            )
        else:
            finalized: Finalized | None = components.get(Finalized)
            if finalized is None:  # the phase systems always leave one; not left to assert
                raise RuntimeError("a run that did not fail ended without a Finalized result")
            response = finalized.message
            status = run_status(results, components.get(Retrieved))
        metadata = ExecutionMetadata(
            thread_id=thread_id,
            trace_id=trace_id,
            user_id=props.user_id,
            status=status,
            total_duration_ms=(time.perf_counter() - started) * 1000,
            llm_calls=llm.calls,
            tool_calls=len(results),
            error=problem,
            usage=llm.usage,
            phases=timings.phases,
            pending_approvals=stopped.pending if status == "awaiting_approval" and stopped else [],
        )
        log.info(
            "run_finished",
            status=status,
            llm_calls=metadata.llm_calls,
            tool_calls=metadata.tool_calls,
            duration_ms=round(metadata.total_duration_ms, 2),
        )
        return AgentFinalResponse(response=response, metadata=metadata)

    def _gate(
        self,
        props: AgentProps,
        trace_id: str,
        context: ThreadContext,
        recorder: RunRecorder,
        paused: PausedRun | None,
        decisions: dict[str, Decision] | None,
    ) -> ApprovalGate | None:
        """The run's approval gate: the agent's, the thread's and the call's rules added up;
        None when no call can need approval (then any executor will do)."""
        options = props.options
        names = self._require_approval.union(
            context.config.require_approval or (),
            (options.require_approval if options else None) or (),
            paused.require_approval if paused is not None else (),
        )
        flagged = any(getattr(t, "requires_approval", False) is True for t in self.tools)
        if not (names or flagged or self._approval_predicate or paused is not None):
            return None
        predicate = self._approval_predicate
        if predicate is None and paused is not None and paused.approval_predicate:
            # The pausing agent's predicate is not here to ask: a person decides instead.
            predicate = ask_always
        return ApprovalGate(
            tools=self.tools.as_mapping(),
            names=names,
            predicate=predicate,
            context=ApprovalContext(
                thread_id=props.thread_id,
                trace_id=trace_id,
                user_id=props.user_id,
                session_id=props.session_id,
            ),
            handler=self._approval_handler,
            record=recorder.record,
            decisions=decisions,
            prior=paused.results if paused is not None else None,
            replaced=paused.replaced_steps if paused is not None else (),
        )

    async def pending_runs(self, thread_id: str | None = None) -> list[PausedRun]:
        """The runs waiting for approval on `thread_id` (on every thread when None), each with
        its `pending` calls, `deadline` and `props`; read from the storage, so runs paused by
        other processes sharing it are listed too."""
        if thread_id is not None:
            check_thread_id(thread_id)
        if self._closed:
            raise UsageError("this agent was closed with aclose(); create a new one")
        return await self._storage.get_paused_runs(thread_id)

    async def resume(
        self, thread_id: str, trace_id: str, decisions: Mapping[str, Decision]
    ) -> AgentFinalResponse:
        """Finish a run that paused for approval: `decisions` maps each pending call id to
        `Approve()` or `Deny(reason)`.

        Works in any process sharing the storage, keeps the trace id, runs the approved calls
        (then what depends on them), turns denied ones into error results naming the reason
        (their dependents are skipped), synthesizes and saves the turn (user and AI message).
        After the run's `approval_timeout_s` deadline every pending call counts as denied
        ("approval expired"). The run is claimed atomically before anything runs: of two
        resumes racing, one raises `NotAwaitingApprovalError`. The resumed run may pause
        again only when a `require_approval` predicate gates a call once its arguments are
        resolved; its plan is not re-evaluated. Raises `UsageError` for decisions missing for
        some pending calls or naming unknown call ids.

        The decisions are law whatever this agent's rules: a denied call never runs, and the
        rules stored with the paused run are added to this agent's (`PausedRun`).
        """
        check_thread_id(thread_id)
        if not isinstance(decisions, Mapping) or not all(
            isinstance(key, str) and isinstance(value, Approve | Deny)
            for key, value in decisions.items()
        ):
            raise UsageError(
                "decisions must map call ids to Approve() or Deny(reason), e.g. "
                '{"call_1": Approve(), "call_2": Deny("too expensive")}'
            )
        if self._closed:
            raise UsageError("this agent was closed with aclose(); create a new one")
        if enclosing_run(thread_id) is not None:
            raise UsageError(
                f"resume() was called for thread {thread_id!r} from inside a run on that "
                "thread; resume it after that run returns"
            )
        task = asyncio.current_task()
        if task is None:
            raise UsageError("resume() must be awaited inside an asyncio task")
        started = time.perf_counter()
        run = _InFlight(task, thread_id, trace_id)
        self._runs.add(run)
        self._idle.clear()
        try:
            async with self._storage.lock_thread(thread_id):
                claimed, given = await self._claim(thread_id, trace_id, dict(decisions))
                recorder = RunRecorder(self.observations, thread_id, trace_id)
                for pending in claimed.pending:
                    decision = given[pending.call_id]
                    await recorder.record(
                        ObservationType.APPROVAL_DECIDED,
                        f"Approval {'granted' if isinstance(decision, Approve) else 'denied'}: "
                        f"{pending.tool_name}",
                        decided_content(pending.call_id, pending.tool_name, decision),
                    )
                with running(thread_id, trace_id):
                    run.result = await self._run(
                        claimed.props,
                        trace_id,
                        started,
                        run,
                        paused=claimed,
                        decisions={**claimed.decisions, **given},
                    )
                    return run.result
        finally:
            self._runs.discard(run)
            if not self._runs:
                self._idle.set()

    async def _claim(
        self, thread_id: str, trace_id: str, decisions: dict[str, Decision]
    ) -> tuple[PausedRun, dict[str, Decision]]:
        """Check `decisions` against the paused run, then take it out of the store; the run
        and the decision for each of its pending calls."""
        found = next(
            (r for r in await self._storage.get_paused_runs(thread_id) if r.trace_id == trace_id),
            None,
        )
        if found is None:
            raise _not_waiting(thread_id, trace_id)
        pending = [p.call_id for p in found.pending]
        unknown = sorted(set(decisions) - set(pending))
        if unknown:
            raise UsageError(
                f"decisions name call ids that do not wait for approval in this run: "
                f"{', '.join(unknown)}; the pending ones are {', '.join(pending)}"
            )
        expired = found.expired()
        missing = [call_id for call_id in pending if call_id not in decisions]
        if missing and not expired:
            raise UsageError(
                f"decide every pending call: no decision for {', '.join(missing)} "
                "(give each Approve() or Deny(reason))"
            )
        # Atomic delete-and-return: a resume racing this one (any process) finds nothing.
        claimed = await self._storage.claim_paused_run(thread_id, trace_id)
        if claimed is None:
            raise _not_waiting(thread_id, trace_id)
        if expired:
            decisions = {call_id: Deny("approval expired") for call_id in pending}
        return claimed, decisions

    async def cancel_pending(self, thread_id: str) -> list[PausedRun]:
        """End the runs of `thread_id` waiting for approval as cancelled: none of their
        pending calls runs, an ERROR observation (phase "cancelled") is recorded, no turn is
        saved. Returns the runs cancelled (none: nothing was waiting)."""
        check_thread_id(thread_id)
        if self._closed:
            raise UsageError("this agent was closed with aclose(); create a new one")
        cancelled: list[PausedRun] = []
        async with self._storage.lock_thread(thread_id):
            for waiting in await self._storage.get_paused_runs(thread_id):
                claimed = await self._storage.claim_paused_run(thread_id, waiting.trace_id)
                if claimed is None:
                    continue  # another process resumed or cancelled it meanwhile
                await RunRecorder(self.observations, thread_id, claimed.trace_id).record(
                    ObservationType.ERROR,
                    "Run cancelled",
                    {
                        "phase": "cancelled",
                        "error": "the run was cancelled while it waited for approval",
                        "pending": [p.call_id for p in claimed.pending],
                    },
                )
                cancelled.append(claimed)
        return cancelled

    async def _tick_until_done(self, world: World, entity: EntityId) -> None:
        for _ in range(_MAX_TICKS):
            await world.process()
            if world.has_component(entity, TerminalComponent):
                return
        world.add_component(
            entity, RunFailed("finalization", f"the run did not finish in {_MAX_TICKS} ticks")
        )
        await world.process()

    def _provider_for(self, props: AgentProps, context: ThreadContext) -> LLMProvider:
        options = props.options
        config = (options.provider_config if options else None) or context.config.provider_config
        return self._providers.get(config) if config is not None else self._provider

    def _enabled_tools(
        self, context: ThreadContext, requested: Sequence[str] | None
    ) -> frozenset[str]:
        # The thread decides what may run; a per-call list can only narrow that down.
        allowed = context.config.enabled_tools
        enabled = frozenset(self.tools.names if allowed is None else allowed)
        if requested is not None:
            enabled = enabled & frozenset(requested)
        unknown = enabled.difference(self.tools.names)
        if unknown:
            # Most likely a typo in a ThreadConfig; the model is never shown these names.
            _log.warning(
                "enabled_tools_not_registered",
                tools=sorted(unknown),
                registered=list(self.tools.names),
            )
            enabled = enabled - unknown
        return enabled

    async def _load_failure(
        self, props: AgentProps, trace_id: str, started: float, message: str
    ) -> AgentFinalResponse:
        message = "loading the thread failed: " + message
        return await self._ended_early(props, trace_id, started, "load", message, status="error")

    async def _ended_early(
        self,
        props: AgentProps,
        trace_id: str,
        started: float,
        phase: str,
        message: str,
        *,
        status: RunStatus,
    ) -> AgentFinalResponse:
        """The response of a run that ended before its entity was spawned, with its ERROR."""
        title = "Run cancelled" if status == "cancelled" else f"{phase.capitalize()} failed"
        await RunRecorder(self.observations, props.thread_id, trace_id).record(
            ObservationType.ERROR, title, {"phase": phase, "error": message}
        )
        return AgentFinalResponse(
            response=_error_message(props.thread_id, trace_id, message, status),
            metadata=ExecutionMetadata(
                thread_id=props.thread_id,
                trace_id=trace_id,
                user_id=props.user_id,
                status=status,
                total_duration_ms=(time.perf_counter() - started) * 1000,
                error=message,
                usage=Usage(),
            ),
        )


T = TypeVar("T")


def _first(*values: T | None) -> T:
    for value in values:
        if value is not None:
            return value
    raise AssertionError("the last fallback is never None")


def _error_message(
    thread_id: str, trace_id: str, message: str, status: RunStatus
) -> ConversationMessage:
    return ConversationMessage(
        thread_id=thread_id,
        role=MessageRole.AI,
        content="I could not complete this request: " + message,
        metadata={"trace_id": trace_id, "status": status},
    )


def _not_waiting(thread_id: str, trace_id: str) -> NotAwaitingApprovalError:
    return NotAwaitingApprovalError(
        f"no run waits for approval on thread {thread_id!r} with trace id {trace_id!r}: it "
        "was resumed or cancelled already (perhaps by another process), or it never paused; "
        "see agent.pending_runs()",
        thread_id=thread_id,
        trace_id=trace_id,
    )


def _awaiting_message(thread_id: str, trace_id: str, paused: Paused) -> ConversationMessage:
    calls = ", ".join(f"{p.tool_name} ({p.call_id})" for p in paused.pending)
    return ConversationMessage(
        thread_id=thread_id,
        role=MessageRole.AI,
        content=f"Waiting for approval before running: {calls}.",
        metadata={"trace_id": trace_id, "status": "awaiting_approval"},
    )


def _inside(run: _InFlight) -> bool:
    """Whether the current task is part of `run` (the run itself, a tool or a subscriber)."""
    enclosing = enclosing_run(run.thread_id)
    return enclosing is not None and enclosing.trace_id == run.trace_id
