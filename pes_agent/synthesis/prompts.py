"""The prompt of the synthesis call: the query, intent, plan and every tool result.

Model text and tool output are inserted by concatenation only — never through `str.format`
or templates that could interpret braces in them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pes_agent.planning.plan import PlanningOutput
from pes_agent.providers.base import PromptMessage
from pes_agent.retrieval.base import ScoredDocument
from pes_agent.retrieval.passages import PROMPT_MAX_CHARS, render_passages
from pes_agent.threads.messages import ConversationMessage, history_prompt
from pes_agent.tools.base import ToolResult

__all__ = ["MAX_RESULT_CHARS", "build_synthesis_messages", "render_tool_output"]

#: Tool output longer than this is cut in the synthesis prompt (the full value stays in the
#: TOOL_EXECUTION observation and in the run's results).
MAX_RESULT_CHARS = 4000

_SYNTHESIS_INSTRUCTIONS = """\
# How to answer
Write the final answer to the user's query from the intent, the plan and the tool results
below. Use the results; if a tool failed, say what could not be done instead of inventing
its result. Reply with the answer only."""


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


def _render_results(results: Sequence[ToolResult], steps: Sequence[int]) -> str:
    if not results:
        return "# Tool results\nNo tools were called."
    numbers = list(steps) if len(steps) == len(results) else range(1, len(results) + 1)
    lines = ["# Tool results"]
    for step, result in zip(numbers, results, strict=True):
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
    steps: Sequence[int] = (),
    passages: Sequence[ScoredDocument] = (),
) -> list[PromptMessage]:
    """The messages of the synthesis call: the query, intent, plan and every tool result,
    each labelled with its step number (`steps`, when a plan revision made them skip).

    Retrieved `passages` go into the user message as a delimited data block after the tool
    results, never into the system message (see `pes_agent.retrieval.passages`).
    """
    sections = [
        "# User query\n" + query,
        "# Intent\n" + (planning.intent or "(not stated)"),
        "# Plan\n" + (planning.plan or "(no plan)"),
        _render_results(results, steps),
    ]
    data = render_passages(passages, max_chars=PROMPT_MAX_CHARS)
    if data:
        sections.append(data)
    body = "\n\n".join(sections)
    return [
        PromptMessage(role="system", content=system_prompt + "\n\n" + _SYNTHESIS_INSTRUCTIONS),
        *history_prompt(history),
        PromptMessage(role="user", content=body),
    ]
