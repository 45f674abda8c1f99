"""The default plan reviser: the model re-evaluates the calls not yet run after a wave.

`LLMPlanReviser` is what `create_agent(reevaluate="on_failure" | "each_wave")` uses. At the end
of a wave (see `pes_agent.execution.revision`) it shows the model the goal (query and intent),
the plan, every step so far with its status and result (cut to `result_chars` characters) and
the calls not yet run, and reads its answer: `{"keep": true}` keeps them; `{"toolCalls": [...]}`
in the planning protocol replaces them (numbered on from the last step, so `{step_N_result}`
keeps pointing at the same calls). An answer that cannot be read raises `PlanParseError`, and
the executor keeps the plan. There is no repair round-trip: a revision is optional.

Model text and tool output are inserted by concatenation only — never through `str.format`
or templates that could interpret braces in them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Final

from pes_agent.errors import PlanParseError
from pes_agent.execution.revision import PlanProgress
from pes_agent.planning.parser import OutputParser
from pes_agent.planning.plan import ParsedToolCall
from pes_agent.planning.prompts import render_tools
from pes_agent.protocols import ModelCaller
from pes_agent.providers.base import PromptMessage
from pes_agent.synthesis.prompts import render_tool_output
from pes_agent.tools.base import ToolSchema

__all__ = ["DEFAULT_RESULT_CHARS", "LLMPlanReviser", "build_reevaluation_messages", "read_revision"]

#: How much of each finished call's result the re-evaluation prompt shows.
DEFAULT_RESULT_CHARS: Final = 1500

_KEEP: Final = re.compile(r'"keep"[ \t\r\n]*:[ \t\r\n]*true\b', re.IGNORECASE)

_REEVALUATION_PROTOCOL: Final = """\
# Re-evaluating the plan
You planned calls to reach the user's goal and some of them have run. Look at the results so
far and decide whether the calls not yet run are still the right ones. Reply with ONE JSON
object and nothing else, either

{"keep": true}

to run them as planned, or

{"toolCalls": [
   {"callId": "<new id>", "toolName": "<tool name>", "arguments": {<arguments>},
    "dependsOn": ["<callId>"]},
   {"callId": "<new id>", "instruction": "<a language step, e.g. Summarise {step_1_result}>"}
 ]}

with the calls to run instead of them.

Rules:
- Your calls replace ALL the calls not yet run: repeat the ones you still want.
  "toolCalls": [] drops them all.
- Steps keep their numbers. Your calls are numbered on from the last step, in the order you
  list them (the first number is given below). {step_N_result} is the result of step N: use
  finished or running steps, or your calls listed before; never a call not yet run, since
  your answer replaces it.
- Give your calls new callIds.
- A call that failed is not retried unless you call it again; do not repeat a call that
  failed the same way, choose another route.
- Use only the tools listed below, with the arguments their signatures name.
"""


def _describe(call: ParsedToolCall) -> str:
    if call.instruction is not None:
        text = "language step: " + json.dumps(call.instruction, ensure_ascii=False)
    else:
        text = call.tool_name + " " + json.dumps(call.arguments, ensure_ascii=False, default=str)
    if call.depends_on:
        text += " (dependsOn " + ", ".join(call.depends_on) + ")"
    return text


def _steps(progress: PlanProgress, result_chars: int) -> str:
    running = set(progress.running)
    pending = set(progress.pending)
    replaced = set(progress.replaced)
    lines = ["# Steps so far"]
    for step, call in enumerate(progress.calls, start=1):
        if step in pending:
            continue
        head = f'Step {step} ("{call.call_id}") {_describe(call)}'
        result = progress.results.get(step)
        if step in replaced:
            lines.append(head + " — replaced by an earlier revision; it never runs")
        elif step in running:
            lines.append(
                head + " — still running; its result will be step_" + str(step) + "_result"
            )
        elif result is None:
            lines.append(head + " — not run")
        elif result.status == "success":
            lines.append(head + " — success:")
            lines.append(render_tool_output(result.output, limit=result_chars))
        else:
            lines.append(head + " — error: " + (result.error or "unknown error"))
    if len(lines) == 1:
        lines.append("(none)")
    lines.append("")
    lines.append("# Not run yet (your answer replaces these)")
    for step in progress.pending:
        call = progress.call(step)
        lines.append(f'Step {step} ("{call.call_id}") {_describe(call)}')
    if not progress.pending:
        lines.append("(none: every planned call has run or is running; you may add calls)")
    return "\n".join(lines)


def build_reevaluation_messages(
    progress: PlanProgress,
    *,
    system_prompt: str,
    query: str,
    intent: str | None,
    plan: str | None,
    tools: Sequence[ToolSchema],
    result_chars: int = DEFAULT_RESULT_CHARS,
) -> list[PromptMessage]:
    """The messages of a re-evaluation call: protocol and tools, then goal, plan and steps."""
    left = progress.max_revisions - progress.revisions - 1
    body = "\n\n".join(
        [
            "# Goal\n" + query + "\nIntent: " + (intent or "(not stated)"),
            "# Plan\n" + (plan or "(no plan)"),
            _steps(progress, result_chars),
            "# Your answer\n"
            + f"Your first call is step {progress.next_step}. "
            + f"Revisions left after this one: {max(left, 0)}. "
            + 'Reply {"keep": true} or {"toolCalls": [...]}.',
        ]
    )
    parts = [system_prompt, _REEVALUATION_PROTOCOL, render_tools(tools)]
    system = "\n\n".join(part for part in parts if part)
    return [
        PromptMessage(role="system", content=system),
        PromptMessage(role="user", content=body),
    ]


def read_revision(text: str, parser: OutputParser | None = None) -> list[ParsedToolCall] | None:
    """Read a re-evaluation answer: the replacement calls, or None to keep the plan.

    Raises `PlanParseError` (with `errors` and `raw_output`) when the answer cannot be used.
    """
    parser = parser or OutputParser()
    output = parser.parse_planning_output(text)
    problems = list(output.errors)
    if not problems:
        if output.tool_calls:
            return output.tool_calls  # a "keep" inside them is some call's argument
        answer = parser.parse_synthesis_output(text)  # the text without thinking blocks
        if _KEEP.search(answer) or answer.strip(" .`\"'").upper() == "KEEP":
            return None
        if output.tool_calls is not None:
            return []  # "toolCalls": [] drops the calls not yet run
        problems.append(
            'the answer has neither "toolCalls" nor "keep"; reply {"keep": true} or '
            '{"toolCalls": [...]}'
        )
    raise PlanParseError(
        "the re-evaluation answer could not be used: " + "; ".join(problems),
        raw_output=text,
        errors=problems,
    )


class LLMPlanReviser:
    """Asks the model, once per wave, whether the calls not yet run should change.

    Built per run by the PES `ToolSystem` with the run's model caller and goal; any object with
    `async revise(progress)` can stand in for it (`PlanReviser`).
    """

    def __init__(
        self,
        *,
        llm: ModelCaller,
        query: str,
        intent: str | None = None,
        plan: str | None = None,
        tools: Sequence[ToolSchema] = (),
        system_prompt: str = "",
        result_chars: int = DEFAULT_RESULT_CHARS,
        parser: OutputParser | None = None,
    ) -> None:
        """Ask `llm` about the plan made for `query`.

        Args:
            llm: The run's model caller.
            query: The user's request the plan serves.
            intent: The plan's intent, shown to the model.
            plan: The plan's text, shown to the model.
            tools: The tools the revised calls may use.
            system_prompt: The agent's system prompt.
            result_chars: The most characters of each finished call's result shown.
            parser: Reads the model's answer; the default `OutputParser` when None.
        """
        self._llm = llm
        self._query = query
        self._intent = intent
        self._plan = plan
        self._tools = tuple(tools)
        self._system_prompt = system_prompt
        self._result_chars = result_chars
        self._parser = parser or OutputParser()

    async def revise(self, progress: PlanProgress) -> list[ParsedToolCall] | None:
        """Ask the model (phase `"reevaluation"`) whether the calls not yet run should change.

        Args:
            progress: The plan's calls, those finished with their results, those pending.

        Returns:
            The calls to run instead of the pending ones (`[]` drops them), or None to keep
            them.

        Raises:
            PlanParseError: The answer could not be used; the plan is then kept.
            ProviderError: The model call failed.
        """
        messages = build_reevaluation_messages(
            progress,
            system_prompt=self._system_prompt,
            query=self._query,
            intent=self._intent,
            plan=self._plan,
            tools=self._tools,
            result_chars=self._result_chars,
        )
        response = await self._llm(messages, phase="reevaluation")
        return read_revision(response.text, self._parser)
