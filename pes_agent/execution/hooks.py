"""Execution hooks that record each tool call as TOOL_CALL and TOOL_EXECUTION observations.

PES runs and ECS agents record tool calls alike, so the CLI trace pairs them the same way: a
TOOL_CALL when a call starts (with its resolved arguments), a TOOL_EXECUTION when it ends whose
`parent_id` is that TOOL_CALL (a call refused before it started has only its TOOL_EXECUTION).
"""

from __future__ import annotations

from typing import Any, Protocol

from pes_agent.observing.types import Observation, ObservationType
from pes_agent.planning.plan import ParsedToolCall
from pes_agent.tools.base import ToolResult

__all__ = ["ObservationSink", "ObservingHooks", "observable"]


class ObservationSink(Protocol):
    """Records an observation of one run (a `RunRecorder`, or a PES `PhaseRun`)."""

    async def record(
        self,
        type: ObservationType,
        title: str,
        content: dict[str, Any],
        *,
        parent_id: str | None = None,
    ) -> Observation: ...


class ObservingHooks:
    """Records TOOL_CALL when a call starts and TOOL_EXECUTION when it ends; keeps results."""

    def __init__(self, sink: ObservationSink) -> None:
        self._sink = sink
        # Keyed by the call object itself: a bad plan may repeat a call id.
        self.finished: dict[int, ToolResult] = {}
        self._started: dict[int, Observation] = {}

    async def on_call_start(self, call: ParsedToolCall, arguments: dict[str, Any]) -> None:
        self._started[id(call)] = await self._sink.record(
            ObservationType.TOOL_CALL,
            f"Calling {call.tool_name}",
            {"callId": call.call_id, "toolName": call.tool_name, "arguments": arguments},
        )

    async def on_call_end(self, call: ParsedToolCall, result: ToolResult) -> None:
        self.finished[id(call)] = result
        started = self._started.get(id(call))
        await self._sink.record(
            ObservationType.TOOL_EXECUTION,
            f"{call.tool_name} {result.status}",
            {
                "callId": result.call_id,
                "toolName": result.tool_name,
                "status": result.status,
                "output": observable(result.output),
                "error": result.error,
                "durationMs": result.duration_ms,
            },
            parent_id=started.id if started is not None else None,
        )


def observable(output: Any) -> Any:
    """Output as observation content: kept whole when it is plain data, else its `str()`."""
    if output is None or isinstance(output, str | int | float | bool | list | dict):
        return output
    return str(output)
