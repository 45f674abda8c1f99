"""The components of a PES run entity: each phase reads some and leaves its own behind.

Components are data only. The live services a run works through (model caller, observation
recorder) are resources, looked up by the run entity in `pes.resources.ResourceTable`.

```
RunSpec (+ its RunTimings)  spawned by AgentCore.process
  -> Retrieved              RetrievalSystem (only for an agent with a retriever)
  -> Planned                PlanPhaseSystem (+ Dispatched: calls started while it streamed)
  -> Executed               ToolSystem (or Paused: calls wait for approval)
  -> (Paused) Terminal      PauseSystem stores the paused run
  -> Synthesized            SynthesisSystem
  -> Finalized + Terminal   FinalizationSystem
RunFailed (any phase)       -> RunErrorSystem -> Terminal
```
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pes_agent.approvals.models import Decision, PendingApproval
from pes_agent.config import LLMParams, Reevaluate
from pes_agent.execution.hooks import ObservingHooks
from pes_agent.planning.plan import ParsedToolCall, PlanningOutput
from pes_agent.retrieval.base import ScoredDocument
from pes_agent.run import AgentProps
from pes_agent.threads.messages import ConversationMessage
from pes_agent.threads.state import ThreadContext
from pes_agent.tools.base import ToolResult, ToolSchema

__all__ = [
    "Dispatched",
    "Executed",
    "Finalized",
    "Paused",
    "Phase",
    "Planned",
    "Resumed",
    "Retrieved",
    "RunFailed",
    "RunSpec",
    "RunTimings",
    "Synthesized",
]

Phase = Literal["load", "retrieval", "planning", "execution", "synthesis", "finalization"]
#: What a run failed in: a phase, or its budget (a usage limit it would have crossed).
FailedPhase = Phase | Literal["budget"]


@dataclass(slots=True)
class RunTimings:
    """How long each phase of the run took so far, in milliseconds; each system writes its
    own phase.

    Plain slotted floats rather than a `PhaseDurations` model held for the whole run: a
    pydantic instance carries a fields set too, two objects for the collector to scan per run
    in flight; the model is built once, for the response. Held by the run's `RunSpec`
    rather than as a component of its own: a component type is one more dict per world in
    its store, and at 10,000 runs in flight each run has a world of its own.
    """

    load_ms: float = 0.0
    retrieval_ms: float = 0.0
    planning_ms: float = 0.0
    execution_ms: float = 0.0
    synthesis_ms: float = 0.0
    finalization_ms: float = 0.0


@dataclass(slots=True)
class RunSpec:
    """What a run was asked to do and with which settings, resolved for this call; and
    (`timings`, the one part its systems write) how long each phase took so far."""

    props: AgentProps
    #: `props.thread_id`, as a field: every phase reads it, and a property is a Python call.
    thread_id: str
    trace_id: str
    thread: ThreadContext
    history: list[ConversationMessage]
    system_prompt: str
    tool_schemas: list[ToolSchema]
    enabled_tools: frozenset[str]
    llm_params: LLMParams
    max_tool_calls: int
    tool_timeout_s: float
    max_concurrency: int
    state_snapshot: dict[str, Any]
    reevaluate: Reevaluate = "never"
    max_revisions: int = 2
    timings: RunTimings = field(default_factory=RunTimings)


@dataclass(slots=True)
class Retrieved:
    """The passages retrieved for the query (best first), or why retrieval failed.

    A failed retrieval is not a failed run: planning goes on without passages and the run
    ends `partial`.
    """

    documents: list[ScoredDocument]
    error: str | None = None


@dataclass(slots=True)
class Planned:
    output: PlanningOutput
    raw: str | None = None


@dataclass(slots=True)
class Dispatched:
    """The plan's calls started while it streamed and have run: the executor's results, the
    hooks that recorded them, the final plan's calls (`ToolSystem` concludes from these)."""

    results: list[ToolResult]
    hooks: ObservingHooks
    calls: list[ParsedToolCall]


@dataclass(slots=True)
class Executed:
    results: list[ToolResult]
    #: The step number of each result (1-based, as `{step_N_result}` counts); after a
    #: re-evaluation replaced calls, numbers skip the replaced steps. Empty: 1, 2, 3, …
    steps: list[int] = field(default_factory=list)
    #: The call each result answers (empty: those of the plan, by call id).
    calls: list[ParsedToolCall] = field(default_factory=list)


@dataclass(slots=True)
class Resumed:
    """The run continues a paused one: these calls (every step, as stored) are executed,
    not `Planned.output.tool_calls`."""

    calls: list[ParsedToolCall]


@dataclass(slots=True)
class Paused:
    """Execution stopped with calls waiting for approval; what the paused run stores."""

    calls: list[ParsedToolCall]
    replaced_steps: list[int]
    results: dict[int, ToolResult]
    pending: list[PendingApproval]
    decisions: dict[str, Decision]
    #: The approval rules in force (see `PausedRun.require_approval`).
    require_approval: list[str]
    approval_predicate: bool


@dataclass(slots=True)
class Synthesized:
    text: str


@dataclass(slots=True)
class Finalized:
    """The run's answer; beside a `RunFailed`, the answer whose turn could not be saved."""

    message: ConversationMessage


@dataclass(slots=True)
class RunFailed:
    """A phase failed, or the run would have crossed a usage limit (`phase="budget"`);
    `message` is safe to show a user (no secrets, no traceback)."""

    phase: FailedPhase
    message: str
    error: BaseException | None = None
    raw_output: str | None = None
