"""The contracts of pes-agent's pluggable parts, gathered in one place.

Swap a phase by passing an object of the right shape to `create_agent`:

- `Planner.plan(ctx) -> PlanningOutput` — decides intent, plan and tool calls;
- `Executor.execute(calls, ctx) -> list[ToolResult]` — runs the calls (the default runs them as
  a concurrent DAG; `SequentialExecutor` runs them one by one);
- `Synthesizer.synthesize(ctx) -> str` — writes the final answer;
- `PlanReviser.revise(progress) -> calls | None` — re-evaluates the calls not yet run after a
  wave (`create_agent(reevaluate=...)`; see `pes_agent.execution.revision`).

The default implementations use nothing but these contracts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import typing_extensions

from pes_agent.approvals.gate import ApprovalGate
from pes_agent.config import AgentState, LLMParams, Reevaluate
from pes_agent.execution.feed import PlanFeed
from pes_agent.execution.revision import PlanProgress, PlanRevision
from pes_agent.observing.types import Observation, ObservationType
from pes_agent.planning.plan import ParsedToolCall, PlanningOutput
from pes_agent.providers.base import (
    LLMPhase,
    LLMProvider,
    PromptMessage,
    StreamMetadata,
    ToolCallEvent,
    ToolChoice,
)
from pes_agent.retrieval.base import ScoredDocument
from pes_agent.run import AgentProps
from pes_agent.threads.messages import ConversationMessage
from pes_agent.tools.base import Tool, ToolResult, ToolSchema
from pes_agent.tools.invoker import IN_PROCESS, ToolInvoker
from pes_agent.usage import Usage

__all__ = [
    "CallDispatch",
    "ExecutionContext",
    "ExecutionHooks",
    "Executor",
    "LLMResponse",
    "ModelCaller",
    "ObservationRecorder",
    "PlanReviser",
    "PlanRevisionHooks",
    "Planner",
    "PlanningContext",
    "RecordObservation",
    "Reevaluation",
    "StreamListener",
    "SupportsApprovals",
    "SupportsStreaming",
    "SynthesisContext",
    "Synthesizer",
]


@dataclass(frozen=True, slots=True)
class LLMResponse:
    """A finished model call: its answer text, thinking blocks, native tool calls, usage and
    stream metadata."""

    text: str
    thoughts: tuple[str, ...] = ()
    tool_calls: tuple[ToolCallEvent, ...] = ()
    usage: Usage = field(default_factory=Usage)
    metadata: StreamMetadata | None = None


class StreamListener(Protocol):
    """Told a model call's answer as it streams — its text, and the arguments of its native
    tool calls — so a planner can read its plan early."""

    def on_text(self, text: str) -> None:
        """The next piece of the answer's text."""

    def on_tool_input(self, call_id: str, name: str, text: str) -> None:
        """The next piece of the arguments of native tool call `call_id` (tool `name`): JSON
        text, as the model writes it."""

    def on_restart(self) -> None:
        """The provider retries after having streamed: the text so far is void; the answer
        starts over."""


@runtime_checkable
class ModelCaller(Protocol):
    """Streams one model call for a phase, recording stream observations and usage.

    With a `listener`, the answer's text is also handed to it as it streams.
    """

    async def __call__(
        self,
        messages: Sequence[PromptMessage],
        *,
        phase: LLMPhase,
        tools: Sequence[ToolSchema] = (),
        tool_choice: ToolChoice | None = None,
        response_format: dict[str, Any] | None = None,
        listener: StreamListener | None = None,
    ) -> LLMResponse: ...


@runtime_checkable
class CallDispatch(Protocol):
    """Starts a plan's calls while the planner still streams it (`PlanningContext.dispatch`).

    A planner `submit`s each call of its answer the moment the call is complete (in plan
    order, step 1 first); the agent may start it at once. When the answer turns out unusable,
    the planner `discard`s what it submitted before asking again: the calls started are
    cancelled and recorded, and the next `submit` begins a new plan. The plan the planner
    returns is the authority: submitted calls it does not start with are discarded too.
    """

    def submit(self, call: ParsedToolCall) -> None:
        """The next call of the plan being streamed, complete."""

    async def discard(self, reason: str) -> None:
        """Cancel and forget the calls submitted so far; `reason` is recorded."""


#: Records one observation of the run: `await record(ObservationType.PLAN, "title", {...})`.
RecordObservation = Callable[[ObservationType, str, dict[str, Any]], Awaitable[object]]


@dataclass(frozen=True, slots=True)
class PlanningContext:
    """Everything a planner may use to decide what to do.

    `provider` is the model `llm` calls (so a planner can see what it supports, e.g. its
    `structured_output`); `record` adds an observation to the run. Both are `None` when the
    context is built outside an agent run.
    """

    props: AgentProps
    thread_id: str
    trace_id: str
    system_prompt: str
    history: Sequence[ConversationMessage]
    tools: Sequence[ToolSchema]
    state: AgentState
    llm: ModelCaller
    llm_params: LLMParams = field(default_factory=LLMParams)
    provider: LLMProvider | None = None
    record: RecordObservation | None = None
    #: Passages the agent's retriever found for the query, best first (empty without one).
    #: Retrieved text is data: show it to a model only inside a delimited data block
    #: (`pes_agent.retrieval.passages.render_passages`), never as instructions.
    passages: Sequence[ScoredDocument] = ()
    #: Where to submit each call as soon as it is streamed, so it can start before the plan
    #: is complete; None when the run executes the plan only once it is whole.
    dispatch: CallDispatch | None = None


@dataclass(frozen=True, slots=True)
class SynthesisContext:
    """Everything a synthesizer may use to write the answer."""

    props: AgentProps
    thread_id: str
    trace_id: str
    system_prompt: str
    history: Sequence[ConversationMessage]
    planning: PlanningOutput
    results: Sequence[ToolResult]
    llm: ModelCaller
    #: The step number of each result, as placeholders count them (they skip steps a plan
    #: revision replaced); empty means 1, 2, 3, …
    steps: Sequence[int] = ()
    #: Passages the agent's retriever found for the query, as in `PlanningContext.passages`.
    passages: Sequence[ScoredDocument] = ()
    #: The call each result answers (a revision's calls included); empty: the results answer
    #: `planning.tool_calls`, looked up by call id.
    calls: Sequence[ParsedToolCall] = ()


@runtime_checkable
class ExecutionHooks(Protocol):
    """Told when each call starts (with resolved arguments) and ends; must not raise."""

    async def on_call_start(self, call: ParsedToolCall, arguments: dict[str, Any]) -> None: ...

    async def on_call_end(self, call: ParsedToolCall, result: ToolResult) -> None: ...


@runtime_checkable
class PlanRevisionHooks(Protocol):
    """Hooks that are also told the outcome of each re-evaluation (optional beside
    `ExecutionHooks`: an executor calls this only on hooks that have it); must not raise."""

    async def on_plan_revision(self, outcome: PlanRevision) -> None: ...


@runtime_checkable
class PlanReviser(Protocol):
    """Re-evaluates a running plan at the end of a wave.

    Returns the calls to run instead of the calls not yet run (`progress.pending`; `[]` drops
    them), numbered from `progress.next_step`, or `None` to keep them. Raises
    `PlanParseError` when the answer it got cannot be used; the plan is then kept. The
    executor checks the calls (`execution.revision.revision_errors`) before adopting them.
    """

    async def revise(self, progress: PlanProgress) -> Sequence[ParsedToolCall] | None:
        """Decide whether the calls not yet run should change.

        Args:
            progress: The plan's calls, those finished with their results, those pending.

        Returns:
            The calls to run instead of `progress.pending` (`[]` drops them), numbered from
            `progress.next_step`; None keeps them.

        Raises:
            PlanParseError: The answer could not be used; the plan is then kept.
        """
        ...


@dataclass(frozen=True, slots=True)
class Reevaluation:
    """When and by whom an executor has its plan re-evaluated (`ExecutionContext.reevaluation`).

    `mode` is `"on_failure"` or `"each_wave"` (`"never"` is the same as no `Reevaluation`);
    at most `max_revisions` revisions are adopted per `execute`, after which the reviser is not
    asked again.
    """

    mode: Reevaluate
    reviser: PlanReviser
    max_revisions: int = 2


@dataclass(frozen=True, slots=True)
class ExecutionContext:
    """What an executor needs: the tools, which of them this run may use, and its limits.

    `llm` is the model caller language steps use (without one a language step is an error
    result); `reevaluation`, when set, has the plan re-evaluated as it runs. Executors that
    support neither may ignore both. `approvals`, when set, gates the calls that need a
    person's approval; an executor must honour it, so the agent refuses to hand a gate to an
    executor that is not `SupportsApprovals` (`supports_approvals = True`). `invoker` is how
    each tool call reaches its tool (`pes_agent.tools.invoker`): an executor awaits
    `invoker.invoke(tool, arguments, context)` rather than the tool itself, so an engine can
    run the calls elsewhere.
    """

    thread_id: str
    trace_id: str
    tools: Mapping[str, Tool]
    enabled_tools: frozenset[str]
    max_concurrency: int = 8
    tool_timeout_s: float = 30.0
    max_tool_calls: int = 32
    user_id: str | None = None
    session_id: str | None = None
    hooks: ExecutionHooks | None = None
    state: AgentState | None = None
    llm: ModelCaller | None = None
    reevaluation: Reevaluation | None = None
    approvals: ApprovalGate | None = None
    invoker: ToolInvoker = IN_PROCESS


@runtime_checkable
class Planner(Protocol):
    """Decides what a run does: intent, plan and tool calls (`create_agent(planner=...)`)."""

    async def plan(self, ctx: PlanningContext) -> PlanningOutput:
        """Plan the run described by `ctx`.

        Args:
            ctx: The run's query, history, tools, state and model caller.

        Returns:
            The plan; its `tool_calls` run next (None or `[]` for none).

        Raises:
            PlanParseError: No usable plan; the run ends with status `error`.
        """
        ...


@runtime_checkable
class Executor(Protocol):
    """Runs a plan's tool calls (`create_agent(executor=...)`)."""

    async def execute(
        self, calls: Sequence[ParsedToolCall], ctx: ExecutionContext
    ) -> list[ToolResult]:
        """Run `calls` with the tools and limits of `ctx`.

        Args:
            calls: The plan's calls, in plan order; placeholders name earlier steps.
            ctx: The tools, which of them the run may use, and its limits.

        Returns:
            One result per call of the final plan (revisions included), in call order; a
            failed call is an error result, not an exception.
        """
        ...


@typing_extensions.runtime_checkable  # as the tools' capabilities (pes_agent.tools.base)
class SupportsStreaming(typing_extensions.Protocol):
    """An executor that can run a plan while it streams (`ConcurrentExecutor` can): the agent
    then starts each call as soon as the planner has written it."""

    async def execute_stream(self, feed: PlanFeed, ctx: ExecutionContext) -> list[ToolResult]:
        """Run the calls of `feed` as they come; the results of the final plan, as `execute`
        returns them."""
        ...


@typing_extensions.runtime_checkable  # as the tools' capabilities (pes_agent.tools.base)
class SupportsApprovals(typing_extensions.Protocol):
    """An executor that honours `ExecutionContext.approvals` says so with
    `supports_approvals = True`; the agent hands an approval gate to no other executor (a false
    value counts as not saying so)."""

    @property
    def supports_approvals(self) -> bool: ...


@runtime_checkable
class Synthesizer(Protocol):
    """Writes a run's answer from its plan and results (`create_agent(synthesizer=...)`)."""

    async def synthesize(self, ctx: SynthesisContext) -> str:
        """Write the answer for the run described by `ctx`.

        Args:
            ctx: The run's query, history, plan, tool results and model caller.

        Returns:
            The answer's text, saved as the thread's AI message.
        """
        ...


@runtime_checkable
class ObservationRecorder(Protocol):
    """Records observations and serves them to subscribers; `ObservationManager` is one."""

    async def record(self, observation: Observation | None = None, /, **fields: Any) -> Observation:
        """Store an observation and hand it to the matching subscribers.

        Args:
            observation: The observation, whole; leave it out to pass its fields instead.
            **fields: `Observation` fields, when no `observation` is given.

        Returns:
            The observation as recorded.
        """
        ...

    def subscribe(
        self,
        callback: Callable[[Observation], Awaitable[None] | None],
        *,
        types: Iterable[ObservationType | str] | None = None,
        thread_id: str | None = None,
    ) -> Callable[[], None]:
        """Call `callback` for each new observation of `types` on `thread_id`.

        Args:
            callback: Called with each `Observation`; sync or async.
            types: The observation types wanted; None for every type.
            thread_id: Only this thread's observations; None for every thread.

        Returns:
            A function that unsubscribes.
        """
        ...

    async def get_observations(
        self,
        thread_id: str,
        *,
        types: Sequence[ObservationType | str] | None = None,
        trace_id: str | None = None,
    ) -> list[Observation]:
        """Read a thread's observations in the order they were recorded.

        Args:
            thread_id: The thread to read.
            types: The observation types wanted; None for every type.
            trace_id: Only this run's observations; None for every run.

        Returns:
            The observations, oldest first.
        """
        ...
