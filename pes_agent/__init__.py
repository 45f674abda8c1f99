"""pes-agent: LLM agents that plan, execute tools as a concurrent DAG, then synthesize.

```python
from pes_agent import AgentProps, create_agent, tool

@tool
def add(a: int, b: int) -> int:
    \"\"\"Add two integers.\"\"\"
    return a + b

agent = create_agent(provider="openai:gpt-4o-mini", tools=[add])
result = await agent.process(AgentProps("What is 12 + 30?", "thread-1"))
print(result.response.content, result.metadata.status)
```

The public names are imported on first use (`pes_agent._lazy`), so `import pes_agent` (and
`pes-agent --help`) loads no model SDK, pydantic or structlog until a name that needs them is
used.
"""

from typing import TYPE_CHECKING

from pes_agent._lazy import lazy_exports

if TYPE_CHECKING:
    from pes_agent.approvals import Approve, Deny, PausedRun, PendingApproval
    from pes_agent.config import (
        AgentState,
        LLMParams,
        PlanningMode,
        ProviderConfig,
        Reevaluate,
        RunOptions,
        StateSaving,
        ThreadConfig,
    )
    from pes_agent.core import AgentCore
    from pes_agent.errors import (
        ConfigurationError,
        NotAwaitingApprovalError,
        PESAgentError,
        PlanParseError,
        ProviderError,
        RunError,
        ScriptExhaustedError,
        StateConflictError,
        StorageError,
        ThreadAwaitingApprovalError,
        ToolExecutionError,
        ToolSourceError,
        UsageError,
    )
    from pes_agent.execution.executors import ConcurrentExecutor, SequentialExecutor
    from pes_agent.execution.revision import PlanProgress, PlanRevision
    from pes_agent.factory import create_agent
    from pes_agent.observing.logs import configure_logging
    from pes_agent.observing.manager import ObservationManager
    from pes_agent.observing.streams import StreamEvent, StreamSocket
    from pes_agent.observing.types import Observation, ObservationType
    from pes_agent.planning.parser import OutputParser
    from pes_agent.planning.plan import LANGUAGE_STEP, ParsedToolCall, PlanningOutput
    from pes_agent.planning.planner import LLMPlanner
    from pes_agent.planning.reviser import LLMPlanReviser
    from pes_agent.protocols import (
        ExecutionContext,
        Executor,
        LLMResponse,
        ModelCaller,
        ObservationRecorder,
        Planner,
        PlanningContext,
        PlanReviser,
        Reevaluation,
        SynthesisContext,
        Synthesizer,
    )
    from pes_agent.providers.base import LLMProvider, LLMRequest, PromptMessage
    from pes_agent.providers.retry import RetryPolicy
    from pes_agent.retrieval import (
        DimensionMismatchError,
        EmbeddingProvider,
        HashingEmbeddings,
        InMemoryVectorStore,
        LocalEmbeddings,
        OpenAIEmbeddings,
        PostgresVectorStore,
        Retriever,
        ScoredDocument,
        SQLiteVectorStore,
        VectorStore,
        store_documents,
    )
    from pes_agent.run import (
        AgentFinalResponse,
        AgentProps,
        ExecutionMetadata,
        PhaseDurations,
        RunStatus,
    )
    from pes_agent.storage import InMemoryStorage, SQLiteStorage, Storage, open_storage
    from pes_agent.synthesis.synthesizer import LLMSynthesizer
    from pes_agent.threads.conversation import ConversationManager
    from pes_agent.threads.messages import ConversationMessage, MessageRole
    from pes_agent.threads.state import StateManager, ThreadContext
    from pes_agent.tools import (
        FunctionTool,
        Tool,
        ToolContext,
        ToolRegistry,
        ToolResult,
        ToolSchema,
        tool,
    )
    from pes_agent.usage import Usage

__version__ = "0.1.0"

__all__ = [
    "LANGUAGE_STEP",
    "AgentCore",
    "AgentFinalResponse",
    "AgentProps",
    "AgentState",
    "Approve",
    "ConcurrentExecutor",
    "ConfigurationError",
    "ConversationManager",
    "ConversationMessage",
    "Deny",
    "DimensionMismatchError",
    "EmbeddingProvider",
    "ExecutionContext",
    "ExecutionMetadata",
    "Executor",
    "FunctionTool",
    "HashingEmbeddings",
    "InMemoryStorage",
    "InMemoryVectorStore",
    "LLMParams",
    "LLMPlanReviser",
    "LLMPlanner",
    "LLMProvider",
    "LLMRequest",
    "LLMResponse",
    "LLMSynthesizer",
    "LocalEmbeddings",
    "MessageRole",
    "ModelCaller",
    "NotAwaitingApprovalError",
    "Observation",
    "ObservationManager",
    "ObservationRecorder",
    "ObservationType",
    "OpenAIEmbeddings",
    "OutputParser",
    "PESAgentError",
    "ParsedToolCall",
    "PausedRun",
    "PendingApproval",
    "PhaseDurations",
    "PlanParseError",
    "PlanProgress",
    "PlanReviser",
    "PlanRevision",
    "Planner",
    "PlanningContext",
    "PlanningMode",
    "PlanningOutput",
    "PostgresVectorStore",
    "PromptMessage",
    "ProviderConfig",
    "ProviderError",
    "Reevaluate",
    "Reevaluation",
    "Retriever",
    "RetryPolicy",
    "RunError",
    "RunOptions",
    "RunStatus",
    "SQLiteStorage",
    "SQLiteVectorStore",
    "ScoredDocument",
    "ScriptExhaustedError",
    "SequentialExecutor",
    "StateConflictError",
    "StateManager",
    "StateSaving",
    "Storage",
    "StorageError",
    "StreamEvent",
    "StreamSocket",
    "SynthesisContext",
    "Synthesizer",
    "ThreadAwaitingApprovalError",
    "ThreadConfig",
    "ThreadContext",
    "Tool",
    "ToolContext",
    "ToolExecutionError",
    "ToolRegistry",
    "ToolResult",
    "ToolSchema",
    "ToolSourceError",
    "Usage",
    "UsageError",
    "VectorStore",
    "__version__",
    "configure_logging",
    "create_agent",
    "open_storage",
    "store_documents",
    "tool",
]

# Where each public name lives; the same as the imports above, which type checkers read.
_HOMES: dict[str, tuple[str, ...]] = {
    "pes_agent.approvals": ("Approve", "Deny", "PausedRun", "PendingApproval"),
    "pes_agent.config": (
        "AgentState",
        "LLMParams",
        "PlanningMode",
        "ProviderConfig",
        "Reevaluate",
        "RunOptions",
        "StateSaving",
        "ThreadConfig",
    ),
    "pes_agent.core": ("AgentCore",),
    "pes_agent.errors": (
        "ConfigurationError",
        "NotAwaitingApprovalError",
        "PESAgentError",
        "PlanParseError",
        "ProviderError",
        "RunError",
        "ScriptExhaustedError",
        "StateConflictError",
        "StorageError",
        "ThreadAwaitingApprovalError",
        "ToolExecutionError",
        "ToolSourceError",
        "UsageError",
    ),
    "pes_agent.execution.executors": ("ConcurrentExecutor", "SequentialExecutor"),
    "pes_agent.execution.revision": ("PlanProgress", "PlanRevision"),
    "pes_agent.factory": ("create_agent",),
    "pes_agent.observing.logs": ("configure_logging",),
    "pes_agent.observing.manager": ("ObservationManager",),
    "pes_agent.observing.streams": ("StreamEvent", "StreamSocket"),
    "pes_agent.observing.types": ("Observation", "ObservationType"),
    "pes_agent.planning.parser": ("OutputParser",),
    "pes_agent.planning.plan": ("LANGUAGE_STEP", "ParsedToolCall", "PlanningOutput"),
    "pes_agent.planning.planner": ("LLMPlanner",),
    "pes_agent.planning.reviser": ("LLMPlanReviser",),
    "pes_agent.protocols": (
        "ExecutionContext",
        "Executor",
        "LLMResponse",
        "ModelCaller",
        "ObservationRecorder",
        "Planner",
        "PlanningContext",
        "PlanReviser",
        "Reevaluation",
        "SynthesisContext",
        "Synthesizer",
    ),
    "pes_agent.providers.base": ("LLMProvider", "LLMRequest", "PromptMessage"),
    "pes_agent.providers.retry": ("RetryPolicy",),
    "pes_agent.retrieval": (
        "DimensionMismatchError",
        "EmbeddingProvider",
        "HashingEmbeddings",
        "InMemoryVectorStore",
        "LocalEmbeddings",
        "OpenAIEmbeddings",
        "PostgresVectorStore",
        "Retriever",
        "ScoredDocument",
        "SQLiteVectorStore",
        "VectorStore",
        "store_documents",
    ),
    "pes_agent.run": (
        "AgentFinalResponse",
        "AgentProps",
        "ExecutionMetadata",
        "PhaseDurations",
        "RunStatus",
    ),
    "pes_agent.storage": ("InMemoryStorage", "SQLiteStorage", "Storage", "open_storage"),
    "pes_agent.synthesis.synthesizer": ("LLMSynthesizer",),
    "pes_agent.threads.conversation": ("ConversationManager",),
    "pes_agent.threads.messages": ("ConversationMessage", "MessageRole"),
    "pes_agent.threads.state": ("StateManager", "ThreadContext"),
    "pes_agent.tools": (
        "FunctionTool",
        "Tool",
        "ToolContext",
        "ToolRegistry",
        "ToolResult",
        "ToolSchema",
        "tool",
    ),
    "pes_agent.usage": ("Usage",),
}

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _HOMES)
