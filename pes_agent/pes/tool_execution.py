"""ToolSystem [5]: the plan's tool calls run through the executor as a DAG."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, ClassVar

from pes_agent.errors import ToolExecutionError
from pes_agent.execution.hooks import ObservingHooks
from pes_agent.pes.base import PhaseRun, PhaseSystem
from pes_agent.pes.components import Executed, Phase, Planned
from pes_agent.pes.resources import ResourceTable
from pes_agent.protocols import ExecutionContext, Executor
from pes_agent.tools.base import Tool, ToolResult

__all__ = ["ToolSystem"]


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
        hooks = ObservingHooks(run)
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
