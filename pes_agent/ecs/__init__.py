"""Composable ECS agents: the reference framework's agent systems on `ecs_core.World`.

An entity with an `LLMComponent`, a `ConversationComponent` and a `ToolRegistryComponent` is a
ReAct agent; adding components switches more systems on for that entity alone.

```python
from ecs_core import Runner, World
from pes_agent.ecs import (ConversationComponent, ChatMessage, LLMComponent, ReasoningSystem,
                           ToolExecutionSystem, ToolRegistryComponent, ErrorHandlingSystem)

world = World()
world.register_system(ReasoningSystem(), priority=0)
world.register_system(ToolExecutionSystem(), priority=5)
world.register_system(ErrorHandlingSystem(), priority=99)
agent = world.create_entity(
    LLMComponent("openai:gpt-4o-mini"),
    ConversationComponent([ChatMessage("user", "What is 12 * 7?")]),
    ToolRegistryComponent([multiply]),
)
await Runner().run(world, until=agent, max_ticks=20)
await close_services(world)       # closes the SDK clients the world's provider pool opened
```

| system [priority]         | switched on by            | does                                  |
|---------------------------|---------------------------|---------------------------------------|
| RAGSystem [-10]           | RAGTriggerComponent.query | passages before the last user message |
| UserInputSystem [-10]     | UserInputComponent        | asks a person; answer -> user message |
| PermissionSystem [-5]     | PermissionComponent       | refuses calls to tools not allowed    |
| ToolApprovalSystem [-5]   | ToolApprovalComponent     | approves, denies or asks a person     |
| ReasoningSystem [0]       | LLMComponent              | one model turn with native tools      |
| PlanningSystem [0]        | PlanComponent             | one "Step k/n" answer per plan step   |
| TreeSearchSystem [0]      | PlanSearchComponent       | MCTS over plans -> best_plan          |
| TerminalCleanupSystem [1] | TerminalComponent         | lifts chosen ends: chat loops go on   |
| ToolExecutionSystem [5]   | PendingToolCallsComponent | runs the calls every gate cleared     |
| CollaborationSystem [5]   | CollaborationComponent    | inbox -> "From <sender>: ..." turns   |
| MessageBusSystem [5]      | MessageBusComponent       | topics, bounded queues, requests      |
| ReplanningSystem [7]      | ReplanningComponent       | revises a plan's remaining steps      |
| MemorySystem [10]         | ConversationComponent     | keeps max_messages, tool pairs whole  |
| CheckpointSystem [15]     | CheckpointComponent       | snapshots; `checkpoints.restore/undo` |
| CompactionSystem [20]     | CompactionComponent       | folds older history into a summary    |
| ErrorHandlingSystem [99]  | ErrorComponent            | logs, records, publishes, removes it  |

Register each at its priority (`world.register_system(system, priority)`); systems keep no
per-entity state (it lives in components), so one instance serves every entity.

Providers and observations: `LLMComponent.provider` takes whatever `create_agent(provider=...)`
takes; names and `ProviderConfig`s resolve through the world's one `ProviderPool`, kept with the
world's observation recorder in an `AgentServicesComponent` (`attach_services`, `close_services`).
With observations attached, model calls, tool calls and errors are recorded as in PES runs
(LLM_STREAM_*, THOUGHTS, TOOL_CALL, TOOL_EXECUTION, ERROR), per entity under its
`AgentIdentityComponent` thread (default ``"entity-<id>"``).

Budgets: a `UsageLimitsComponent(UsageLimits(...))` holds one entity to the limits PES runs
have (model calls, input/output/total tokens, tool calls), whichever system calls the model
for it; what it spent is kept in its `UsageSpentComponent` across turns and checkpoint
restores. An entity that would cross a limit ends with `TerminalComponent("usage_limit")` (which
`TerminalCleanupSystem` leaves in place unless told) and an `ErrorComponent` naming the limit
and the figures; the other entities go on.

Gates cannot be bypassed: a tool call runs only once every gate component on its entity has
cleared it, whatever the tick order; every refused call is still answered with a tool message.
"""

from pes_agent.ecs import checkpoints
from pes_agent.ecs.checkpoints import CheckpointSystem
from pes_agent.ecs.collaboration import CollaborationSystem, message_peer_tool, send_message
from pes_agent.ecs.compaction import CompactionSystem
from pes_agent.ecs.components import (
    AgentIdentityComponent,
    ApprovalPolicy,
    CheckpointComponent,
    CollaborationComponent,
    CompactionComponent,
    ConversationComponent,
    EmbeddingComponent,
    ErrorComponent,
    LLMComponent,
    MessageBusComponent,
    PendingToolCallsComponent,
    PermissionComponent,
    PlanComponent,
    PlanSearchComponent,
    RAGTriggerComponent,
    ReasoningFailuresComponent,
    ReplanningComponent,
    StreamingComponent,
    SystemPromptComponent,
    TerminalComponent,
    ToolApprovalComponent,
    ToolRegistryComponent,
    ToolResultsComponent,
    UsageLimitsComponent,
    UsageSpentComponent,
    UserInputComponent,
    VectorStoreComponent,
)
from pes_agent.ecs.events import (
    BusMessageKind,
    CheckpointCreatedEvent,
    CheckpointRestoredEvent,
    CompactionCompleteEvent,
    ConversationTruncatedEvent,
    ErrorOccurredEvent,
    MCTSNodeScoredEvent,
    MessageBusDeliveredEvent,
    MessageBusPublishedEvent,
    MessageBusResponseEvent,
    MessageBusTimeoutEvent,
    MessageDeliveredEvent,
    PlanRevisedEvent,
    PlanStepCompletedEvent,
    RAGRetrievalCompletedEvent,
    StreamContentDeltaEvent,
    StreamContentStartEvent,
    StreamEndEvent,
    StreamReasoningDeltaEvent,
    StreamReasoningEndEvent,
    StreamStartEvent,
    ToolApprovalRequestedEvent,
    ToolApprovedEvent,
    ToolDeniedEvent,
    UserInputRequestedEvent,
)
from pes_agent.ecs.gates import PermissionSystem, ToolApprovalSystem
from pes_agent.ecs.lifecycle import ErrorHandlingSystem, TerminalCleanupSystem
from pes_agent.ecs.memory import MemorySystem
from pes_agent.ecs.message_bus import (
    BusMessage,
    MessageBus,
    MessageBusStateComponent,
    MessageBusSystem,
    message_bus_tools,
)
from pes_agent.ecs.messages import ChatMessage, ChatRole, ToolCall
from pes_agent.ecs.planning import PlanFailuresComponent, PlanningSystem
from pes_agent.ecs.rag import RAGSystem
from pes_agent.ecs.reasoning import ReasoningSystem
from pes_agent.ecs.replanning import ReplanningSystem
from pes_agent.ecs.services import (
    AgentServicesComponent,
    attach_services,
    close_services,
    services_of,
)
from pes_agent.ecs.tool_execution import ToolExecutionSystem
from pes_agent.ecs.tree_search import TreeSearchSystem, query_with_plan, seed_plan
from pes_agent.ecs.user_input import UserInputSystem

__all__ = [
    "AgentIdentityComponent",
    "AgentServicesComponent",
    "ApprovalPolicy",
    "BusMessage",
    "BusMessageKind",
    "ChatMessage",
    "ChatRole",
    "CheckpointComponent",
    "CheckpointCreatedEvent",
    "CheckpointRestoredEvent",
    "CheckpointSystem",
    "CollaborationComponent",
    "CollaborationSystem",
    "CompactionCompleteEvent",
    "CompactionComponent",
    "CompactionSystem",
    "ConversationComponent",
    "ConversationTruncatedEvent",
    "EmbeddingComponent",
    "ErrorComponent",
    "ErrorHandlingSystem",
    "ErrorOccurredEvent",
    "LLMComponent",
    "MCTSNodeScoredEvent",
    "MemorySystem",
    "MessageBus",
    "MessageBusComponent",
    "MessageBusDeliveredEvent",
    "MessageBusPublishedEvent",
    "MessageBusResponseEvent",
    "MessageBusStateComponent",
    "MessageBusSystem",
    "MessageBusTimeoutEvent",
    "MessageDeliveredEvent",
    "PendingToolCallsComponent",
    "PermissionComponent",
    "PermissionSystem",
    "PlanComponent",
    "PlanFailuresComponent",
    "PlanRevisedEvent",
    "PlanSearchComponent",
    "PlanStepCompletedEvent",
    "PlanningSystem",
    "RAGRetrievalCompletedEvent",
    "RAGSystem",
    "RAGTriggerComponent",
    "ReasoningFailuresComponent",
    "ReasoningSystem",
    "ReplanningComponent",
    "ReplanningSystem",
    "StreamContentDeltaEvent",
    "StreamContentStartEvent",
    "StreamEndEvent",
    "StreamReasoningDeltaEvent",
    "StreamReasoningEndEvent",
    "StreamStartEvent",
    "StreamingComponent",
    "SystemPromptComponent",
    "TerminalCleanupSystem",
    "TerminalComponent",
    "ToolApprovalComponent",
    "ToolApprovalRequestedEvent",
    "ToolApprovalSystem",
    "ToolApprovedEvent",
    "ToolCall",
    "ToolDeniedEvent",
    "ToolExecutionSystem",
    "ToolRegistryComponent",
    "ToolResultsComponent",
    "TreeSearchSystem",
    "UsageLimitsComponent",
    "UsageSpentComponent",
    "UserInputComponent",
    "UserInputRequestedEvent",
    "UserInputSystem",
    "VectorStoreComponent",
    "attach_services",
    "checkpoints",
    "close_services",
    "message_bus_tools",
    "message_peer_tool",
    "query_with_plan",
    "seed_plan",
    "send_message",
    "services_of",
]
