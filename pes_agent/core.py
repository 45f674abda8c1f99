"""AgentCore: one `process()` call drives a run entity through the PES systems.

A run goes `_prepare` (open the tool sources, load the thread, resolve its `RunSettings` once,
build its components and `RunResources`; or end early) -> `_run` drives it (`_spawn` the
entity, tick its world until a system ends the run, `_despawn` it) -> `_outcome` (the
response, from what the entity was left with). Each step's return type says where the run
goes next.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import logging
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    Sequence,
)
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, Self

from ecs_core import EntityId, EntityIdGenerator, EventBus, TerminalComponent, World
from pes_agent._closing import AsyncCloseable, ClosedOnExit, close_all
from pes_agent.approvals.gate import ApprovalGate, ask_always, decided_content
from pes_agent.approvals.models import ApprovalContext, Approve, Decision, Deny, PausedRun
from pes_agent.config import ProviderConfig
from pes_agent.durable.effects import DurableEngine, EffectInvoker, RunEffects
from pes_agent.errors import (
    NotAwaitingApprovalError,
    RunError,
    ThreadAwaitingApprovalError,
    UsageError,
)
from pes_agent.observing.logs import enabled_for, get_logger
from pes_agent.observing.manager import ObservationManager
from pes_agent.observing.relay import StreamPublisher, StreamRelay
from pes_agent.observing.streams import StreamSocket
from pes_agent.observing.types import ObservationType, new_id
from pes_agent.pes.budget import RunBudget
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
from pes_agent.pes.execution import Execution
from pes_agent.pes.finalization import FinalizationSystem, run_status
from pes_agent.pes.llm_call import RunModelCaller
from pes_agent.pes.pausing import PauseSystem
from pes_agent.pes.plan_phase import PlanPhaseSystem
from pes_agent.pes.recorder import RunRecorder
from pes_agent.pes.resources import ResourceTable, RunResources
from pes_agent.pes.retrieval import RetrievalSystem
from pes_agent.pes.run_error import RunErrorSystem
from pes_agent.pes.settings import AgentDefaults, RunSettings, resolve_history_limit
from pes_agent.pes.synthesis import SynthesisSystem
from pes_agent.pes.tool_system import ToolSystem
from pes_agent.protocols import Executor, ObservationRecorder, Planner, Synthesizer
from pes_agent.providers.base import LLMProvider
from pes_agent.providers.fallback import resolve_provider
from pes_agent.retrieval.retriever import Retriever
from pes_agent.run import (
    AgentFinalResponse,
    AgentProps,
    ExecutionMetadata,
    PhaseDurations,
    RunStatus,
)
from pes_agent.storage.base import Storage, StreamFeed, ThreadSnapshot, load_snapshot
from pes_agent.storage.factory import open_storage
from pes_agent.threads._running import EnclosingRun, enclosing_run
from pes_agent.threads.conversation import ConversationManager
from pes_agent.threads.ids import check_thread_id
from pes_agent.threads.messages import ConversationMessage, MessageRole
from pes_agent.threads.state import StateManager, ThreadContext
from pes_agent.tools.base import Tool, ToolResult, needs_approval
from pes_agent.tools.invoker import IN_PROCESS
from pes_agent.tools.registry import ToolRegistry
from pes_agent.tools.sources import ToolSource
from pes_agent.usage import Usage, UsageLimits

__all__ = ["AgentCore", "AgentOverride", "ProviderSource"]

_log = get_logger("pes_agent.agent")
_std_log = logging.getLogger("pes_agent.agent")  # asked whether to log (`enabled_for`)

# Each phase needs one tick at most; a run still open after this many is a bug we report.
_MAX_TICKS = 8
# Finished runs hand their world back for reuse, so its cached queries are built only once.
_SPARE_WORLDS = 64
# A resume waiting for its thread's lock looks this often whether another resume took the run.
_RESUME_POLL_S = 0.25
_CANCELLED_BY_CLOSE = "the run was cancelled: the agent was closed (aclose timeout) while it ran"


class ProviderSource(Protocol):
    """Hands out provider clients by configuration, creating each once."""

    def get(self, spec: ProviderConfig) -> LLMProvider: ...


class _InFlight(EnclosingRun):
    """A `process()` or `resume()` call under way, which `aclose()` waits for and may cancel.

    It is also the run's `EnclosingRun`, entered while the run goes (`_run`): the tasks the
    run starts (tools, subscribers) find it there, and one object does for both.
    """

    __slots__ = ("cancelled_by_close", "parts", "result", "task")

    def __init__(
        self, task: asyncio.Task[Any], thread_id: str, trace_id: str, parts: _Parts
    ) -> None:
        super().__init__(thread_id, trace_id)
        self.task = task
        #: The agent's parts the run uses (`AgentCore.override` may have swapped them).
        self.parts = parts
        self.result: AgentFinalResponse | None = None
        self.cancelled_by_close = False

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


class _Worlds:
    """The worlds runs tick in, each with the PES systems registered: a finished run hands
    its world back for the next, so the world's cached queries are built only once.

    The worlds share one event bus and one entity id generator: at 10,000 runs in flight each
    has a world of its own, and a bus and a counter each would be two more objects per run for
    the collector to walk. Sharing them is safe: no PES system publishes or subscribes on a
    world's bus (only the executor publishes a system's failure there, which a phase system
    never lets out, and nothing listens), and ids issued once across all the worlds are still
    unique within each.
    """

    __slots__ = ("_events", "_ids", "_spare", "_template")

    def __init__(self, systems: Sequence[tuple[Any, int]]) -> None:
        self._events = EventBus()
        self._ids = EntityIdGenerator()
        # Every world copies the template's systems: they share its registrations, so the
        # thousands of worlds of as many runs at once cost one dict each for their systems.
        self._template = World(events=self._events, ids=self._ids)
        for system, priority in systems:
            self._template.register_system(system, priority)
        self._spare: list[World] = []

    def take(self) -> World:
        """A world with no entity, for one run."""
        if self._spare:
            return self._spare.pop()
        world = World(events=self._events, ids=self._ids)
        world.copy_systems_from(self._template)
        return world

    def give_back(self, world: World) -> None:
        """Keep `world` for a later run, if it is empty and fewer than `_SPARE_WORLDS` are."""
        if len(self._spare) < _SPARE_WORLDS and not world.entities():
            self._spare.append(world)


# The steps' results are plain slotted dataclasses, never changed once built: each run builds
# them on its hot path, where a frozen dataclass's __init__ costs ~0.2 us more a field.


@dataclass(slots=True, frozen=True)
class _Parts:
    """What a run uses of its agent that `agent.override(...)` may swap for a block."""

    provider: LLMProvider
    #: Set by an override's provider: it answers every call, whatever provider the thread's
    #: or the call's configuration names.
    provider_pinned: bool
    tools: ToolRegistry
    storage: Storage
    state: StateManager
    conversation: ConversationManager
    observations: ObservationRecorder
    worlds: _Worlds


# Each agent's overrides in force in this context (`AgentCore.override`); None, the common
# case, costs a run one ContextVar.get.
_OVERRIDES: contextvars.ContextVar[Mapping[AgentCore, _Parts] | None] = contextvars.ContextVar(
    "pes_agent_overrides", default=None
)


@dataclass(slots=True)
class _Loaded:
    """The thread a run works on, loaded, and the run's settings resolved against it."""

    context: ThreadContext
    history: list[ConversationMessage]
    settings: RunSettings
    provider: LLMProvider


@dataclass(slots=True)
class _Prepared:
    """A run ready to spawn: its component (the spec, with its timings) and its resources."""

    spec: RunSpec
    resources: RunResources
    started: float
    paused: PausedRun | None


@dataclass(slots=True)
class _Ended:
    """What the run entity was left with when its systems were done with it."""

    failed: RunFailed | None
    executed: Executed | None
    paused: Paused | None
    finalized: Finalized | None
    retrieved: Retrieved | None
    #: `aclose()` alone cancelled the run: it ends `cancelled` rather than raising.
    cancelled_by_close: bool

    @classmethod
    def of(cls, components: Mapping[type[Any], Any], *, cancelled_by_close: bool) -> _Ended:
        return cls(
            failed=components.get(RunFailed),
            executed=components.get(Executed),
            paused=components.get(Paused),
            finalized=components.get(Finalized),
            retrieved=components.get(Retrieved),
            cancelled_by_close=cancelled_by_close,
        )


class _Conclusion(NamedTuple):
    """How a run ended: its status, its answer, the error it reports and its tool results."""

    status: RunStatus
    response: ConversationMessage
    error: str | None
    results: list[ToolResult]


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
        defaults: AgentDefaults,
        owned: Sequence[AsyncCloseable] = (),
        retriever: Retriever | None = None,
        engine: DurableEngine | None = None,
    ) -> None:
        """Assemble an agent from parts `create_agent(...)` has built and checked.

        Args:
            provider: The model client of runs whose thread or call names no other.
            providers: The clients a thread's or call's `provider_config` names.
            tools: The agent's tools and tool sources.
            storage: Where threads, turns, state and paused runs are kept.
            observations: Records what runs do and serves it to subscribers.
            planner: Plans each run's tool calls.
            executor: Runs the planned calls.
            synthesizer: Writes each run's answer.
            defaults: Every run's settings, before thread config and call options.
            owned: What `aclose()` closes (objects the caller passed in stay open).
            retriever: Searched for each query before planning, when given.
            engine: Where `process()` sends runs to be made durable (a workflow on a worker,
                `pes_agent.durable`); None runs them in this process.
        """
        self.stream = StreamSocket()
        self._providers = providers
        self._owned = tuple(owned)
        self._defaults = defaults
        self._engine = engine
        # Tokens across processes (`pes_agent.observing.relay`): the runs an engine's worker
        # executes with this agent publish theirs to the store's feed; an agent that submits
        # runs to an engine forwards the feed to its own subscribers while it has some.
        feed = storage if isinstance(storage, StreamFeed) else None
        self._stream_out = StreamPublisher(feed, self.stream.origin) if feed else None
        self._stream_in = StreamRelay(feed, self.stream) if feed and engine else None
        self._resources = ResourceTable()  # each run's services, found by its run entity
        systems = _phase_systems(
            self._resources, tools, storage, defaults, planner, executor, synthesizer, retriever
        )
        self._parts = _Parts(
            provider=provider,
            provider_pinned=False,
            tools=tools,
            storage=storage,
            state=StateManager(storage, observations=observations),
            conversation=ConversationManager(storage),
            observations=observations,
            worlds=_Worlds(systems),
        )
        # What `override()` rebuilds the PES systems from, with its tools or storage.
        self._phases = (planner, executor, synthesizer, retriever)
        self._closed = False
        self._runs: set[_InFlight] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._released = asyncio.Event()

    def override(
        self,
        *,
        provider: object = None,
        tools: Iterable[Tool | ToolSource | Callable[..., Any]] | None = None,
        storage: str | Storage | None = None,
    ) -> AgentOverride:
        """Swap the provider, tools or storage for the runs started inside a block only.

        ```python
        with agent.override(provider=ScriptedProvider(["inside"]), tools=[fake_search]):
            result = await agent.process(AgentProps("q", "t1"))  # scripted, fake_search
        ```

        Context-local (contextvars): runs started in the block, and the tasks they start,
        see the overrides; runs elsewhere at the same time keep the agent's own. Blocks nest,
        and leaving one (even by an exception) restores what was in force before it. An
        override's provider answers every call, whatever provider the thread's or the call's
        configuration names. `tools` replaces the agent's tools for the block. `storage`
        keeps the block's turns, state, paused runs and observations (recorded by a new
        `ObservationManager` on it). Use `async with` when the override builds something to
        close on exit (a provider from a spec or a list, a storage from a URL, tool sources).

        Args:
            provider: What `create_agent(provider=...)` takes; None keeps the agent's.
            tools: What `create_agent(tools=...)` takes; None keeps the agent's.
            storage: What `create_agent(storage=...)` takes; None keeps the agent's.

        Returns:
            The block (`AgentOverride`), for `with` or `async with`.

        Raises:
            UsageError: An argument is none of these, nothing is overridden, or the agent
                runs on a durable engine (its worker runs outside this context).
        """
        if self._engine is not None:
            raise UsageError(
                "override() swaps parts for runs in this context, but this agent's runs go to "
                "its durable engine's worker; override on an agent built without engine=..."
            )
        if provider is None and tools is None and storage is None:
            raise UsageError(
                "override() needs something to swap: "
                "agent.override(provider=..., tools=[...], storage=...)"
            )
        if isinstance(tools, str | bytes) or (
            tools is not None and not isinstance(tools, Iterable)
        ):
            raise UsageError("tools must be a list of tools, e.g. override(tools=[get_weather])")
        if storage is not None and not isinstance(storage, str | Storage):
            raise UsageError(
                "storage must be 'memory', 'sqlite:///PATH', 'postgresql://...' or a storage "
                f"object, e.g. override(storage='memory'); got {type(storage).__name__}"
            )
        return AgentOverride(self, provider, None if tools is None else list(tools), storage)

    def _now(self) -> _Parts:
        """The parts runs started here use: this agent's, or an `override()` block's."""
        overrides = _OVERRIDES.get()
        return self._parts if overrides is None else overrides.get(self, self._parts)

    @property
    def tools(self) -> ToolRegistry:
        """The agent's tools and tool sources (an `override(tools=...)` block's inside it)."""
        return self._now().tools

    @property
    def state(self) -> StateManager:
        """Reads and writes threads' state and configuration."""
        return self._now().state

    @property
    def conversation(self) -> ConversationManager:
        """Reads threads' turns."""
        return self._now().conversation

    @property
    def observations(self) -> ObservationRecorder:
        """Records what runs do and serves it to subscribers."""
        return self._now().observations

    @property
    def storage(self) -> Storage:
        """The store holding this agent's threads, for records kept beside them (the HTTP
        server keeps its owner records and worker directory there). Use `state`,
        `conversation` and `observations` for the threads themselves."""
        return self._now().storage

    @property
    def engine(self) -> DurableEngine | None:
        """The durable engine this agent's runs go to (`create_agent(engine=...)`); None
        when they run in process."""
        return self._engine

    # A timeout parameter rather than asyncio.timeout(): past it the runs are cancelled but
    # the close still completes, and the caller gets no TimeoutError for a close that worked.
    async def aclose(self, *, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Let the runs under way finish, then close the provider clients and storage.

        From the moment `aclose()` starts, `process()` raises a `UsageError`. The runs under
        way go on and save their turns. With `timeout` (seconds), those still going after it
        are cancelled: each returns status `"cancelled"`, keeps its observations and saves no
        turn. Only what `create_agent` built is closed: a provider or storage object given to
        it stays open for its owner.

        Args:
            timeout: Seconds to let the runs under way finish; None waits for them all.

        Raises:
            UsageError: `timeout` is not a number >= 0, or `aclose()` was called from inside
                a run of this agent (it would wait for itself forever).
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
                if self._stream_in is not None:
                    await self._stream_in.aclose()
                await close_all(self._owned)
            finally:
                self._released.set()

    async def __aenter__(self) -> Self:
        """Open the tool sources (MCP servers) now, so the first run does not wait for them.

        Raises:
            ToolSourceError: A tool source could not be opened; the agent is closed.
        """
        try:
            await self.tools.open_sources()
        except BaseException:
            await self.aclose()
            raise
        return self

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError("this agent was closed with aclose(); create a new one")

    def _in_flight(
        self,
        method: str,
        thread_id: str,
        trace_id: str,
        effects: RunEffects | None = None,
        *,
        parts: _Parts,
    ) -> _InFlight:
        """Count the calling task as a run under way until `_landed(run)`: `aclose()` waits
        for it, and past its timeout cancels it. Not a run whose engine runs it on a loop of
        its own (`RunEffects.runs_elsewhere`): the engine's worker hands that over when it
        stops. A pair of calls around a `try`, not a context manager: a `with` block would
        keep a generator, its manager and a bound `__exit__` alive for the whole run."""
        task = asyncio.current_task()
        if task is None:
            raise UsageError(f"{method}() must be awaited inside an asyncio task")
        run = _InFlight(task, thread_id, trace_id, parts)
        if effects is None or not effects.runs_elsewhere:
            # Registered before the first await, so an aclose() starting now waits for this run.
            self._runs.add(run)
            self._idle.clear()
        return run

    def _landed(self, run: _InFlight) -> None:
        """The run `_in_flight` counted is over (a run never counted leaves `_runs` as it was,
        and `_idle` set only if it was: set whenever no run is counted)."""
        self._runs.discard(run)
        if not self._runs:
            self._idle.set()

    async def process(self, props: AgentProps) -> AgentFinalResponse:
        """Plan, execute and synthesize an answer to `props.query` on `props.thread_id`.

        Runtime failures (provider down, unusable plan, storage error) come back as a response
        with `metadata.status == "error"` (when only saving the turn failed, with the answer as
        its content); tool failures as `"partial"`; a run `aclose(timeout=...)` stopped as
        `"cancelled"`. Only invalid arguments raise (`UsageError`), and a caller cancelling
        its own task gets `CancelledError`.

        Args:
            props: The question, the thread it continues and this call's options.

        Returns:
            The answer (`response`) and how the run went (`metadata`: status, usage, timings,
            the calls waiting for approval).

        Raises:
            UsageError: `props` is not an `AgentProps`, the agent was closed, or the call comes
                from inside a run on the same thread.
            ThreadAwaitingApprovalError: A run on the thread waits for approval; resume or
                cancel it first.
        """
        if not isinstance(props, AgentProps):
            raise UsageError(
                f"process() takes AgentProps, got {type(props).__name__}; "
                'call agent.process(AgentProps("your question", "thread-1"))'
            )
        check_thread_id(props.thread_id)  # props validated from data skipped AgentProps' check
        self._check_open()
        if enclosing_run(props.thread_id) is not None:
            raise UsageError(
                f"process() was called for thread {props.thread_id!r} from inside a run on "
                "that same thread (a tool or a subscriber?); runs on one thread take turns, so "
                "it would wait forever: use another thread_id for the inner run"
            )
        # 32 random hex digits, as `uuid.uuid4().hex`, at a tenth of its cost.
        trace_id = props.trace_id or new_id()
        if self._engine is not None:
            return await self._submit_to_engine(props, trace_id)
        started = time.perf_counter()
        run = self._in_flight("process", props.thread_id, trace_id, parts=self._now())
        try:
            return await self._run(props, trace_id, started, run, take=True)
        except asyncio.CancelledError:
            if not run.take_close_cancel():
                raise
            # aclose() cancelled the run before it began (waiting for its thread or
            # loading it), or after it ended (releasing the thread): report what it came to.
            if run.result is not None:
                return run.result
            return await self._ended_early(
                run.parts,
                props,
                trace_id,
                started,
                "cancelled",
                _CANCELLED_BY_CLOSE,
                status="cancelled",
            )
        finally:
            self._landed(run)

    async def _submit_to_engine(self, props: AgentProps, trace_id: str) -> AgentFinalResponse:
        """`process()` on a durable engine: a worker runs it (`_process_on_engine`), maybe in
        another process. A method of its own, so that `process` keeps no closure cells."""
        engine = self._engine
        assert engine is not None
        submitted = props.model_copy(update={"trace_id": trace_id})
        return await self._streamed_from_engine(lambda: engine.run(self, submitted))

    async def _streamed_from_engine(
        self, submit: Callable[[], Awaitable[AgentFinalResponse]]
    ) -> AgentFinalResponse:
        """The response of a run submitted to the engine by `submit()`; while this agent's
        stream has subscribers, they get the run's tokens from the store's feed, all of them
        before the response is returned."""
        relay = self._stream_in
        if relay is None or not self.stream.active:
            return await submit()
        await relay.ready()
        response = await submit()
        await relay.caught_up()
        return response

    async def _process_on_engine(
        self, props: AgentProps, trace_id: str, effects: RunEffects
    ) -> AgentFinalResponse:
        """`process()` as a durable engine's workflow runs it on a worker: the same run, its
        side effects steps of `effects` (an engine's, `pes_agent.durable`)."""
        started = time.perf_counter()
        parts = self._parts  # an engine's agent takes no override (see `override`)
        run = self._in_flight("process", props.thread_id, trace_id, effects, parts=parts)
        try:
            # An engine that takes the thread's turn itself (its workflow code may do no I/O)
            # needs no lock, and checks for a paused run in its load step (`_load`).
            take = not effects.serialises_turns
            return await self._run(props, trace_id, started, run, effects=effects, take=take)
        finally:
            self._landed(run)

    async def _take_thread(
        self,
        props: AgentProps,
        trace_id: str,
        started: float,
        run: _InFlight,
        effects: RunEffects | None,
    ) -> tuple[AbstractAsyncContextManager[None], ThreadSnapshot | None] | AgentFinalResponse:
        """Take the thread for a new turn: its lock, entered by hand (`_run` leaves it when
        the run is over), and, under it, the check that no run waits for approval on it,
        with the thread read in the same go (`snapshot`; on an engine the run reads it in a
        step). Or the response of a turn that failed to load, the lock left.

        By hand rather than `async with` around the run: that would keep a coroutine awaiting
        the run, and the lock's bound `__aexit__`, alive in every run for its whole length.

        Raises:
            ThreadAwaitingApprovalError: A run waits for approval on the thread.
        """
        thread_id = props.thread_id
        parts = run.parts
        lock = parts.storage.lock_thread(thread_id)
        try:
            await lock.__aenter__()
        except RunError as error:
            return await self._load_failure(parts, props, trace_id, started, error.message, effects)
        snapshot = None
        try:
            if effects is None:
                # The paused-run check and the thread's load in one read of the store.
                try:
                    snapshot = await self._snapshot(parts, props)
                except UsageError as error:
                    failed = await self._load_failure(
                        parts, props, trace_id, started, str(error), effects
                    )
                    await _leave(lock, None)
                    return failed
                blocking = snapshot.paused[0].trace_id if snapshot.paused else None
            else:
                # An engine's run loads its thread in a step (`_load`), which a replay takes
                # from the record: only the check is made here.
                blocking = await _paused_run(parts.storage, thread_id)
        except BaseException as error:
            await _leave(lock, error)
            if not isinstance(error, RunError):
                raise
            # The store is unreachable, or the thread's saved config or state is damaged: a
            # runtime failure like any other, not a raise.
            return await self._load_failure(parts, props, trace_id, started, error.message, effects)
        if blocking is not None:
            waiting = _awaiting_approval(thread_id, blocking)
            await _leave(lock, waiting)
            raise waiting
        return lock, snapshot

    async def _run(
        self,
        props: AgentProps,
        trace_id: str,
        started: float,
        run: _InFlight,
        paused: PausedRun | None = None,
        decisions: dict[str, Decision] | None = None,
        effects: RunEffects | None = None,
        *,
        take: bool = False,
    ) -> AgentFinalResponse:
        """Prepare, drive and conclude a run; its response is kept on `run` too, for an
        `aclose()` cancelling the caller after it. With `take`, a new turn: the run takes
        its thread first (`_take_thread`: the lock, held until the run is over, and the
        thread's read); else the caller holds the thread. With `effects`, the run is a
        durable engine's workflow: its side effects are steps."""
        lock: AbstractAsyncContextManager[None] | None = None
        snapshot: ThreadSnapshot | None = None
        if take:
            taken = await self._take_thread(props, trace_id, started, run, effects)
            if not isinstance(taken, tuple):
                return taken  # it failed to load
            lock, snapshot = taken
            del taken
        failure: BaseException | None = None  # what the thread's lock is left with
        entered = False
        try:
            # The run marks its task as inside it (`enclosing_run`). Entered and left by hand:
            # a `with` block would keep its bound `__exit__` alive for the whole run
            # (`EnclosingRun.__exit__` takes no notice of an exception).
            run.__enter__()
            entered = True
            ready = await self._prepare(
                run.parts, props, trace_id, started, paused, decisions, effects, snapshot
            )
            snapshot = None  # read into the run's components: not kept while it runs
            if not isinstance(ready, _Prepared):  # it ended before its entity was spawned
                run.result = ready
                return ready
            # Driven here rather than in a coroutine of its own: one object fewer per run in
            # flight. Spawn the run entity and tick its world until a system ends the run. A
            # cancellation is recorded, then raised, unless `aclose()` alone asked for it:
            # then the run ends `cancelled`.
            worlds = run.parts.worlds
            world, entity = self._spawn(ready, worlds)
            # What the run's end needs of `ready`, which is not kept while the run goes:
            # the entity and the resource table hold these anyway.
            spec, resources = ready.spec, ready.resources
            del ready
            cancelled_by_close = False
            try:
                for _ in range(_MAX_TICKS):
                    await world.process()
                    if world.has_component(entity, TerminalComponent):
                        break
                else:
                    world.add_component(
                        entity,
                        RunFailed("finalization", f"the run did not finish in {_MAX_TICKS} ticks"),
                    )
                    await world.process()
            except asyncio.CancelledError:
                cancelled_by_close = run.take_close_cancel()
                await _record_cancelled(spec, resources.recorder, by_close=cancelled_by_close)
                if not cancelled_by_close:
                    raise
            finally:
                components = self._despawn(world, entity, worlds)
            ended = _Ended.of(components, cancelled_by_close=cancelled_by_close)
            run.result = _outcome(spec, resources.llm, started, ended)
            return run.result
        except BaseException as error:
            failure = error
            raise
        finally:
            if entered:
                run.__exit__(None, None, None)
            if lock is not None:
                await _leave(lock, failure)
            failure = None  # no cycle through this frame and the exception's traceback

    async def _prepare(
        self,
        parts: _Parts,
        props: AgentProps,
        trace_id: str,
        started: float,
        paused: PausedRun | None,
        decisions: dict[str, Decision] | None,
        effects: RunEffects | None,
        snapshot: ThreadSnapshot | None,
    ) -> _Prepared | AgentFinalResponse:
        """The run's components and resources, ready to spawn; or the response of a run that
        ended here, its tool sources or thread failing to load."""
        # A new turn on an engine that takes the thread's turn itself: its load step checks
        # that no paused run waits on the thread.
        check = paused is None and effects is not None and effects.serialises_turns
        loaded = await self._load(
            parts, props, trace_id, started, effects, check_paused=check, snapshot=snapshot
        )
        if not isinstance(loaded, _Loaded):
            return loaded  # it ended while loading
        settings, context = loaded.settings, loaded.context
        timings = RunTimings()
        timings.load_ms = (time.perf_counter() - started) * 1000
        recorder = RunRecorder(parts.observations, props.thread_id, trace_id, effects)
        budget = _budget(settings.usage_limits, paused)
        llm = RunModelCaller(
            provider=loaded.provider,
            recorder=recorder,
            stream=self.stream,
            params=settings.llm_params,
            budget=budget,
            effects=effects,
            feed=self._stream_out if effects is not None else None,
        )
        spec = RunSpec(
            props=props,
            thread_id=props.thread_id,
            trace_id=trace_id,
            thread=context,
            history=loaded.history,
            system_prompt=settings.system_prompt,
            # In registration order whatever the set's order: no sorting needed.
            tool_schemas=parts.tools.schemas(settings.enabled_tools),
            enabled_tools=settings.enabled_tools,
            llm_params=llm.params,
            max_tool_calls=settings.max_tool_calls,
            tool_timeout_s=settings.tool_timeout_s,
            max_concurrency=settings.max_concurrency,
            state_snapshot=_snapshot(context.state.data),
            reevaluate=settings.reevaluate,
            max_revisions=settings.max_revisions,
            timings=timings,
        )
        gate = self._gate(
            parts.tools, props, trace_id, settings, recorder, paused, decisions, effects
        )
        resources = RunResources(
            llm=llm,
            recorder=recorder,
            approvals=gate,
            budget=budget,
            invoker=IN_PROCESS if effects is None else EffectInvoker(effects),
            effects=effects,
        )
        return _Prepared(spec, resources, started, paused)

    async def _load(
        self,
        parts: _Parts,
        props: AgentProps,
        trace_id: str,
        started: float,
        effects: RunEffects | None,
        *,
        check_paused: bool = False,
        snapshot: ThreadSnapshot | None = None,
    ) -> _Loaded | AgentFinalResponse:
        """Open the tool sources, load the thread (unless read already: `snapshot`) and
        resolve the run's settings; or the response of a run that failed to (the thread's
        saved configuration is data: a bad one fails the run, it does not raise). With
        `check_paused`, the same step reads the thread with its paused runs, and raises
        `ThreadAwaitingApprovalError` when one waits."""
        try:
            # Before anything is planned: the planner must see the sources' tool schemas.
            await parts.tools.open_sources()
        except RunError as error:
            return await self._ended_early(
                parts,
                props,
                trace_id,
                started,
                "tools",
                error.message,
                status="error",
                effects=effects,
            )
        thread_id = props.thread_id

        def settled(
            snapshot: ThreadSnapshot,
        ) -> tuple[ThreadContext, list[ConversationMessage], RunSettings]:
            context = ThreadContext.for_run(snapshot.config, snapshot.state)
            settings = RunSettings.resolve(
                self._defaults, context.config, props.options, parts.tools.names
            )
            return context, snapshot.messages, settings

        async def read() -> tuple[ThreadContext, list[ConversationMessage], RunSettings]:
            context = await parts.state.load_context(thread_id)
            settings = RunSettings.resolve(
                self._defaults, context.config, props.options, parts.tools.names
            )
            limit = settings.history_limit
            history = await parts.storage.get_messages(thread_id, limit=limit) if limit else []
            return context, history, settings

        async def check_and_read() -> tuple[str | None, Any]:
            found = await self._snapshot(parts, props)
            return (found.paused[0].trace_id, None) if found.paused else (None, settled(found))

        blocking: str | None = None  # a paused run's trace id (with `check_paused`)
        try:
            # On an engine, read once: a replayed run sees the thread as it first did (once
            # anything recorded depends on it: a read is kept with the run's next step).
            if snapshot is not None:
                loaded = settled(snapshot)
            elif effects is None:
                loaded = await read()
            elif check_paused:
                blocking, loaded = await effects.once("pes_agent.load", check_and_read, kind="read")
            else:
                loaded = await effects.once("pes_agent.load", read, kind="read")
            if blocking is None:
                context, history, settings = loaded
                config = settings.provider_config
                if config is None or parts.provider_pinned:
                    provider = parts.provider
                else:
                    provider = self._providers.get(config)
        except RunError as error:
            return await self._load_failure(parts, props, trace_id, started, error.message, effects)
        except UsageError as error:
            return await self._load_failure(parts, props, trace_id, started, str(error), effects)
        if blocking is not None:
            raise _awaiting_approval(thread_id, blocking)
        return _Loaded(context, history, settings, provider)

    async def _snapshot(self, parts: _Parts, props: AgentProps) -> ThreadSnapshot:
        """What a new turn reads of its thread, in one read of the store: the runs waiting
        for approval and, when none waits, the config, state and the history its settings
        ask for (`resolve_history_limit`, the rule `RunSettings.resolve` applies)."""
        defaults, options = self._defaults, props.options
        return await load_snapshot(
            parts.storage,
            props.thread_id,
            history_limit=lambda config: resolve_history_limit(defaults, config, options),
        )

    def _spawn(self, prepared: _Prepared, worlds: _Worlds) -> tuple[World, EntityId]:
        """A world for the run and its entity in it, with the run's components and resources
        (a resumed run's plan too: execution continues where it stopped)."""
        world = worlds.take()
        entity = world.create_entity(prepared.spec)
        paused = prepared.paused
        if paused is not None:
            world.add_component(entity, Planned(output=paused.planning))
            world.add_component(entity, Resumed(calls=list(paused.calls)))
        self._resources.attach(world, entity, prepared.resources)
        return world, entity

    def _despawn(self, world: World, entity: EntityId, worlds: _Worlds) -> dict[type[Any], Any]:
        """What the run entity was left with; the entity is deleted and its world handed back."""
        components = dict(world.components_of(entity))
        self._resources.detach(world, entity)
        world.delete_entity(entity)
        worlds.give_back(world)
        return components

    def _gate(
        self,
        tools: ToolRegistry,
        props: AgentProps,
        trace_id: str,
        settings: RunSettings,
        recorder: RunRecorder,
        paused: PausedRun | None,
        decisions: dict[str, Decision] | None,
        effects: RunEffects | None,
    ) -> ApprovalGate | None:
        """The run's approval gate: the agent's, the thread's and the call's rules added up;
        None when no call can need approval (then any executor will do)."""
        names = settings.require_approval.union(
            paused.require_approval if paused is not None else ()
        )
        predicate = self._defaults.approval_predicate
        if not (names or predicate or paused is not None):
            # A loop rather than any() over a generator (a Python call per tool, every run).
            for tool in tools:
                if needs_approval(tool):
                    break
            else:
                return None
        if predicate is None and paused is not None and paused.approval_predicate:
            # The pausing agent's predicate is not here to ask: a person decides instead.
            predicate = ask_always
        return ApprovalGate(
            tools=tools.as_mapping(),
            names=names,
            predicate=predicate,
            context=ApprovalContext(
                thread_id=props.thread_id,
                trace_id=trace_id,
                user_id=props.user_id,
                session_id=props.session_id,
            ),
            handler=self._defaults.approval_handler,
            record=recorder.record,
            decisions=decisions,
            prior=paused.results if paused is not None else None,
            replaced=paused.replaced_steps if paused is not None else (),
            effects=effects,
        )

    async def pending_runs(self, thread_id: str | None = None) -> list[PausedRun]:
        """The runs waiting for approval on `thread_id` (on every thread when None), each with
        its `pending` calls, `deadline` and `props`; read from the storage, so runs paused by
        other processes sharing it are listed too.

        Args:
            thread_id: The thread whose paused runs to list; None lists every thread's.

        Returns:
            The paused runs, oldest first.

        Raises:
            UsageError: `thread_id` is not a valid thread id, or the agent was closed.
        """
        if thread_id is not None:
            check_thread_id(thread_id)
        self._check_open()
        return await self._now().storage.get_paused_runs(thread_id)

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
        resolved; its plan is not re-evaluated.

        The decisions are law whatever this agent's rules: a denied call never runs, and the
        rules stored with the paused run are added to this agent's (`PausedRun`).

        Args:
            thread_id: The thread the run paused on.
            trace_id: The paused run's trace id (`PausedRun.trace_id`, or the paused
                response's `metadata.trace_id`).
            decisions: `Approve()` or `Deny(reason)` for each pending call id.

        Returns:
            The run's response, as `process()` would have returned it; it may be
            `"awaiting_approval"` again (see above).

        Raises:
            UsageError: The decisions are malformed, miss pending calls or name unknown call
                ids; the agent was closed; or the call comes from inside a run on the thread.
            NotAwaitingApprovalError: No run with that trace id waits on the thread (resumed
                or cancelled already, or it never paused).
        """
        check_thread_id(thread_id)
        given = _checked_decisions(decisions)
        self._check_open()
        if enclosing_run(thread_id) is not None:
            raise UsageError(
                f"resume() was called for thread {thread_id!r} from inside a run on that "
                "thread; resume it after that run returns"
            )
        if self._engine is not None:
            # A worker resumes it (`_resume_on_engine`); the decisions are checked there, as
            # the run is claimed.
            engine = self._engine
            return await self._streamed_from_engine(
                lambda: engine.resume(self, thread_id, trace_id, given)
            )
        return await self._resume_here(thread_id, trace_id, given, None)

    async def _resume_on_engine(
        self, thread_id: str, trace_id: str, decisions: dict[str, Decision], effects: RunEffects
    ) -> AgentFinalResponse:
        """`resume()` as a durable engine's workflow runs it on a worker: the claim (with the
        decisions' observations) and the run's side effects are steps of `effects`."""
        return await self._resume_here(thread_id, trace_id, decisions, effects)

    async def _resume_here(
        self,
        thread_id: str,
        trace_id: str,
        given: dict[str, Decision],
        effects: RunEffects | None,
    ) -> AgentFinalResponse:
        started = time.perf_counter()
        # An engine's agent takes no override (see `override`).
        parts = self._parts if effects is not None else self._now()
        run = self._in_flight("resume", thread_id, trace_id, effects, parts=parts)
        try:
            serialised = effects is not None and effects.serialises_turns
            # An engine that runs the thread's turns one at a time needs no lock (the claim,
            # atomic in the store, still refuses a run resumed or cancelled meanwhile).
            async with (
                contextlib.nullcontext()
                if serialised
                else self._lock_to_resume(parts.storage, thread_id, trace_id)
            ):

                async def claim() -> tuple[PausedRun, dict[str, Decision]]:
                    claimed, decided = await self._claim(parts.storage, thread_id, trace_id, given)
                    recorder = RunRecorder(parts.observations, thread_id, trace_id)
                    await _record_decisions(recorder, claimed, decided)
                    return claimed, decided

                # On an engine the claim is a step: a run taken over never claims twice.
                claimed, decided = await (
                    claim() if effects is None else effects.once("pes_agent.claim", claim)
                )
                merged = {**claimed.decisions, **decided}
                return await self._run(
                    claimed.props, trace_id, started, run, claimed, merged, effects=effects
                )
        finally:
            self._landed(run)

    @contextlib.asynccontextmanager
    async def _lock_to_resume(
        self, storage: Storage, thread_id: str, trace_id: str
    ) -> AsyncIterator[None]:
        """The thread's lock, to resume `trace_id` under it; `NotAwaitingApprovalError` as soon
        as the run is no longer stored while the lock is held elsewhere.

        A resume racing another one (in any process) would otherwise wait for the lock for
        the whole of the winner's run, and only then learn it lost: meanwhile a cancel sent
        to the loser's process would stop the idle loser instead of the run that executes.
        """
        async with contextlib.AsyncExitStack() as stack:
            while True:
                try:
                    async with asyncio.timeout(_RESUME_POLL_S):
                        await stack.enter_async_context(storage.lock_thread(thread_id))
                    break
                except TimeoutError:
                    waiting = await storage.get_paused_runs(thread_id)
                    if not any(paused.trace_id == trace_id for paused in waiting):
                        raise _not_waiting(thread_id, trace_id) from None
            yield

    async def _claim(
        self, storage: Storage, thread_id: str, trace_id: str, decisions: dict[str, Decision]
    ) -> tuple[PausedRun, dict[str, Decision]]:
        """Check `decisions` against the paused run, then take it out of the store; the run
        and the decision for each of its pending calls."""
        found = next(
            (r for r in await storage.get_paused_runs(thread_id) if r.trace_id == trace_id),
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
        claimed = await storage.claim_paused_run(thread_id, trace_id)
        if claimed is None:
            raise _not_waiting(thread_id, trace_id)
        if expired:
            decisions = {call_id: Deny("approval expired") for call_id in pending}
        return claimed, decisions

    async def cancel_pending(self, thread_id: str) -> list[PausedRun]:
        """End the runs of `thread_id` waiting for approval as cancelled: none of their
        pending calls runs, an ERROR observation (phase "cancelled") is recorded, no turn is
        saved.

        Args:
            thread_id: The thread whose waiting runs to cancel.

        Returns:
            The runs cancelled (none: nothing was waiting).

        Raises:
            UsageError: `thread_id` is not a valid thread id, or the agent was closed.
        """
        check_thread_id(thread_id)
        self._check_open()
        cancelled: list[PausedRun] = []
        parts = self._now()
        async with parts.storage.lock_thread(thread_id):
            for waiting in await parts.storage.get_paused_runs(thread_id):
                claimed = await parts.storage.claim_paused_run(thread_id, waiting.trace_id)
                if claimed is None:
                    continue  # another process resumed or cancelled it meanwhile
                await RunRecorder(parts.observations, thread_id, claimed.trace_id).record(
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

    async def _load_failure(
        self,
        parts: _Parts,
        props: AgentProps,
        trace_id: str,
        started: float,
        message: str,
        effects: RunEffects | None = None,
    ) -> AgentFinalResponse:
        message = "loading the thread failed: " + message
        return await self._ended_early(
            parts, props, trace_id, started, "load", message, status="error", effects=effects
        )

    async def _ended_early(
        self,
        parts: _Parts,
        props: AgentProps,
        trace_id: str,
        started: float,
        phase: str,
        message: str,
        *,
        status: RunStatus,
        effects: RunEffects | None = None,
    ) -> AgentFinalResponse:
        """The response of a run that ended before its entity was spawned, with its ERROR."""
        title = "Run cancelled" if status == "cancelled" else f"{phase.capitalize()} failed"
        await RunRecorder(parts.observations, props.thread_id, trace_id, effects).record(
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


def _phase_systems(
    resources: ResourceTable,
    tools: ToolRegistry,
    storage: Storage,
    defaults: AgentDefaults,
    planner: Planner,
    executor: Executor,
    synthesizer: Synthesizer,
    retriever: Retriever | None,
) -> list[tuple[Any, int]]:
    """The PES systems every run world registers, each with its priority."""
    execution = Execution(executor, tools.as_mapping())
    return [
        *([(RetrievalSystem(resources, retriever), -10)] if retriever is not None else []),
        (PlanPhaseSystem(resources, planner, execution), 0),
        (ToolSystem(resources, execution), 5),
        (SynthesisSystem(resources, synthesizer), 10),
        (FinalizationSystem(resources, storage, defaults.state_saving), 20),
        (PauseSystem(resources, storage, defaults.approval_timeout_s), 15),
        (RunErrorSystem(resources), 99),
    ]


def _outcome(
    spec: RunSpec, llm: RunModelCaller, started: float, ended: _Ended
) -> AgentFinalResponse:
    """The response to a run its systems are done with: its answer, status and metadata."""
    status, response, problem, results = _conclusion(spec, ended)
    metadata = ExecutionMetadata(
        thread_id=spec.thread_id,
        trace_id=spec.trace_id,
        user_id=spec.props.user_id,
        status=status,
        total_duration_ms=(time.perf_counter() - started) * 1000,
        llm_calls=llm.calls,
        tool_calls=len(results),
        error=problem,
        usage=llm.usage,
        phases=_durations(spec.timings),
        pending_approvals=(
            ended.paused.pending if status == "awaiting_approval" and ended.paused else []
        ),
    )
    if enabled_for(_std_log, logging.INFO):
        _log.bind(thread_id=spec.thread_id, trace_id=spec.trace_id).info(
            "run_finished",
            status=status,
            llm_calls=metadata.llm_calls,
            tool_calls=metadata.tool_calls,
            duration_ms=round(metadata.total_duration_ms, 2),
        )
    return AgentFinalResponse(response=response, metadata=metadata)


_PHASE_FIELDS = tuple(PhaseDurations.model_fields)


def _durations(timings: RunTimings) -> PhaseDurations:
    """The run's phase timings as the response's `metadata.phases` reports them: given only
    the phases that took time, so its `model_fields_set` names the phases that ran, as when
    the model itself was written to during the run."""
    return PhaseDurations(
        **{name: value for name in _PHASE_FIELDS if (value := getattr(timings, name))}
    )


def _conclusion(spec: RunSpec, ended: _Ended) -> _Conclusion:
    """How the run ended, from what its entity was left with: paused, cancelled by
    `aclose()`, failed, or finished (success or partial)."""
    thread_id, trace_id = spec.thread_id, spec.trace_id
    results = ended.executed.results if ended.executed is not None else []
    if ended.paused is not None and ended.failed is None and not ended.cancelled_by_close:
        waiting = _awaiting_message(thread_id, trace_id, ended.paused)
        return _Conclusion("awaiting_approval", waiting, None, list(ended.paused.results.values()))
    if ended.cancelled_by_close:
        problem = _CANCELLED_BY_CLOSE
        cancelled = _error_message(thread_id, trace_id, problem, "cancelled")
        return _Conclusion("cancelled", cancelled, problem, results)
    if ended.failed is not None:
        problem = ended.failed.message
        # Saving the turn failed after the answer was written: the caller still gets it.
        response = (
            ended.finalized.message
            if ended.finalized is not None
            else _error_message(thread_id, trace_id, problem, "error")
        )
        return _Conclusion("error", response, problem, results)
    if ended.finalized is None:  # the phase systems always leave one; not left to assert
        raise RuntimeError("a run that did not fail ended without a Finalized result")
    status = run_status(results, ended.retrieved)
    return _Conclusion(status, ended.finalized.message, None, results)


async def _record_cancelled(spec: RunSpec, recorder: RunRecorder, *, by_close: bool) -> None:
    """Log the run's cancellation and record its ERROR, shielded: the cancellation under
    way must not stop the record that says so."""
    _log.bind(thread_id=spec.thread_id, trace_id=spec.trace_id).info(
        "run_cancelled", by_aclose=by_close
    )
    await asyncio.shield(
        recorder.record(
            ObservationType.ERROR,
            "Run cancelled",
            {
                "phase": "cancelled",
                "error": _CANCELLED_BY_CLOSE if by_close else "the run was cancelled",
            },
        )
    )


async def _leave(lock: AbstractAsyncContextManager[None], failure: BaseException | None) -> None:
    """Leave a thread's lock entered by hand, as `async with` would on the way out of its
    block (told of the exception leaving it, if one does)."""
    if failure is None:
        await lock.__aexit__(None, None, None)
    else:
        await lock.__aexit__(type(failure), failure, failure.__traceback__)


def _budget(limits: UsageLimits | None, paused: PausedRun | None) -> RunBudget | None:
    """The run's budget: its limits, tightened by those it paused under, against what it
    used before the pause; None when no limit applies."""
    if paused is not None and paused.usage_limits is not None:
        limits = paused.usage_limits if limits is None else paused.usage_limits.tightened(limits)
    if limits is None or limits.unlimited:
        return None
    if paused is None:
        return RunBudget(limits)
    return RunBudget(limits, spent=paused.usage, tool_calls=paused.tool_calls)


def _checked_decisions(decisions: object) -> dict[str, Decision]:
    """`decisions` as a dict, if it maps call ids to `Approve()` or `Deny(reason)`."""
    if not isinstance(decisions, Mapping) or not all(
        isinstance(key, str) and isinstance(value, Approve | Deny)
        for key, value in decisions.items()
    ):
        raise UsageError(
            "decisions must map call ids to Approve() or Deny(reason), e.g. "
            '{"call_1": Approve(), "call_2": Deny("too expensive")}'
        )
    return dict(decisions)


async def _record_decisions(
    recorder: RunRecorder, claimed: PausedRun, decisions: Mapping[str, Decision]
) -> None:
    """Record an APPROVAL_DECIDED observation for each pending call of the resumed run."""
    for pending in claimed.pending:
        decision = decisions[pending.call_id]
        verdict = "granted" if isinstance(decision, Approve) else "denied"
        await recorder.record(
            ObservationType.APPROVAL_DECIDED,
            f"Approval {verdict}: {pending.tool_name}",
            decided_content(pending.call_id, pending.tool_name, decision),
        )


def _error_message(
    thread_id: str, trace_id: str, message: str, status: RunStatus
) -> ConversationMessage:
    return ConversationMessage(
        thread_id=thread_id,
        role=MessageRole.AI,
        content="I could not complete this request: " + message,
        metadata={"trace_id": trace_id, "status": status},
    )


def _awaiting_approval(thread_id: str, trace_id: str) -> ThreadAwaitingApprovalError:
    return ThreadAwaitingApprovalError(
        f"thread {thread_id!r} has a run waiting for approval (trace id {trace_id!r}); a "
        f"thread runs one turn at a time: finish it with await agent.resume({thread_id!r}, "
        f"{trace_id!r}, {{call_id: Approve() or Deny(reason)}}) or drop it with "
        f"await agent.cancel_pending({thread_id!r})",
        thread_id=thread_id,
        trace_id=trace_id,
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


class AgentOverride:
    """`agent.override(...)`'s block: `with` or `async with` it (see `AgentCore.override`)."""

    __slots__ = ("_agent", "_owned", "_provider", "_storage", "_token", "_tools")

    def __init__(
        self, agent: AgentCore, provider: object, tools: list[Any] | None, storage: object
    ) -> None:
        self._agent = agent
        self._provider = provider
        self._tools = tools
        self._storage = storage
        self._owned: list[AsyncCloseable] = []
        self._token: contextvars.Token[Mapping[AgentCore, _Parts] | None] | None = None

    def _builds_closables(self) -> bool:
        return (
            (self._provider is not None and not isinstance(self._provider, LLMProvider))
            or isinstance(self._storage, str)
            or any(isinstance(t, ToolSource) and not isinstance(t, Tool) for t in self._tools or ())
        )

    def _enter(self) -> None:
        if self._token is not None:
            raise UsageError("this override block is in use already; call agent.override() again")
        agent = self._agent
        base = agent._now()
        owned: list[AsyncCloseable] = []
        try:
            provider, pinned = base.provider, base.provider_pinned
            if self._provider is not None:
                provider, built = resolve_provider(self._provider)
                pinned = True
                if built:
                    owned.append(provider)
            tools = base.tools
            if self._tools is not None:
                # The agent's threads for sync tools: it closes them, not the block.
                tools = ToolRegistry(self._tools, thread_pool=base.tools.thread_pool)
                owned.append(tools)
            storage, observations = base.storage, base.observations
            if self._storage is not None:
                storage = open_storage(self._storage)  # type: ignore[arg-type]
                if storage is not self._storage:
                    owned.append(storage)
                observations = ObservationManager(storage)
        except BaseException:
            self._owned = owned
            raise
        self._owned = owned
        if tools is base.tools and storage is base.storage:
            worlds = base.worlds
        else:
            planner, executor, synthesizer, retriever = agent._phases
            systems = _phase_systems(
                agent._resources,
                tools,
                storage,
                agent._defaults,
                planner,
                executor,
                synthesizer,
                retriever,
            )
            worlds = _Worlds(systems)
        parts = _Parts(
            provider=provider,
            provider_pinned=pinned,
            tools=tools,
            storage=storage,
            state=StateManager(storage, observations=observations),
            conversation=ConversationManager(storage),
            observations=observations,
            worlds=worlds,
        )
        overrides = _OVERRIDES.get() or {}
        self._token = _OVERRIDES.set({**overrides, agent: parts})

    def _exit(self) -> None:
        token, self._token = self._token, None
        if token is not None:
            _OVERRIDES.reset(token)

    def __enter__(self) -> Self:
        if self._builds_closables():
            raise UsageError(
                "this override builds a provider, storage or tool source that must be closed "
                "on exit: use `async with agent.override(...):`, or pass objects you close"
            )
        self._enter()
        return self

    def __exit__(self, *exc: object) -> None:
        self._exit()
        # Only a tool registry sharing the agent's threads can be here: nothing to close.
        self._owned = []

    async def __aenter__(self) -> Self:
        try:
            self._enter()
        except BaseException:
            await close_all(self._owned)
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._exit()
        owned, self._owned = self._owned, []
        await close_all(owned)


def _snapshot(data: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of a thread's state data, as the run found it (`{}` for none, which most
    threads have: without `deepcopy`'s machinery)."""
    return copy.deepcopy(data) if data else {}


async def _paused_run(storage: Storage, thread_id: str) -> str | None:
    """The trace id of a run waiting for approval on the thread; None if none waits (the
    list read is not kept for the length of the run)."""
    waiting = await storage.get_paused_runs(thread_id)
    return waiting[0].trace_id if waiting else None
