"""How a pending tool call is answered: one tool message, one result, and it leaves the queue.

Executed, refused and unusable calls all end here, so every call the model made gets exactly
one `"tool"` message answering its id (the model APIs reject a next request otherwise).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ecs_core import EntityId, World
from pes_agent.ecs._model import recorder_for
from pes_agent.ecs.components import (
    ConversationComponent,
    PendingToolCallsComponent,
    ToolResultsComponent,
)
from pes_agent.ecs.messages import ChatMessage
from pes_agent.observing.types import ObservationType
from pes_agent.tools.base import ToolResult
from pes_agent.tools.calls import ToolCall

__all__ = ["answer_calls", "error_result", "refuse_call", "tool_message"]


def tool_message(result: ToolResult) -> ChatMessage:
    """The tool message answering `result`'s call: its output as text, or ``Error: ...``."""
    if result.status == "error":
        content = f"Error: {result.error}"
    elif isinstance(result.output, str):
        content = result.output
    else:
        content = json.dumps(result.output, ensure_ascii=False, default=str)
    return ChatMessage("tool", content, tool_call_id=result.call_id, name=result.tool_name)


def error_result(call: ToolCall, message: str) -> ToolResult:
    """An error result for a call that did not run."""
    return ToolResult(call_id=call.id, tool_name=call.name, status="error", error=message)


def answer_calls(world: World, entity: EntityId, results: Sequence[ToolResult]) -> None:
    """Append each result's tool message and the result itself; drop the calls from the queue.

    The `PendingToolCallsComponent` goes once it is empty, which lets the model speak again.
    """
    if not results:
        return
    conversation = world.get_component(entity, ConversationComponent)
    if conversation is not None:
        conversation.messages.extend(tool_message(result) for result in results)
    collected = world.get_component(entity, ToolResultsComponent)
    if collected is None:
        world.add_component(entity, ToolResultsComponent(list(results)))
    else:
        collected.results.extend(results)
    pending = world.get_component(entity, PendingToolCallsComponent)
    if pending is None:
        return
    answered = {result.call_id for result in results}
    pending.tool_calls = [call for call in pending.tool_calls if call.id not in answered]
    for call_id in answered:
        pending.approved_by.pop(call_id, None)
    if not pending.tool_calls:
        world.remove_component(entity, PendingToolCallsComponent)


async def refuse_call(world: World, entity: EntityId, call: ToolCall, reason: str) -> ToolResult:
    """Answer a call that must not run with an error naming `reason`, and record it as a
    TOOL_EXECUTION that never started (as PES records refused calls)."""
    result = error_result(call, reason)
    answer_calls(world, entity, [result])
    await recorder_for(world, entity).record(
        ObservationType.TOOL_EXECUTION, f"{call.name} error", _execution_content(result)
    )
    return result


def _execution_content(result: ToolResult) -> dict[str, Any]:
    return {
        "callId": result.call_id,
        "toolName": result.tool_name,
        "status": result.status,
        "output": None,
        "error": result.error,
        "durationMs": result.duration_ms,
    }
