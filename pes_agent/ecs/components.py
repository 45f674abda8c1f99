"""The components of composable ECS agents: plain data, attached per entity to switch systems on.

An entity with an `LLMComponent`, a `ConversationComponent` and a `ToolRegistryComponent` is a
ReAct agent; add a `ToolApprovalComponent`, a `CompactionComponent` or a `PlanComponent` to give
it approval gates, compaction or a step plan. Every piece of state a system keeps — counters,
pending approvals, search trees, snapshots — lives here, never on the system object, so one
system serves many entities and a checkpoint restores everything.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ecs_core import EntityId, ErrorComponent, TerminalComponent
from pes_agent.ecs.messages import ChatMessage
from pes_agent.errors import UsageError
from pes_agent.providers.registry import ProviderSpec
from pes_agent.tools.base import Tool, ToolResult
from pes_agent.tools.calls import ToolCall
from pes_agent.tools.registry import ToolRegistry
from pes_agent.usage import Usage, UsageLimits

__all__ = [
    "AgentIdentityComponent",
    "ApprovalPolicy",
    "CheckpointComponent",
    "CollaborationComponent",
    "CompactionComponent",
    "ConversationComponent",
    "EmbeddingComponent",
    "ErrorComponent",
    "LLMComponent",
    "MessageBusComponent",
    "PendingToolCallsComponent",
    "PermissionComponent",
    "PlanComponent",
    "PlanFailuresComponent",
    "PlanSearchComponent",
    "RAGTriggerComponent",
    "ReasoningFailuresComponent",
    "ReplanningComponent",
    "StreamingComponent",
    "SystemPromptComponent",
    "TerminalComponent",
    "ToolApprovalComponent",
    "ToolRegistryComponent",
    "ToolResultsComponent",
    "UsageLimitsComponent",
    "UsageSpentComponent",
    "UserInputComponent",
    "VectorStoreComponent",
]


@dataclass(slots=True)
class LLMComponent:
    """The entity's model: any form `create_agent(provider=...)` accepts, and its parameters."""

    provider: ProviderSpec
    system_prompt: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None


@dataclass(slots=True)
class ConversationComponent:
    """The entity's conversation, oldest first; `MemorySystem` keeps it to `max_messages`."""

    messages: list[ChatMessage] = field(default_factory=list)
    max_messages: int = 100


@dataclass(slots=True)
class SystemPromptComponent:
    """Sent first in every request, never stored in the conversation; wins over
    `LLMComponent.system_prompt`."""

    content: str


@dataclass(slots=True)
class ToolRegistryComponent:
    """The tools the entity's model may call: a sequence of tools or a `ToolRegistry`."""

    tools: Sequence[Tool] | ToolRegistry


@dataclass(slots=True)
class PendingToolCallsComponent:
    """Calls the model asked for that have not run yet (gates filter them first).

    `approved_by` maps a call id to the gates that cleared it (`"permission"`, `"approval"`):
    `ToolExecutionSystem` runs a call only once every gate component on the entity has cleared
    it, so a call made this tick cannot slip past gates that ran earlier in the tick.
    """

    tool_calls: list[ToolCall] = field(default_factory=list)
    approved_by: dict[str, set[str]] = field(default_factory=dict)


@dataclass(slots=True)
class ToolResultsComponent:
    """The results of the entity's latest tool calls."""

    results: list[ToolResult] = field(default_factory=list)


@dataclass(slots=True)
class AgentIdentityComponent:
    """The thread and trace an entity's model calls and observations are filed under.

    Without it both are ``"entity-<id>"``; a `trace_id` of None is the thread id.
    """

    thread_id: str
    trace_id: str | None = None


@dataclass(slots=True)
class ReasoningFailuresComponent:
    """How many model calls of `ReasoningSystem` failed in a row on this entity (reset by a
    success); at the system's limit the entity ends with `"reasoning_failed"`."""

    consecutive: int = 0


@dataclass(slots=True)
class UsageLimitsComponent:
    """Hold the entity to `limits`: its model calls, their tokens and its tool calls.

    ```python
    world.add_component(agent, UsageLimitsComponent(UsageLimits(total_tokens=20_000, tool_calls=5)))
    ```

    The limits are counted as in PES runs (`UsageLimits`), over the entity's whole life: every
    model call any system makes for it (reasoning, plan steps, replanning, tree search,
    compaction) and every tool call `ToolExecutionSystem` runs for it. What it spent is kept
    in its `UsageSpentComponent`, added at its first model call. Checked before each model
    call (a call with no room is not made), after each answer (its tokens, retried attempts
    included) and before each tool call (a call with no room does not run; it is answered
    with an error). Reaching a limit exactly is fine; the entity that would cross one ends
    with `TerminalComponent("usage_limit")` and an `ErrorComponent` holding the
    `UsageLimitExceeded` (``"total_tokens: 4,120 used, limit 4,000; ..."``); an answer that
    crossed a limit is not applied. Other entities go on.

    A checkpoint restores the limits as they were; it never gives back what was spent.

    Raises:
        UsageError: `limits` is not a `UsageLimits`.
    """

    limits: UsageLimits

    def __post_init__(self) -> None:
        if not isinstance(self.limits, UsageLimits):
            raise UsageError(
                f"UsageLimitsComponent takes a UsageLimits, got {type(self.limits).__name__} "
                f"{self.limits!r}; write e.g. "
                "UsageLimitsComponent(UsageLimits(total_tokens=20_000, tool_calls=5))"
            )


@dataclass(slots=True)
class UsageSpentComponent:
    """What the entity has spent against its `UsageLimitsComponent`, kept across ticks and turns.

    `usage` sums its model calls' tokens (retried attempts included), `requests` counts the
    model calls made (failed ones too), `tool_calls` the tool calls started. The model-call
    helper and `ToolExecutionSystem` add to it; it is never part of a checkpoint and never
    removed by a restore, so a restored entity keeps what it spent.
    """

    usage: Usage = field(default_factory=Usage)
    requests: int = 0
    tool_calls: int = 0


@dataclass(slots=True)
class PlanFailuresComponent:
    """How many plan-step calls of `PlanningSystem` failed in a row on this entity (reset by a
    success); at the system's `max_failures` the entity ends with ``"plan_failed"``."""

    consecutive: int = 0


@dataclass(slots=True)
class StreamingComponent:
    """With `enabled`, `ReasoningSystem` publishes the stream events of each model call."""

    enabled: bool = True


class ApprovalPolicy(StrEnum):
    """What `ToolApprovalSystem` does with each pending call."""

    ALWAYS_APPROVE = "always_approve"
    ALWAYS_DENY = "always_deny"
    REQUIRE_APPROVAL = "require_approval"


@dataclass(slots=True)
class ToolApprovalComponent:
    """Each pending call is approved, denied, or put to a person (`REQUIRE_APPROVAL`), who has
    `timeout_s` seconds to answer before the call counts as denied.

    `waiting` holds the questions asked and not yet answered, by call id: the system's state,
    kept here so one system serves many entities.
    """

    policy: ApprovalPolicy = ApprovalPolicy.REQUIRE_APPROVAL
    timeout_s: float = 30.0
    waiting: dict[str, asyncio.Future[bool]] = field(default_factory=dict, repr=False)
    asked_at: dict[str, float] = field(default_factory=dict, repr=False)


@dataclass(slots=True)
class PermissionComponent:
    """Which tools may run: only `allowed` ones (every tool when None), never `denied` ones."""

    allowed: set[str] | None = None
    denied: set[str] = field(default_factory=set)


@dataclass(slots=True)
class PlanComponent:
    """A step plan that `PlanningSystem` walks one step per tick."""

    steps: list[str] = field(default_factory=list)
    current_step: int = 0
    completed: bool = False


@dataclass(slots=True)
class ReplanningComponent:
    """Revise the remaining steps after every `every_n_steps` completed steps, at most
    `max_revisions` times; the counters are the system's state."""

    every_n_steps: int = 1
    max_revisions: int = 3
    revisions: int = 0
    checked_step: int = 0


@dataclass(slots=True)
class PlanSearchComponent:
    """Monte Carlo tree search over plans for `goal`; `best_plan` is the result.

    `tree` holds the search's nodes (the system's state) so a checkpoint restores a search.
    """

    goal: str
    max_depth: int = 3
    iterations: int = 20
    branching: int = 3
    best_plan: list[str] | None = None
    search_active: bool = True
    iterations_done: int = 0
    tree: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass(slots=True)
class CollaborationComponent:
    """Peers this entity talks to, and messages received (`(sender, text)`) not yet read."""

    peers: list[EntityId] = field(default_factory=list)
    inbox: list[tuple[EntityId, str]] = field(default_factory=list)


@dataclass(slots=True)
class MessageBusComponent:
    """Topics this entity listens to on the world's message bus, and its queue bound."""

    subscriptions: set[str] = field(default_factory=set)
    max_queue: int = 100


@dataclass(slots=True)
class CompactionComponent:
    """Summarise the older part of the conversation once it exceeds `threshold_tokens`,
    keeping the `keep_recent` newest messages as they are.

    After a failed summary call the system waits for the conversation to grow before trying
    again (`failed_at` is its length then), and stops after `max_failures` failures in a row
    (`failures`; a success resets it), so a broken model is not called on every tick.
    """

    threshold_tokens: int
    keep_recent: int = 6
    max_failures: int = 3
    failures: int = 0
    failed_at: int | None = None


@dataclass(slots=True)
class UserInputComponent:
    """Ask a person `prompt`; the answer becomes a user message. `timeout_s=None` waits forever.

    `future` and `asked_at` are the system's state while it waits.
    """

    prompt: str
    timeout_s: float | None = None
    future: asyncio.Future[str] | None = field(default=None, repr=False)
    asked_at: float | None = None


@dataclass(slots=True)
class CheckpointComponent:
    """Snapshot the entity every `every_n_ticks` ticks, keeping the newest `keep`.

    `snapshots` live here but are never part of a snapshot, so snapshots never nest.
    """

    every_n_ticks: int = 1
    keep: int = 10
    ticks: int = 0
    snapshots: list[Any] = field(default_factory=list, repr=False)


@dataclass(slots=True)
class RAGTriggerComponent:
    """A non-empty `query` asks `RAGSystem` for the `top_k` best passages (`retrieved_docs`)."""

    query: str = ""
    top_k: int = 3
    retrieved_docs: list[Any] = field(default_factory=list)


@dataclass(slots=True)
class EmbeddingComponent:
    """The embedding provider `RAGSystem` uses for this entity."""

    provider: Any


@dataclass(slots=True)
class VectorStoreComponent:
    """The vector store `RAGSystem` searches for this entity."""

    store: Any
