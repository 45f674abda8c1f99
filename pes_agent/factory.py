"""`create_agent`: the one call that assembles an agent from plain arguments."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pes_agent._closing import AsyncCloseable
from pes_agent.approvals.gate import ApprovalHandler, ApprovalRule, check_approval_rule
from pes_agent.config import (
    DEFAULT_SYSTEM_PROMPT,
    LLMParams,
    PlanningMode,
    ProviderConfig,
    Reevaluate,
    StateSaving,
)
from pes_agent.core import AgentCore
from pes_agent.durable.effects import DurableEngine
from pes_agent.errors import UsageError
from pes_agent.execution.executors import ConcurrentExecutor
from pes_agent.observing.manager import ObservationManager
from pes_agent.pes.settings import AgentDefaults
from pes_agent.planning.planner import LLMPlanner
from pes_agent.planning.structured import (
    check_planning_mode,
    structured_mode_error,
    structured_output_of,
)
from pes_agent.protocols import Executor, ObservationRecorder, Planner, Synthesizer
from pes_agent.providers.base import LLMProvider
from pes_agent.providers.fallback import resolve_provider
from pes_agent.providers.registry import DEFAULT_POOL_SIZE, ProviderPool
from pes_agent.providers.retry import RetryPolicy
from pes_agent.retrieval.retriever import Retriever
from pes_agent.storage import open_storage
from pes_agent.storage.base import Storage
from pes_agent.synthesis.synthesizer import LLMSynthesizer
from pes_agent.tools.base import Tool
from pes_agent.tools.registry import ToolRegistry
from pes_agent.tools.sources import ToolSource
from pes_agent.tools.threads import DEFAULT_SYNC_TOOL_THREADS
from pes_agent.usage import UsageLimits

__all__ = ["create_agent"]


def _check_positive(name: str, value: float, example: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise UsageError(f"{name} must be a positive number, got {value!r}; e.g. {name}={example}")


def _check_protocol(name: str, value: object, method: str, protocol: str) -> None:
    if value is not None and not callable(getattr(value, method, None)):
        raise UsageError(
            f"{name} must implement the {protocol} protocol (an async {method}() method); "
            f"got {type(value).__name__}"
        )


def create_agent(
    *,
    provider: str | ProviderConfig | LLMProvider | Sequence[str | ProviderConfig | LLMProvider],
    tools: Iterable[Tool | ToolSource | Callable[..., Any]] = (),
    storage: str | Storage = "memory",
    system_prompt: str | None = None,
    history_limit: int = 20,
    planner: Planner | None = None,
    executor: Executor | None = None,
    synthesizer: Synthesizer | None = None,
    observation_manager: ObservationRecorder | None = None,
    state_saving: StateSaving = "explicit",
    max_concurrency: int = 8,
    tool_timeout_s: float = 30.0,
    max_tool_calls: int = 32,
    temperature: float | None = None,
    max_tokens: int | None = None,
    retry_policy: RetryPolicy | None = None,
    sync_tool_threads: int = DEFAULT_SYNC_TOOL_THREADS,
    max_providers: int = DEFAULT_POOL_SIZE,
    planning_mode: PlanningMode = "auto",
    reevaluate: Reevaluate = "never",
    max_revisions: int = 2,
    retriever: Retriever | None = None,
    require_approval: ApprovalRule | None = None,
    approval_handler: ApprovalHandler | None = None,
    approval_timeout_s: float | None = None,
    usage_limits: UsageLimits | None = None,
    engine: DurableEngine | None = None,
) -> AgentCore:
    """Build an agent: `create_agent(provider="openai:gpt-4o-mini", tools=[get_weather])`.

    Every argument is checked here, so a mistake fails now with the fix in the message.
    `aclose()` (or `async with agent`) closes only what is built here from a string or a
    config; a provider or storage object passed in stays open, so several agents may share it
    (close it yourself).

    Args:
        provider: `"openai:MODEL"`, `"anthropic:MODEL"`, `"ollama:MODEL"`, a `ProviderConfig`,
            or any object implementing the provider protocol (such as
            `testing.ScriptedProvider`); or a list of them, tried in order: when one fails
            after its retries (an outage, a 429 beyond them, a prompt too long for it), the
            next serves the same call (a `FallbackProvider`; build one yourself to choose
            `fall_back_on`).
        tools: `@tool` functions, plain typed functions with docstrings, tool objects, or
            tool sources such as `pes_agent.mcp.MCPServer` (opened in `async with agent` or
            before the first plan; `aclose()` closes the connections it opened, see
            `pes_agent.tools.sources`).
        storage: `"memory"`, `"sqlite:///PATH"`, `"postgresql://..."` or a storage object.
        system_prompt: The system prompt of the planning and synthesis calls; None for the
            default one.
        history_limit: How many earlier messages of the thread a run reads (0 for none).
        planner: Replaces the default `LLMPlanner`.
        executor: Replaces the default `ConcurrentExecutor`.
        synthesizer: Replaces the default `LLMSynthesizer`.
        observation_manager: Records the run's observations; by default an
            `ObservationManager` on `storage`.
        state_saving: `"explicit"` (a thread's `AgentState` changes only when you save it,
            e.g. `agent.state.set_agent_state`) or `"implicit"` (tools may change
            `context.state.data` and the run saves it when it finishes).
        max_concurrency: How many tool calls of a plan run at once.
        tool_timeout_s: How long one tool call may take before it fails.
        max_tool_calls: The most tool calls a plan may run; the calls past it fail with an
            error result.
        temperature: The model's sampling temperature; None for the provider's default.
        max_tokens: The most tokens a model answer may hold; None for the provider's default.
        retry_policy: Tunes the one retry layer of the provider clients (attempts, backoff,
            Retry-After cap).
        sync_tool_threads: Bounds the agent's own threads for sync tools (a hung tool holds
            one; once all are held, new sync calls fail fast with an error result).
        max_providers: Bounds the provider clients kept for per-thread and per-call provider
            overrides (least recently used ones close once their calls end).
        planning_mode: How the default planner asks for the plan: `"structured"` through the
            provider's structured output (OpenAI `json_schema`, Anthropic a forced
            `submit_plan` tool), `"text"` through the prompt alone, `"auto"` structured where
            the provider supports it and text otherwise, or once its server refuses the option
            (see `pes_agent.planning.structured`).
        reevaluate: Has the model re-evaluate the calls not yet run while the plan executes:
            `"on_failure"` after a wave in which a call failed, `"each_wave"` after every
            wave (see `pes_agent.execution.revision`; `"never"`, the default, runs the DAG
            untouched).
        max_revisions: The most revisions `reevaluate` makes in a run.
        retriever: A `pes_agent.retrieval.Retriever` searched for each query before planning;
            its passages reach the planning and synthesis prompts as quoted data, a RETRIEVAL
            observation records them, and a failing retriever makes the run `partial`.
        require_approval: Tool names, or `predicate(call, context) -> bool`, gating calls on
            top of `@tool(requires_approval=True)`: a gated call runs only once approved.
        approval_handler: `async (PendingApproval) -> bool` deciding gated calls in process;
            without it the run pauses (`status="awaiting_approval"`) until
            `agent.resume(...)`.
        approval_timeout_s: Makes pending calls expire (denied) when resumed later than that.
        usage_limits: The most a run may spend (model calls, tokens, tool calls): a run that
            would cross a limit stops with `status="error"` and nothing saved. A thread's
            `ThreadConfig.usage_limits` and a call's `RunOptions.usage_limits` can lower
            these limits, never raise them.
        engine: A durable engine (`pes_agent.durable.dbos.DBOSEngine`): `process()` submits
            each run to it, and a worker (`async with engine.worker(agent)`, in this or
            another process) runs it as a workflow whose steps survive the worker. None runs
            every run in this process.

    Returns:
        The agent, ready for `await agent.process(AgentProps(query, thread_id))`.

    Raises:
        UsageError: An argument is wrong (the message says the fix); a `ConfigurationError`
            when a provider, storage or tool cannot be built from it (an unknown provider
            name, a missing API key, a storage URL no backend reads).
    """
    if state_saving not in ("explicit", "implicit"):
        raise UsageError(f"state_saving must be 'explicit' or 'implicit', got {state_saving!r}")
    if isinstance(history_limit, bool) or not isinstance(history_limit, int) or history_limit < 0:
        raise UsageError(f"history_limit must be an int >= 0, got {history_limit!r}")
    if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int):
        raise UsageError(f"max_concurrency must be an int >= 1, got {max_concurrency!r}")
    _check_positive("max_concurrency", max_concurrency, "8")
    _check_positive("tool_timeout_s", tool_timeout_s, "30.0")
    if isinstance(max_tool_calls, bool) or not isinstance(max_tool_calls, int):
        raise UsageError(f"max_tool_calls must be an int >= 1, got {max_tool_calls!r}")
    _check_positive("max_tool_calls", max_tool_calls, "32")
    for name, value, default in (
        ("sync_tool_threads", sync_tool_threads, DEFAULT_SYNC_TOOL_THREADS),
        ("max_providers", max_providers, DEFAULT_POOL_SIZE),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageError(f"{name} must be an int >= 1 (default {default}), got {value!r}")
    _check_protocol("planner", planner, "plan", "Planner")
    check_planning_mode(planning_mode)
    if planner is not None and planning_mode != "auto":
        raise UsageError(
            "planning_mode configures the default planner; with planner=... leave it out, or "
            f"pass LLMPlanner(planning_mode={planning_mode!r}) as the planner"
        )
    if reevaluate not in ("never", "on_failure", "each_wave"):
        raise UsageError(
            f"reevaluate must be 'never', 'on_failure' or 'each_wave', got {reevaluate!r}"
        )
    if isinstance(max_revisions, bool) or not isinstance(max_revisions, int) or max_revisions < 0:
        raise UsageError(f"max_revisions must be an int >= 0 (default 2), got {max_revisions!r}")
    _check_protocol("executor", executor, "execute", "Executor")
    if retriever is not None and not callable(getattr(retriever, "retrieve", None)):
        raise UsageError(
            "retriever must be a Retriever (with an async retrieve(query) method), e.g. "
            "retriever=Retriever(HashingEmbeddings(256), InMemoryVectorStore(256)); "
            f"got {type(retriever).__name__}"
        )
    approval_names, approval_predicate = check_approval_rule(require_approval, "require_approval")
    if approval_handler is not None and not callable(approval_handler):
        raise UsageError(
            "approval_handler must be an async function (PendingApproval) -> bool, got "
            f"{type(approval_handler).__name__}"
        )
    if approval_timeout_s is not None:
        _check_positive("approval_timeout_s", approval_timeout_s, "3600")
    if usage_limits is not None and not isinstance(usage_limits, UsageLimits):
        raise UsageError(
            "usage_limits must be a UsageLimits, e.g. usage_limits=UsageLimits("
            f"total_tokens=20_000, tool_calls=10); got {type(usage_limits).__name__}"
        )
    _check_protocol("synthesizer", synthesizer, "synthesize", "Synthesizer")
    if system_prompt is not None and not isinstance(system_prompt, str):
        raise UsageError(f"system_prompt must be a str, got {type(system_prompt).__name__}")
    if isinstance(tools, str | bytes):
        raise UsageError("tools must be a list of tools, e.g. tools=[get_weather]")

    registry = ToolRegistry(sync_threads=sync_tool_threads)
    for item in tools:
        registry.add(item)

    # The agent closes only what it builds here; objects passed in belong to the caller, who
    # may share them with other agents.
    if engine is not None and not isinstance(engine, DurableEngine):
        raise UsageError(
            "engine must be a durable engine such as pes_agent.durable.dbos.DBOSEngine(...) "
            f"(with run() and worker()); got {type(engine).__name__}"
        )
    providers = ProviderPool(retry_policy=retry_policy, max_size=max_providers)
    # The registry's pool of sync-tool threads too: closing it never waits for hung tools.
    owned: list[AsyncCloseable] = [providers, registry]
    # Not from the pool: the default provider serves every run until aclose(), so nothing
    # the pool does with the clients it hands out per thread may close it.
    default_provider, built = resolve_provider(provider, retry_policy=retry_policy)
    if built:
        owned.append(default_provider)

    if planning_mode == "structured" and structured_output_of(default_provider) is None:
        raise structured_mode_error(default_provider)

    store = open_storage(storage)
    if store is not storage:
        owned.append(store)
    observations = observation_manager or ObservationManager(store)
    return AgentCore(
        engine=engine,
        provider=default_provider,
        providers=providers,
        owned=owned,
        tools=registry,
        storage=store,
        observations=observations,
        planner=planner or LLMPlanner(planning_mode=planning_mode),
        executor=executor or ConcurrentExecutor(),
        synthesizer=synthesizer or LLMSynthesizer(),
        retriever=retriever,
        defaults=AgentDefaults(
            system_prompt=system_prompt or DEFAULT_SYSTEM_PROMPT,
            history_limit=history_limit,
            state_saving=state_saving,
            max_concurrency=max_concurrency,
            tool_timeout_s=float(tool_timeout_s),
            max_tool_calls=max_tool_calls,
            llm_params=LLMParams(temperature=temperature, max_tokens=max_tokens),
            reevaluate=reevaluate,
            max_revisions=max_revisions,
            require_approval=approval_names,
            approval_predicate=approval_predicate,
            approval_handler=approval_handler,
            approval_timeout_s=None if approval_timeout_s is None else float(approval_timeout_s),
            usage_limits=usage_limits,
        ),
    )
