"""The seam a durable engine takes a run by: its side effects, each done once and kept.

A run reaches the world only through its resources (DESIGN §14): the thread's load, each model
call, each tool call, storing a paused run and committing the turn. On an engine, the run's
code runs as a workflow and each of those becomes a step the engine keeps: when a worker dies
and another takes the run over, the workflow's code runs again from the top, and every step
that had finished answers from the record instead of happening again. The DAG, placeholders,
gates and budgets are plain code in between, so they run the same on every replay.

An engine implements `RunEffects`; `AgentCore` hands it to the run's model caller, tool
invoker and phases (`RunResources.effects`), and nothing else changes. Steps have stable
names (the README lists them: they are persisted, so renaming one breaks runs in flight):

| step | when | kind |
|---|---|---|
| `pes_agent.load` | the thread's config, state and history, read once (see below) | read |
| `pes_agent.model.<phase>` | a model call (planning, repair, synthesis, reevaluation, ...) | |
| `pes_agent.tool.<tool name>` | one tool call | |
| `pes_agent.approval` | the `approval_handler` asked about one call (its decision kept) | effect |
| `pes_agent.pause` | a run waiting for approval is stored | effect |
| `pes_agent.claim` | a resumed run takes its stored pause | effect |
| `pes_agent.commit_turn` | the turn saved, its last observations recorded | idempotent |

A step of the run's own bookkeeping (`RunEffects.once`) says what kind of effect it is
(`StepKind`), and an engine that can may record less for it:
- **effect**: done once and recorded, so that a replay gets the recorded outcome.
- **read**: no side effect. Its outcome matters only to what the run does next, so an engine
  may keep it unrecorded until the run's next step and record it with that step: a run that
  dies before then reads again, and nothing recorded depended on the first read.
- **idempotent**: doing it again changes nothing and returns the same outcome (the turn's
  commit: the store writes a trace id's turn once, `Storage.commit_turn`), so an engine whose
  workflow code may do I/O may do it with no record at all.

Two more things reach the world outside those steps, and an engine decides how:
- **Observations.** A run's recorder hands each observation to `RunEffects.record`: an engine
  whose workflow code may do I/O writes it at once; one whose workflow code may not (Temporal)
  keeps it and has the run's next step write it first.
- **The thread's turn.** In process, a run holds its thread's lock in the store. An engine
  that takes the thread's turn itself (`serialises_turns`: Temporal, whose workflow code may
  hold no lock, leases the turn in its first step) takes no lock: the run's load step also
  checks that no paused run waits on the thread.

Calls of the DAG run side by side and finish in any order, so the steps they make cannot be
told apart by the order they start in. The executor marks each call's task with its step
number (`CURRENT_STEP`, the position of the call in the plan, which never changes) before the
call's tool or language-step model call; an engine keys those steps by it (`open_calls`
reserves their places before the first call starts).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, runtime_checkable

from pes_agent.errors import ToolExecutionError
from pes_agent.protocols import LLMResponse
from pes_agent.tools.base import Tool, ToolContext

if TYPE_CHECKING:
    from pes_agent.approvals.models import Decision
    from pes_agent.core import AgentCore
    from pes_agent.observing.types import Observation
    from pes_agent.run import AgentFinalResponse, AgentProps

__all__ = [
    "CURRENT_STEP",
    "DurableEngine",
    "EffectInvoker",
    "EngineRun",
    "RunEffects",
    "StepKind",
    "ToolOutcome",
    "cancelled_elsewhere",
    "run_tool",
]

T = TypeVar("T")

StepKind = Literal["effect", "read", "idempotent"]
"""What a step of the run's bookkeeping does (`RunEffects.once`; the module docstring says what
an engine may do with each)."""

CURRENT_STEP: ContextVar[int] = ContextVar("pes_agent_durable_step", default=0)
"""The step number (1-based position in the plan) of the DAG call the current task runs;
0 outside a call. Set by the executor for each call's task, and while the call's end is
reported (what the recorder records then is the call's)."""


@runtime_checkable
class RunEffects(Protocol):
    """How one run's side effects go through a durable engine (see the module docstring)."""

    serialises_turns: bool
    """True when the engine itself gives a thread's turn to one run at a time, across all
    workers: the run then takes no lock in the store (the engine's workflow code may do no
    I/O), and its load step checks that no paused run waits on the thread."""

    runs_elsewhere: bool
    """True when the engine runs the run's code on event loops of its own (Temporal's
    workflow threads): the worker's agent does not count it as a run under way (`aclose()`
    neither waits for it nor cancels it); the engine's worker hands it over when it stops."""

    async def once(
        self,
        name: str,
        effect: Callable[[], Coroutine[Any, Any, T]],
        *,
        kind: StepKind = "effect",
    ) -> T:
        """`effect()`'s outcome, done once per run under the step `name`; a replayed run gets
        the recorded outcome (its value, or the error it raised) without doing it again.
        For the run's sequential steps (load, pause, claim, commit) and, inside a DAG call
        (`CURRENT_STEP` set), for the one step a call makes before its tool call: asking the
        `approval_handler` (`pes_agent.approval`). `effect` is an async function (an engine
        tells async steps from sync ones). `kind` says what an engine may record less for
        (module docstring): a `read` whose outcome a replay does not find recorded is read
        again; an `idempotent` effect may be done again."""
        ...

    async def open_calls(self, steps: int, revisions: int) -> None:
        """Before a DAG starts: keep places for the steps of up to `steps` calls and
        `revisions` re-evaluations, so that calls finishing in any order get the same step
        identities on every replay."""
        ...

    async def model_call(
        self, phase: str, call: Callable[[], Coroutine[Any, Any, LLMResponse]]
    ) -> Any:
        """One model call of `phase` as a step (a language step's keyed by `CURRENT_STEP`, a
        re-evaluation's by its number); returns the `LLMResponse`."""
        ...

    async def tool_call(
        self,
        name: str,
        call: Callable[[], Coroutine[Any, Any, ToolOutcome]],
        *,
        arguments: dict[str, Any],
        context: ToolContext,
    ) -> ToolOutcome:
        """The tool call of the current DAG call (`CURRENT_STEP`) to the tool `name`, as a
        step: `call()` here, or `run_tool` with the tool `name`, `arguments` and `context` on
        whichever worker the engine picks."""
        ...

    async def record(
        self,
        observation: Observation,
        write: Callable[[Observation], Coroutine[Any, Any, Observation]],
    ) -> Observation:
        """Have `write(observation)` happen: at once, or (from workflow code that may do no
        I/O) before the run's next step; returns the observation as recorded or as given."""
        ...


class ToolOutcome:
    """What a tool call came to, as a step keeps it: the output, or the failure's text."""

    __slots__ = ("failure", "output")

    def __init__(self, output: Any = None, failure: str | None = None) -> None:
        self.output = output
        self.failure = failure

    def __reduce__(self) -> tuple[Any, ...]:
        return (ToolOutcome, (self.output, self.failure))


async def run_tool(tool: Tool, arguments: dict[str, Any], context: ToolContext) -> ToolOutcome:
    """Call `tool`, its failure kept as text (a tool's own exception class need not survive a
    trip through the engine's store)."""
    try:
        return ToolOutcome(output=await tool.execute(arguments, context))
    except ToolExecutionError as error:
        return ToolOutcome(failure=error.message)
    except Exception as error:
        return ToolOutcome(failure=_describe(error))


class EffectInvoker:
    """A `ToolInvoker` whose calls are steps of the run's engine (`RunEffects.tool_call`).

    The step keeps what the tool returned, or the text of what it raised (a tool's own
    exception class need not survive a trip through the engine's store): replayed, a failed
    call fails again with the same message, without running.
    """

    __slots__ = ("_effects",)

    def __init__(self, effects: RunEffects) -> None:
        self._effects = effects

    async def invoke(self, tool: Tool, arguments: dict[str, Any], context: ToolContext) -> Any:
        """The tool's output for `arguments`, from the engine's record when the step ran
        before; raises `ToolExecutionError` with the failure's text when the tool failed."""

        async def call() -> ToolOutcome:
            return await run_tool(tool, arguments, context)

        name = tool.schema.name
        outcome = await self._effects.tool_call(name, call, arguments=arguments, context=context)
        if outcome.failure is not None:
            raise ToolExecutionError(outcome.failure, call_id=context.call_id, tool_name=name)
        return outcome.output


def _describe(error: BaseException) -> str:
    message = str(error)
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


@dataclass(frozen=True, slots=True)
class EngineRun:
    """A run as its engine knows it (`DurableEngine.find`, `DurableEngine.cancel`).

    `status` is `queued` (submitted, no worker has taken it yet) or `running` while the run
    goes on, then the status its response has (`success`, `partial`, `error`,
    `awaiting_approval`) or `cancelled`. `worker_id` names the worker that took it last.
    """

    trace_id: str
    thread_id: str
    status: str
    worker_id: str | None = None

    @property
    def running(self) -> bool:
        """Whether the run still goes on (queued or running)."""
        return self.status in ("queued", "running")


@runtime_checkable
class DurableEngine(Protocol):
    """Where an agent built with `create_agent(engine=...)` sends its runs: `process()` submits
    the run and awaits its response, which a worker (`worker(agent)`) produces."""

    async def run(self, agent: AgentCore, props: AgentProps) -> AgentFinalResponse:
        """Submit `props` (its `trace_id` set) as a run of `agent`'s and await its response;
        cancelling the awaiting task cancels the run."""
        ...

    async def resume(
        self, agent: AgentCore, thread_id: str, trace_id: str, decisions: dict[str, Decision]
    ) -> AgentFinalResponse:
        """Submit the resumption of the paused run `trace_id` with `decisions` and await its
        response (`agent.resume()` on an agent with this engine)."""
        ...

    def worker(self, agent: AgentCore) -> AbstractAsyncContextManager[None]:
        """Run `agent`'s runs in this process while the block lasts."""
        ...

    async def find(self, trace_id: str) -> EngineRun | None:
        """The run `trace_id` (its latest resumption, when it was resumed) as the engine
        knows it, from any process; None when it was never submitted."""
        ...

    async def running(self, thread_id: str) -> list[EngineRun]:
        """The runs of `thread_id` that go on (queued or running; resumptions included) as
        the engine records them, whichever process submitted them: what a server lists as
        running and what keeps a thread from being deleted."""
        ...

    async def cancel(self, trace_id: str) -> EngineRun | None:
        """Cancel the run `trace_id` from any process: the engine stops it (and its running
        tools) wherever it runs, and the process awaiting it gets a `cancelled` response.

        Returns the run as found before cancelling (a run that had ended is left alone);
        None when it was never submitted."""
        ...


def cancelled_elsewhere(thread_id: str, trace_id: str, user_id: str | None) -> AgentFinalResponse:
    """The response of a run cancelled on its engine by another caller than the one awaiting
    it (`DurableEngine.cancel`, maybe from another process): status `cancelled`."""
    from pes_agent.run import AgentFinalResponse, ExecutionMetadata
    from pes_agent.threads.messages import ConversationMessage, MessageRole

    return AgentFinalResponse(
        response=ConversationMessage(
            thread_id=thread_id, role=MessageRole.AI, content="The run was cancelled."
        ),
        metadata=ExecutionMetadata(
            thread_id=thread_id,
            trace_id=trace_id,
            user_id=user_id,
            status="cancelled",
            total_duration_ms=0.0,
            error="cancelled on its engine (DurableEngine.cancel, maybe from another process)",
        ),
    )
