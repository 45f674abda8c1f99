"""ToolExecutionSystem [5]: runs the pending calls every gate cleared, through the PES executor."""

from __future__ import annotations

import asyncio

from ecs_core import EntityId, ErrorComponent, World
from pes_agent.ecs._budget import end_over_budget, take_tool_calls
from pes_agent.ecs._model import recorder_for
from pes_agent.ecs._pending import answer_calls, error_result, refuse_call
from pes_agent.ecs._tools import tools_of
from pes_agent.ecs.components import PendingToolCallsComponent, ToolRegistryComponent
from pes_agent.ecs.gates import cleared
from pes_agent.ecs.services import identity_of
from pes_agent.execution.executors import ConcurrentExecutor
from pes_agent.execution.hooks import ObservingHooks
from pes_agent.observing.logs import get_logger
from pes_agent.planning.plan import ParsedToolCall
from pes_agent.protocols import ExecutionContext, Executor
from pes_agent.tools.base import ToolResult
from pes_agent.tools.calls import ToolCall

__all__ = ["ToolExecutionSystem"]

_log = get_logger("pes_agent.ecs.tool_execution")


class ToolExecutionSystem:
    """Runs each entity's cleared pending calls; every outcome is a tool message, never a raise.

    A call runs once every gate component on its entity has cleared it (`gates.cleared`; with
    no gate component, at once). The calls go through `executor` (default: the PES
    `ConcurrentExecutor`) with an `ExecutionContext` over the entity's `ToolRegistryComponent`,
    so they get PES's validation (arguments checked against the tool's model or schema, unknown
    tools refused), per-call timeouts (the tool's `timeout_s`, else `tool_timeout_s`) and
    concurrency (`max_concurrency` per entity; entities run side by side). Because it is the
    PES executor, a ``{step_N_result}`` placeholder in an argument refers to the N-th call of
    the same model turn and is filled from its result.

    Each result becomes a `ChatMessage("tool", ..., tool_call_id=call.id)` in the conversation
    and a `ToolResult` in `ToolResultsComponent`; the call leaves `PendingToolCallsComponent`,
    which is removed once empty. Errors (a tool that raised or timed out, invalid arguments, a
    broken registry or executor) are error results the model reads. With observations
    attached, each call is recorded as TOOL_CALL and TOOL_EXECUTION, as in PES runs.

    An entity with a `UsageLimitsComponent` setting `tool_calls` runs only the calls it has
    room for, in call order, each counted as started in its `UsageSpentComponent`; a call
    without room does not run: it is answered with an error naming the limit, and the entity
    gets an `ErrorComponent` (the `UsageLimitExceeded`) and `TerminalComponent("usage_limit")`.
    """

    def __init__(
        self,
        *,
        executor: Executor | None = None,
        max_concurrency: int = 8,
        tool_timeout_s: float = 30.0,
        max_tool_calls: int = 32,
    ) -> None:
        self.executor: Executor = executor if executor is not None else ConcurrentExecutor()
        self.max_concurrency = max_concurrency
        self.tool_timeout_s = tool_timeout_s
        self.max_tool_calls = max_tool_calls

    async def process(self, world: World) -> None:
        """Run the cleared calls of every entity, the entities concurrently."""
        work = []
        for entity, (pending,) in world.query(PendingToolCallsComponent):
            ready = [call for call in pending.tool_calls if cleared(world, entity, pending, call)]
            if ready:
                work.append((entity, ready))
        if len(work) == 1:
            await self._run(world, *work[0])
            return
        async with asyncio.TaskGroup() as group:
            for entity, ready in work:
                group.create_task(self._run(world, entity, ready))

    async def _run(self, world: World, entity: EntityId, ready: list[ToolCall]) -> None:
        calls, breach = take_tool_calls(world, entity, ready)
        if calls:
            hooks = ObservingHooks(recorder_for(world, entity))
            try:
                results = await self._execute(world, entity, calls, hooks)
            except asyncio.CancelledError:
                # What finished is answered; the rest stays pending.
                if world.entity_exists(entity):
                    answer_calls(world, entity, list(hooks.finished.values()))
                raise
            if world.entity_exists(entity):
                answer_calls(world, entity, results)
        if breach is not None and world.entity_exists(entity):
            # Over budget: the other calls never run, but each is answered (the model APIs
            # need every call answered) and the entity ends.
            for call in ready[len(calls) :]:
                await refuse_call(world, entity, call, f"Not run: {breach}")
            world.add_component(entity, ErrorComponent(breach, type(self).__name__))
            end_over_budget(world, entity)

    async def _execute(
        self, world: World, entity: EntityId, calls: list[ToolCall], hooks: ObservingHooks
    ) -> list[ToolResult]:
        thread_id, trace_id = identity_of(world, entity)
        try:
            tools = tools_of(world.get_component(entity, ToolRegistryComponent))
            context = ExecutionContext(
                thread_id=thread_id,
                trace_id=trace_id,
                tools=tools,
                enabled_tools=frozenset(tools),
                max_concurrency=self.max_concurrency,
                tool_timeout_s=self.tool_timeout_s,
                max_tool_calls=self.max_tool_calls,
                hooks=hooks,
            )
            parsed = [
                ParsedToolCall(call_id=call.id, tool_name=call.name, arguments=call.arguments)
                for call in calls
            ]
            results = await self.executor.execute(parsed, context)
        except Exception as error:
            _log.warning(
                "tool_execution_failed", entity=entity, thread_id=thread_id, error=str(error)
            )
            return [error_result(call, f"Not run: {error}") for call in calls]
        if len(results) != len(calls) or not all(isinstance(r, ToolResult) for r in results):
            message = (
                f"Not run: the executor {type(self.executor).__name__} returned "
                f"{len(results)} result(s) for {len(calls)} call(s); it must return one "
                "ToolResult per call, in call order"
            )
            return [error_result(call, message) for call in calls]
        # Answer by the model's call ids, whatever an executor wrote into its results.
        return [
            result.model_copy(update={"call_id": call.id, "tool_name": call.name})
            for call, result in zip(calls, results, strict=True)
        ]
