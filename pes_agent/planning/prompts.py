"""The prompts of the planning call and of its repair round-trip.

Model text and tool output are inserted by concatenation only — never through `str.format`
or templates that could interpret braces in them.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from functools import lru_cache

from pes_agent.providers.base import PromptMessage
from pes_agent.retrieval.base import ScoredDocument
from pes_agent.retrieval.passages import PROMPT_MAX_CHARS, render_passages
from pes_agent.threads.messages import ConversationMessage, history_prompt
from pes_agent.tools.base import ToolSchema
from pes_agent.tools.signatures import tool_signature

__all__ = [
    "build_planning_messages",
    "build_repair_messages",
    "render_tools",
]

_PLANNING_PROTOCOL = """\
# How to answer
Reply with the calls that get what the query needs, one per line, then a line with its intent:

1. tool_name(param="text", count=3)
2. tool_name(text="{step_1_result}")  # why, only if not obvious
3. language_step("Compare {step_1_result} and {step_2_result} in two sentences.")
Intent: <the user's goal, in a few words>

- Call only the tools below, with name=value arguments; values are JSON.
- Line N is step N. {step_N_result} passes step N's result into a later call;
  {step_N_result.field} and {step_N_result.items[0]} reach inside it. Alone it is the raw
  value; inside text it becomes text. Refer only to earlier steps.
- Calls run at the same time unless placeholders link them; "4. after 2: tool_name(...)"
  waits for step 2 without using its result.
- language_step("...") has a model do text work (summarise, compare, extract, draft): its
  text is the step's result. Write no call for the final answer: it is written later, from
  the results.
- No tool needed: write the Intent line only."""


def render_tools(tools: Sequence[ToolSchema]) -> str:
    """The "# Tools" section of a prompt: one signature per tool (`pes_agent.tools.signatures`)."""
    return _tools_section(tuple(map(_signature, tools)))


def _tools_section(signatures: tuple[str, ...]) -> str:
    if not signatures:
        return "# Tools\nNo tools are available: write the Intent line only."
    return "# Tools\n" + "\n".join(signatures)


@lru_cache(maxsize=64)
def _system_message(system_prompt: str, signatures: tuple[str, ...]) -> PromptMessage:
    """The planning call's system message. The same for every run of an agent (its system
    prompt and tools), so runs share one (a message is immutable) rather than each holding a
    copy of its few KiB while the model answers."""
    return PromptMessage(
        role="system",
        content="\n\n".join([system_prompt, _PLANNING_PROTOCOL, _tools_section(signatures)]),
    )


# Rendered signatures by schema object: a run's schemas are its registry's, the same objects
# run after run, and rendering one costs more than most of a run's other steps. An entry
# lives as long as its schema (a schema is frozen but unhashable, so it is keyed by id, with a
# weak reference that drops the entry when the schema goes and proves a reused id stale).
_SIGNATURES: dict[int, tuple[weakref.ref[ToolSchema], str]] = {}


def _signature(schema: ToolSchema) -> str:
    key = id(schema)
    cached = _SIGNATURES.get(key)
    if cached is not None and cached[0]() is schema:
        return cached[1]
    signature = tool_signature(schema)
    _SIGNATURES[key] = (weakref.ref(schema, lambda _: _SIGNATURES.pop(key, None)), signature)
    return signature


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
    system = _system_message(system_prompt, tuple(map(_signature, tools)))
    # Asked first: most runs retrieve nothing, and a new thread has no history.
    data = render_passages(passages, max_chars=PROMPT_MAX_CHARS) if passages else ""
    request = data + "\n\n# User query\n" + query if data else query
    user = PromptMessage(role="user", content=request)
    if not history:
        return [system, user]
    return [system, *history_prompt(history), user]


def build_repair_messages(
    planning_messages: Sequence[PromptMessage], raw_output: str, errors: Sequence[str]
) -> list[PromptMessage]:
    """The planning conversation plus the unusable answer and a request to fix it."""
    problems = "\n".join("- " + error for error in errors)
    request = (
        "Your previous reply could not be used:\n"
        + problems
        + "\nReply again with the whole corrected plan, in the format described above."
    )
    return [
        *planning_messages,
        PromptMessage(role="assistant", content=raw_output),
        PromptMessage(role="user", content=request),
    ]
