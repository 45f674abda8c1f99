"""ToolSystem [5]: the plan's tool calls run through the executor as a DAG."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, ClassVar

from pes_agent.errors import ToolExecutionError
from pes_agent.observing.types import Observation, ObservationType
from pes_agent.pes.base import PhaseRun, PhaseSystem
from pes_agent.pes.components import Executed, Phase, Planned
from pes_agent.pes.resources import ResourceTable
from pes_agent.planning.plan import ParsedToolCall
from pes_agent.protocols import ExecutionContext, Executor
from pes_agent.tools.base import Tool, ToolResult

__all__ = ["ToolSystem"]


class _ObservingHooks:
    """Records TOOL_CALL when a call starts and TOOL_EXECUTION when it ends; keeps results."""

    def __init__(self, run: PhaseRun) -> None:
        self._run = run
        # Keyed by the call object itself: a bad plan may repeat a call id.
        self.finished: dict[int, ToolResult] = {}
        self._started: dict[int, Observation] = {}

    async def on_call_start(self, call: ParsedToolCall, arguments: dict[str, Any]) -> None:
        self._started[id(call)] = await self._run.record(
            ObservationType.TOOL_CALL,
            f"Calling {call.tool_name}",
            {"callId": call.call_id, "toolName": call.tool_name, "arguments": arguments},
        )

    async def on_call_end(self, call: ParsedToolCall, result: ToolResult) -> None:
        self.finished[id(call)] = result
        started = self._started.get(id(call))
        await self._run.record(
            ObservationType.TOOL_EXECUTION,
            f"{call.tool_name} {result.status}",
            {
                "callId": result.call_id,
                "toolName": result.tool_name,
                "status": result.status,
                "output": _observable(result.output),
                "error": result.error,
                "durationMs": result.duration_ms,
            },
            parent_id=started.id if started is not None else None,
        )


def _observable(output: Any) -> Any:
    """Output as observation content: kept whole when it is plain data, else its `str()`."""
    if output is None or isinstance(output, str | int | float | bool | list | dict):
        return output
    return str(output)


class ToolSystem(PhaseSystem):
    """Executes the planned tool calls; every failure is a `ToolResult`, never an exception."""

    phase: ClassVar[Phase] = "execution"
    requires = (Planned,)
    done_when = (Executed,)

    def __init__(
        self, resources: ResourceTable, executor: Executor, tools: Mapping[str, Tool]
    ) -> None:
        super().__init__(resources)
        self._executor = executor
        self._tools = tools

    async def run(self, run: PhaseRun, *inputs: Any) -> None:
        planned: Planned = inputs[0]
        calls = planned.output.tool_calls or []
        if not calls:
            run.add(Executed(results=[]))
            return
        spec = run.spec
        hooks = _ObservingHooks(run)
        context = ExecutionContext(
            thread_id=spec.thread_id,
            trace_id=spec.trace_id,
            tools=self._tools,
            enabled_tools=spec.enabled_tools,
            max_concurrency=spec.max_concurrency,
            tool_timeout_s=spec.tool_timeout_s,
            max_tool_calls=spec.max_tool_calls,
            user_id=spec.props.user_id,
            session_id=spec.props.session_id,
            hooks=hooks,
            state=spec.thread.state,
        )
        try:
            results = await self._executor.execute(calls, context)
        except asyncio.CancelledError:
            # What finished is kept on the entity for whoever inspects the cancelled run.
            run.add(Executed(results=list(hooks.finished.values())))
            raise
        if len(results) != len(calls) or not all(isinstance(r, ToolResult) for r in results):
            raise ToolExecutionError(
                f"the executor {type(self._executor).__name__} returned {len(results)} "
                f"result(s) for {len(calls)} call(s); it must return one ToolResult per call, "
                "in call order",
                thread_id=spec.thread_id,
                trace_id=spec.trace_id,
            )
        run.add(Executed(results=list(results)))
