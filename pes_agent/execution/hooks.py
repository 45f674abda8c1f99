"""Execution hooks that record each tool call as TOOL_CALL and TOOL_EXECUTION observations.

PES runs and ECS agents record tool calls alike, so the CLI trace pairs them the same way: a
TOOL_CALL when a call starts (with its resolved arguments), a TOOL_EXECUTION when it ends whose
`parent_id` is that TOOL_CALL (a call refused before it started has only its TOOL_EXECUTION).

Both carry `"kind"`: `"tool"`, or `"language"` for a language step, whose `toolName` is
`"language_step"` and whose TOOL_CALL has its filled-in `"instruction"` (also as
`arguments.instruction`, so views that show arguments show it). Each re-evaluation of the plan
is a PLAN observation (`on_plan_revision`): `"status"` is `"revised"` (with `"revision"`, the
new `"toolCalls"`, the `"replaced"` call ids and their `"replacedSteps"`, and `"firstStep"`),
or `"kept"`, `"unusable"` or `"failed"` (with the `"reason"` and `"problems"`); `"wave"` names
the calls that ended the wave.
"""

from __future__ import annotations

from typing import Any, Protocol

from pes_agent.execution.revision import PlanRevision
from pes_agent.observing.types import Observation, ObservationType
from pes_agent.planning.plan import ParsedToolCall
from pes_agent.tools.base import ToolResult

__all__ = ["ObservationSink", "ObservingHooks", "observable"]

# Output types kept as they are, tested first by exact type (subclasses by isinstance).
_PLAIN = frozenset({str, int, float, bool, list, dict, type(None)})


class ObservationSink(Protocol):
    """Records an observation of one run (a `RunRecorder`)."""

    async def record(
        self,
        type: ObservationType,
        title: str,
        content: dict[str, Any],
        *,
        parent_id: str | None = None,
    ) -> Observation: ...


class ObservingHooks:
    """Records TOOL_CALL when a call starts and TOOL_EXECUTION when it ends, and a PLAN for each
    re-evaluation; keeps the results and the revisions."""

    def __init__(self, sink: ObservationSink) -> None:
        self._sink = sink
        # Keyed by the call object itself: a bad plan may repeat a call id.
        self.finished: dict[int, ToolResult] = {}
        self.revisions: list[PlanRevision] = []
        # Each started call and its TOOL_CALL's id (the TOOL_EXECUTION's parent).
        self._started: dict[int, tuple[ParsedToolCall, str]] = {}

    async def on_call_start(self, call: ParsedToolCall, arguments: dict[str, Any]) -> None:
        instruction = call.instruction
        if instruction is None:
            content: dict[str, Any] = {
                "callId": call.call_id,
                "toolName": call.tool_name,
                "kind": "tool",
                "arguments": arguments,
            }
            title = "Calling " + call.tool_name
        else:
            content = {
                "callId": call.call_id,
                "toolName": call.tool_name,
                "kind": "language",
                "arguments": arguments,
                "instruction": arguments.get("instruction", instruction),
            }
            title = "Language step"
        observation = await self._sink.record(ObservationType.TOOL_CALL, title, content)
        self._started[id(call)] = (call, observation.id)

    async def on_call_end(self, call: ParsedToolCall, result: ToolResult) -> None:
        key = id(call)
        self.finished[key] = result
        started = self._started.get(key)
        # Recorded here rather than through a coroutine shared with `on_discard`: a
        # coroutine less a call.
        title, content = _ended(call, result)
        await self._sink.record(
            ObservationType.TOOL_EXECUTION,
            title,
            content,
            parent_id=started[1] if started is not None else None,
        )

    async def on_discard(self, reason: str) -> list[str]:
        """The calls were cancelled before they ended (their plan was discarded): record a
        TOOL_EXECUTION error for each call that started and has not ended; their call ids."""
        cancelled: list[str] = []
        for key, (call, parent_id) in list(self._started.items()):
            if key in self.finished:
                continue
            cancelled.append(call.call_id)
            result = ToolResult(
                call_id=call.call_id,
                tool_name=call.tool_name,
                status="error",
                error="Cancelled: " + reason,
            )
            self.finished[key] = result
            title, content = _ended(call, result)
            await self._sink.record(
                ObservationType.TOOL_EXECUTION, title, content, parent_id=parent_id
            )
        return cancelled

    async def on_plan_revision(self, outcome: PlanRevision) -> None:
        self.revisions.append(outcome)
        content: dict[str, Any] = {
            "status": outcome.status,
            "revision": outcome.revision,
            "wave": outcome.wave,
        }
        if outcome.status == "revised":
            title = f"Plan revised ({outcome.revision})"
            content.update(
                {
                    "replaced": outcome.replaced,
                    "replacedSteps": outcome.replaced_steps,
                    "toolCalls": [call.model_dump() for call in outcome.calls],
                    "firstStep": outcome.first_step,
                }
            )
        else:
            title = "Plan kept" if outcome.status == "kept" else "Plan kept: revision unusable"
            if outcome.status == "failed":
                title = "Plan kept: re-evaluation failed"
            content.update({"reason": outcome.reason, "problems": outcome.problems})
        await self._sink.record(ObservationType.PLAN, title, content)


def _ended(call: ParsedToolCall, result: ToolResult) -> tuple[str, dict[str, Any]]:
    """The title and content of the TOOL_EXECUTION observation of `call` ending in `result`."""
    status = result.status
    output = result.output
    if type(output) not in _PLAIN:  # most outputs are plain: no call for them
        output = observable(output)
    content = {
        "callId": result.call_id,
        "toolName": result.tool_name,
        "kind": "tool" if call.instruction is None else "language",
        "status": status,
        "output": output,
        "error": result.error,
        "durationMs": result.duration_ms,
    }
    return call.tool_name + " " + status, content


def observable(output: Any) -> Any:
    """Output as observation content: kept whole when it is plain data, else its `str()`."""
    if type(output) in _PLAIN or isinstance(output, str | int | float | bool | list | dict):
        return output
    return str(output)
