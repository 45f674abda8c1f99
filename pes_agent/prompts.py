"""The prompts of the planning, repair and synthesis calls.

Model text and tool output are inserted by concatenation only — never through `str.format`
or templates that could interpret braces in them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pes_agent.messages import ConversationMessage, MessageRole
from pes_agent.plans import PlanningOutput
from pes_agent.providers.base import PromptMessage, PromptRole
from pes_agent.tools.base import ToolResult, ToolSchema

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "MAX_RESULT_CHARS",
    "build_planning_messages",
    "build_repair_messages",
    "build_synthesis_messages",
    "render_tool_output",
]

DEFAULT_SYSTEM_PROMPT = "You are a helpful, precise assistant."

#: Tool output longer than this is cut in the synthesis prompt (the full value stays in the
#: TOOL_EXECUTION observation and in the run's results).
MAX_RESULT_CHARS = 4000

_PLANNING_PROTOCOL = """\
# How to answer
First decide what the user wants and how to get it. Reply with ONE JSON object and nothing else:

{"title": "<a short title for this conversation turn>",
 "intent": "<what the user wants, in one sentence>",
 "plan": "1. <first step>\\n2. <second step>",
 "toolCalls": [
   {"callId": "call_1", "toolName": "<tool name>", "arguments": {<arguments matching its schema>}},
   {"callId": "call_2", "toolName": "<tool name>", "arguments": {"text": "{step_1_result}"},
    "dependsOn": ["call_1"]}
 ]}

Rules:
- Use only the tools listed below, with arguments that match their JSON schema.
- "toolCalls" is [] when no tool is needed; the answer is written in a later step.
- To pass the result of an earlier call into a later one, write the placeholder
  {step_N_result}, where N is the 1-based position of that earlier call in "toolCalls".
  {step_N_result.field} or {step_N_result.items[0]} reach into a structured result.
  An argument that is exactly one placeholder receives the raw value; inside a longer text
  the value is inserted as text. A call may only refer to calls listed before it.
- Calls that do not depend on each other run at the same time; add "dependsOn" only for an
  ordering the placeholders do not already imply.
"""

_SYNTHESIS_INSTRUCTIONS = """\
# How to answer
Write the final answer to the user's query from the intent, the plan and the tool results
below. Use the results; if a tool failed, say what could not be done instead of inventing
its result. Reply with the answer only."""


def _history_messages(history: Sequence[ConversationMessage]) -> list[PromptMessage]:
    messages: list[PromptMessage] = []
    for message in history:
        role: PromptRole
        if message.role is MessageRole.USER:
            role = "user"
        elif message.role is MessageRole.AI:
            role = "assistant"
        elif message.role is MessageRole.TOOL:
            role = "tool"
        else:
            role = "system"
        messages.append(PromptMessage(role=role, content=message.content))
    return messages


def _render_tools(tools: Sequence[ToolSchema]) -> str:
    if not tools:
        return '# Tools\nNo tools are available: answer with "toolCalls": [].'
    lines = ["# Tools"]
    for schema in tools:
        lines.append(f"## {schema.name}")
        lines.append(schema.description or "(no description)")
        lines.append("Arguments (JSON Schema): " + json.dumps(schema.input_schema, sort_keys=True))
    return "\n".join(lines)


def build_planning_messages(
    *,
    system_prompt: str,
    history: Sequence[ConversationMessage],
    query: str,
    tools: Sequence[ToolSchema],
) -> list[PromptMessage]:
    """The messages of the planning call: instructions and tools, history, then the query."""
    system = "\n\n".join([system_prompt, _PLANNING_PROTOCOL, _render_tools(tools)])
    return [
        PromptMessage(role="system", content=system),
        *_history_messages(history),
        PromptMessage(role="user", content=query),
    ]


def build_repair_messages(
    planning_messages: Sequence[PromptMessage], raw_output: str, errors: Sequence[str]
) -> list[PromptMessage]:
    """The planning conversation plus the unusable answer and a request to fix it."""
    problems = "\n".join("- " + error for error in errors)
    request = (
        "Your previous reply could not be used:\n"
        + problems
        + "\nReply again with the corrected JSON object only, following the rules above."
    )
    return [
        *planning_messages,
        PromptMessage(role="assistant", content=raw_output),
        PromptMessage(role="user", content=request),
    ]


def render_tool_output(output: Any, *, limit: int = MAX_RESULT_CHARS) -> str:
    """Tool output as prompt text: JSON when it can be, `str()` otherwise, cut at `limit`."""
    if isinstance(output, str):
        text = output
    else:
        try:
            text = json.dumps(output, ensure_ascii=False)
        except (TypeError, ValueError):
            text = str(output)
    if len(text) > limit:
        cut = len(text) - limit
        text = text[:limit] + f"… [truncated {cut} more characters]"
    return text


def _render_results(results: Sequence[ToolResult]) -> str:
    if not results:
        return "# Tool results\nNo tools were called."
    lines = ["# Tool results"]
    for step, result in enumerate(results, start=1):
        head = f"## step {step}: {result.tool_name} ({result.call_id}) — {result.status}"
        lines.append(head)
        if result.status == "success":
            lines.append(render_tool_output(result.output))
        else:
            lines.append("Error: " + (result.error or "unknown error"))
    return "\n".join(lines)


def build_synthesis_messages(
    *,
    system_prompt: str,
    history: Sequence[ConversationMessage],
    query: str,
    planning: PlanningOutput,
    results: Sequence[ToolResult],
) -> list[PromptMessage]:
    """The messages of the synthesis call: the query, intent, plan and every tool result."""
    body = "\n\n".join(
        [
            "# User query\n" + query,
            "# Intent\n" + (planning.intent or "(not stated)"),
            "# Plan\n" + (planning.plan or "(no plan)"),
            _render_results(results),
        ]
    )
    return [
        PromptMessage(role="system", content=system_prompt + "\n\n" + _SYNTHESIS_INSTRUCTIONS),
        *_history_messages(history),
        PromptMessage(role="user", content=body),
    ]
