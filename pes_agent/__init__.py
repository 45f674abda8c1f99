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
        UsageLimitExceeded,
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
    from pes_agent.providers.fallback import FallbackProvider
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
    from pes_agent.threads.ids import THREAD_ID_MAX_LENGTH, check_thread_id, thread_id_problem
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
    from pes_agent.usage import Usage, UsageLimits

__version__ = "0.1.0"

__all__ = [
    "LANGUAGE_STEP",
    "THREAD_ID_MAX_LENGTH",
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
    "FallbackProvider",
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
    "UsageLimitExceeded",
    "UsageLimits",
    "VectorStore",
    "__version__",
    "check_thread_id",
    "configure_logging",
    "create_agent",
    "open_storage",
    "store_documents",
    "thread_id_problem",
    "tool",
]

# Where each public name lives; the same as the imports above, which type checkers read.
_HOMES = {
    "Approve": "pes_agent.approvals",
    "Deny": "pes_agent.approvals",
    "PausedRun": "pes_agent.approvals",
    "PendingApproval": "pes_agent.approvals",
    "AgentState": "pes_agent.config",
    "LLMParams": "pes_agent.config",
    "PlanningMode": "pes_agent.config",
    "ProviderConfig": "pes_agent.config",
    "Reevaluate": "pes_agent.config",
    "RunOptions": "pes_agent.config",
    "StateSaving": "pes_agent.config",
    "ThreadConfig": "pes_agent.config",
    "AgentCore": "pes_agent.core",
    "ConfigurationError": "pes_agent.errors",
    "NotAwaitingApprovalError": "pes_agent.errors",
    "PESAgentError": "pes_agent.errors",
    "PlanParseError": "pes_agent.errors",
    "ProviderError": "pes_agent.errors",
    "RunError": "pes_agent.errors",
    "ScriptExhaustedError": "pes_agent.errors",
    "StateConflictError": "pes_agent.errors",
    "StorageError": "pes_agent.errors",
    "ThreadAwaitingApprovalError": "pes_agent.errors",
    "ToolExecutionError": "pes_agent.errors",
    "ToolSourceError": "pes_agent.errors",
    "UsageError": "pes_agent.errors",
    "UsageLimitExceeded": "pes_agent.errors",
    "ConcurrentExecutor": "pes_agent.execution.executors",
    "SequentialExecutor": "pes_agent.execution.executors",
    "PlanProgress": "pes_agent.execution.revision",
    "PlanRevision": "pes_agent.execution.revision",
    "create_agent": "pes_agent.factory",
    "configure_logging": "pes_agent.observing.logs",
    "ObservationManager": "pes_agent.observing.manager",
    "StreamEvent": "pes_agent.observing.streams",
    "StreamSocket": "pes_agent.observing.streams",
    "Observation": "pes_agent.observing.types",
    "ObservationType": "pes_agent.observing.types",
    "OutputParser": "pes_agent.planning.parser",
    "LANGUAGE_STEP": "pes_agent.planning.plan",
    "ParsedToolCall": "pes_agent.planning.plan",
    "PlanningOutput": "pes_agent.planning.plan",
    "LLMPlanner": "pes_agent.planning.planner",
    "LLMPlanReviser": "pes_agent.planning.reviser",
    "ExecutionContext": "pes_agent.protocols",
    "Executor": "pes_agent.protocols",
    "LLMResponse": "pes_agent.protocols",
    "ModelCaller": "pes_agent.protocols",
    "ObservationRecorder": "pes_agent.protocols",
    "Planner": "pes_agent.protocols",
    "PlanningContext": "pes_agent.protocols",
    "PlanReviser": "pes_agent.protocols",
    "Reevaluation": "pes_agent.protocols",
    "SynthesisContext": "pes_agent.protocols",
    "Synthesizer": "pes_agent.protocols",
    "FallbackProvider": "pes_agent.providers.fallback",
    "LLMProvider": "pes_agent.providers.base",
    "LLMRequest": "pes_agent.providers.base",
    "PromptMessage": "pes_agent.providers.base",
    "RetryPolicy": "pes_agent.providers.retry",
    "DimensionMismatchError": "pes_agent.retrieval",
    "EmbeddingProvider": "pes_agent.retrieval",
    "HashingEmbeddings": "pes_agent.retrieval",
    "InMemoryVectorStore": "pes_agent.retrieval",
    "LocalEmbeddings": "pes_agent.retrieval",
    "OpenAIEmbeddings": "pes_agent.retrieval",
    "PostgresVectorStore": "pes_agent.retrieval",
    "Retriever": "pes_agent.retrieval",
    "ScoredDocument": "pes_agent.retrieval",
    "SQLiteVectorStore": "pes_agent.retrieval",
    "VectorStore": "pes_agent.retrieval",
    "store_documents": "pes_agent.retrieval",
    "AgentFinalResponse": "pes_agent.run",
    "AgentProps": "pes_agent.run",
    "ExecutionMetadata": "pes_agent.run",
    "PhaseDurations": "pes_agent.run",
    "RunStatus": "pes_agent.run",
    "InMemoryStorage": "pes_agent.storage",
    "SQLiteStorage": "pes_agent.storage",
    "Storage": "pes_agent.storage",
    "open_storage": "pes_agent.storage",
    "LLMSynthesizer": "pes_agent.synthesis.synthesizer",
    "ConversationManager": "pes_agent.threads.conversation",
    "THREAD_ID_MAX_LENGTH": "pes_agent.threads.ids",
    "check_thread_id": "pes_agent.threads.ids",
    "thread_id_problem": "pes_agent.threads.ids",
    "ConversationMessage": "pes_agent.threads.messages",
    "MessageRole": "pes_agent.threads.messages",
    "StateManager": "pes_agent.threads.state",
    "ThreadContext": "pes_agent.threads.state",
    "FunctionTool": "pes_agent.tools",
    "Tool": "pes_agent.tools",
    "ToolContext": "pes_agent.tools",
    "ToolRegistry": "pes_agent.tools",
    "ToolResult": "pes_agent.tools",
    "ToolSchema": "pes_agent.tools",
    "tool": "pes_agent.tools",
    "Usage": "pes_agent.usage",
    "UsageLimits": "pes_agent.usage",
}

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _HOMES)
