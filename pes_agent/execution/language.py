"""Language steps: a planned call done by one model call instead of a tool.

A language step (`ParsedToolCall.instruction`) runs like any other node of the DAG: after its
dependencies, within `max_concurrency`, its `{step_N_result}` placeholders filled in as text.
The model is asked to do exactly what the instruction says; its answer (thinking blocks
removed) is the step's result, a success `ToolResult` whose `output` is that text.
"""

from __future__ import annotations

from typing import Final

from pes_agent.providers.base import PromptMessage

__all__ = ["LANGUAGE_STEP_PROMPT", "build_language_step_messages"]

#: The system message of a language step's model call.
LANGUAGE_STEP_PROMPT: Final = (
    "You carry out one step of a larger plan. Do exactly what the instruction asks, using only "
    "the information it gives, and reply with the result itself: no preamble, no comments on "
    "the task."
)


def build_language_step_messages(instruction: str) -> list[PromptMessage]:
    """The messages of a language step: the fixed system prompt, then the filled instruction."""
    # The instruction is model text: passed as it is, never formatted.
    return [
        PromptMessage(role="system", content=LANGUAGE_STEP_PROMPT),
        PromptMessage(role="user", content=instruction),
    ]
