"""The prompt of the synthesis call: the query and every tool result under its call.

Model text and tool output are inserted by concatenation only — never through `str.format`
or templates that could interpret braces in them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from pes_agent.planning.call_lines import render_call
from pes_agent.planning.plan import ParsedToolCall, PlanningOutput
from pes_agent.providers.base import PromptMessage
from pes_agent.retrieval.base import ScoredDocument
from pes_agent.retrieval.passages import PROMPT_MAX_CHARS, render_passages
from pes_agent.threads.messages import ConversationMessage
from pes_agent.tools.base import ToolResult

__all__ = ["MAX_RESULT_CHARS", "build_synthesis_messages", "render_tool_output"]

#: Tool output longer than this is cut in the synthesis prompt (the full value stays in the
#: TOOL_EXECUTION observation and in the run's results).
MAX_RESULT_CHARS = 4000

_SYNTHESIS_INSTRUCTIONS = """\
# How to answer
Answer the user's query from the results of the calls below. If a call failed, say what could
not be done instead of inventing its result. Reply with the answer only."""

# What `json.dumps(output, ensure_ascii=False, separators=(",", ":"))` uses, built once:
# `json.dumps` with any non-default keyword builds a new encoder on every call.
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


@lru_cache(maxsize=64)
def _system_message(system_prompt: str) -> PromptMessage:
    """The synthesis call's system message, shared by the runs of an agent (as the planning
    call's is: `pes_agent.planning.prompts`)."""
    return PromptMessage(role="system", content=system_prompt + "\n\n" + _SYNTHESIS_INSTRUCTIONS)


def render_tool_output(output: Any, *, limit: int = MAX_RESULT_CHARS) -> str:
    """Tool output as prompt text: compact JSON when it can be, `str()` otherwise, cut at
    `limit`."""
    if isinstance(output, str):
        text = output
    else:
        try:
            text = _ENCODE(output)
        except (TypeError, ValueError):
            text = str(output)
    if len(text) > limit:
        cut = len(text) - limit
        text = text[:limit] + f"… [truncated {cut} more characters]"
    return text


def _render_results(
    results: Sequence[ToolResult], steps: Sequence[int], calls: Sequence[ParsedToolCall]
) -> str:
    """Each result under the call that made it (`2. search(query="x")`), once."""
    if not results:
        return "# Results\nNo tools were called."
    numbers = list(steps) if len(steps) == len(results) else range(1, len(results) + 1)
    planned = {call.call_id: call for call in calls}
    lines = ["# Results"]
    for step, result in zip(numbers, results, strict=True):
        call = planned.get(result.call_id)
        head = render_call(call, why=False) if call is not None else result.tool_name
        if result.status == "success":
            lines.append(f"{step}. {head} →")
            lines.append(render_tool_output(result.output))
        else:
            lines.append(f"{step}. {head} → error: " + (result.error or "unknown error"))
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
    calls: Sequence[ParsedToolCall] = (),
) -> list[PromptMessage]:
    """The messages of the synthesis call: the query and each result under its call (`calls`,
    else the plan's, by call id), labelled with its step number (`steps`, when a plan
    revision made them skip).

    Each thing is said once in a run: the tool schemas and the thread's history went to the
    planning call, which read the history into its intent, so the intent comes here in the
    history's place (only then: without history the intent only restates the query). The
    plan is the calls, shown with their results.

    Retrieved `passages` go into the user message as a delimited data block after the tool
    results, never into the system message (see `pes_agent.retrieval.passages`).
    """
    sections = ["# Query\n" + query]
    if history and planning.intent:
        sections.append("# Intent, with the conversation so far\n" + planning.intent)
    sections.append(_render_results(results, steps, calls or planning.tool_calls or ()))
    data = render_passages(passages, max_chars=PROMPT_MAX_CHARS)
    if data:
        sections.append(data)
    return [
        _system_message(system_prompt),
        PromptMessage(role="user", content="\n\n".join(sections)),
    ]
