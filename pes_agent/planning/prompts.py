"""The prompts of the planning call and of its repair round-trip.

Model text and tool output are inserted by concatenation only — never through `str.format`
or templates that could interpret braces in them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from pes_agent.providers.base import PromptMessage
from pes_agent.retrieval.base import ScoredDocument
from pes_agent.retrieval.passages import PROMPT_MAX_CHARS, render_passages
from pes_agent.threads.messages import ConversationMessage, history_prompt
from pes_agent.tools.base import ToolSchema

__all__ = [
    "build_planning_messages",
    "build_repair_messages",
    "render_tools",
]

_PLANNING_PROTOCOL = """\
# How to answer
First decide what the user wants and how to get it. Reply with ONE JSON object and nothing else:

{"title": "<a short title for this conversation turn>",
 "intent": "<what the user wants, in one sentence>",
 "plan": "1. <first step>\\n2. <second step>",
 "toolCalls": [
   {"callId": "call_1", "toolName": "<tool name>", "arguments": {<arguments matching its schema>}},
   {"callId": "call_2", "toolName": "<tool name>", "arguments": {"text": "{step_1_result}"},
    "dependsOn": ["call_1"]},
   {"callId": "call_3", "instruction": "Compare {step_1_result} and {step_2_result} briefly."}
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
- A call with "instruction" instead of "toolName" and "arguments" is a language step: a
  model carries out the instruction (summarise, compare, translate, extract, draft) and
  its text is that step's result, which later calls can use like any other. Placeholders in
  the instruction are filled in as text. Make the instruction self-contained. Use language
  steps for intermediate text work only: the final answer is written in a later step.
"""


def render_tools(tools: Sequence[ToolSchema]) -> str:
    """The "# Tools" section of a prompt: each tool's name, description and argument schema."""
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
    passages: Sequence[ScoredDocument] = (),
) -> list[PromptMessage]:
    """The messages of the planning call: instructions and tools, history, then the query.

    Retrieved `passages` go into the last (user) message as a delimited data block before
    the query, never into the system message (see `pes_agent.retrieval.passages`).
    """
    system = "\n\n".join([system_prompt, _PLANNING_PROTOCOL, render_tools(tools)])
    data = render_passages(passages, max_chars=PROMPT_MAX_CHARS)
    request = data + "\n\n# User query\n" + query if data else query
    return [
        PromptMessage(role="system", content=system),
        *history_prompt(history),
        PromptMessage(role="user", content=request),
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
