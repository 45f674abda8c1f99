"""The default planner: one streamed model call, parsed, with one repair round-trip."""

from __future__ import annotations

from pes_agent.errors import PlanParseError
from pes_agent.execution.dag import plan_errors
from pes_agent.planning.parser import OutputParser
from pes_agent.planning.plan import PlanningOutput
from pes_agent.planning.prompts import build_planning_messages, build_repair_messages
from pes_agent.protocols import PlanningContext

__all__ = ["LLMPlanner"]


def _problems(output: PlanningOutput) -> list[str]:
    problems = list(output.errors)
    if output.intent is None and output.plan is None and output.tool_calls is None and not problems:
        problems.append(
            'no "intent", "plan" or "toolCalls" found; reply with the JSON object described above'
        )
    if output.tool_calls:
        problems.extend(plan_errors(output.tool_calls))
    return problems


class LLMPlanner:
    """Asks the model for intent, plan and tool calls; repairs an unusable answer once.

    Raises `PlanParseError` (with the raw output and the problems) when the repaired answer is
    still unusable; the run then ends with status `error`.
    """

    def __init__(self, parser: OutputParser | None = None) -> None:
        self._parser = parser or OutputParser()

    async def plan(self, ctx: PlanningContext) -> PlanningOutput:
        """Plan the run described by `ctx`."""
        messages = build_planning_messages(
            system_prompt=ctx.system_prompt,
            history=ctx.history,
            query=ctx.props.query,
            tools=ctx.tools,
        )
        response = await ctx.llm(messages, phase="planning")
        output = self._parser.parse_planning_output(response.text)
        problems = _problems(output)
        if not problems:
            return output
        repair = build_repair_messages(messages, response.text, problems)
        response = await ctx.llm(repair, phase="repair")
        output = self._parser.parse_planning_output(response.text)
        problems = _problems(output)
        if problems:
            raise PlanParseError(
                "the model's plan was unusable after one repair attempt: " + "; ".join(problems),
                raw_output=response.text,
                errors=problems,
                thread_id=ctx.thread_id,
                trace_id=ctx.trace_id,
            )
        return output
