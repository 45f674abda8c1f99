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
"""

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
