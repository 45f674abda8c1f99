"""The default planner: one streamed model call, parsed, with one repair round-trip."""

from __future__ import annotations

from pes_agent.config import PlanningMode
from pes_agent.errors import PlanParseError, ProviderError
from pes_agent.execution.dag import plan_errors
from pes_agent.observing.logs import get_logger
from pes_agent.observing.types import ObservationType
from pes_agent.planning.parser import OutputParser
from pes_agent.planning.plan import PlanningOutput
from pes_agent.planning.prompts import build_planning_messages
from pes_agent.planning.streaming import PlanStreamReader
from pes_agent.planning.structured import (
    PlanChannel,
    StructuredRefusals,
    check_planning_mode,
    refused_structured_output,
    structured_mode_error,
    structured_output_of,
    thinking_enabled,
)
from pes_agent.protocols import PlanningContext

__all__ = ["LLMPlanner"]

_log = get_logger("pes_agent.planning")

# The plain-text channel, frozen and so shared by every run: not one more object per run.
_TEXT = PlanChannel()


def _problems(output: PlanningOutput) -> list[str]:
    problems = list(output.errors)
    if output.intent is None and output.plan is None and output.tool_calls is None and not problems:
        problems.append('no calls and no "Intent:" line found; reply in the format described above')
    if output.tool_calls:
        problems.extend(plan_errors(output.tool_calls))
    return problems


def _reader(ctx: PlanningContext, parser: OutputParser) -> PlanStreamReader | None:
    """A reader submitting each call of the answer as it streams, when the run dispatches
    calls early and the answer is read by the default parser (whose reading it mirrors)."""
    if ctx.dispatch is None or type(parser) is not OutputParser:
        return None
    return PlanStreamReader(ctx.dispatch.submit)


class LLMPlanner:
    """Asks the model for intent, plan and tool calls; repairs an unusable answer once.

    `planning_mode` (`"auto"`, `"structured"`, `"text"`; per call `RunOptions.planning_mode`)
    chooses between the provider's structured output and the prompt alone — see
    `pes_agent.planning.structured`. In `"auto"`, a server that refuses structured output
    is asked again in text at once, and in text from then on; the planner remembers this per
    provider object and records a PLAN observation with status `"structured_fallback"`.

    Raises `PlanParseError` (with the raw output and the problems) when the repaired answer is
    still unusable; the run then ends with status `error`.
    """

    def __init__(
        self, parser: OutputParser | None = None, *, planning_mode: PlanningMode = "auto"
    ) -> None:
        """Plan with the run's model; pass it to `create_agent(planner=...)` to tune it.

        Args:
            parser: Reads the model's answer; the default `OutputParser` when None.
            planning_mode: `"auto"`, `"structured"` or `"text"`, as the class says.

        Raises:
            UsageError: `planning_mode` is none of those.
        """
        self._parser = parser or OutputParser()
        self.planning_mode: PlanningMode = check_planning_mode(planning_mode)
        self._refusals = StructuredRefusals()

    def _channel(self, ctx: PlanningContext, mode: PlanningMode) -> PlanChannel:
        if mode == "text":
            return _TEXT
        provider = ctx.provider
        output = structured_output_of(provider)
        if output is None:
            if mode == "structured":
                raise structured_mode_error(provider)
            return _TEXT
        if mode == "auto" and self._refusals.refused(provider):
            return _TEXT
        names = tuple(schema.name for schema in ctx.tools)
        if output == "response_format":
            return PlanChannel("response_format", names)
        return PlanChannel(
            "forced_tool",
            names,
            optional_tool=thinking_enabled(provider, ctx.llm_params.extra),
        )

    async def plan(self, ctx: PlanningContext) -> PlanningOutput:
        """Plan the run described by `ctx`.

        Args:
            ctx: The run's query, history, tools, state and model caller.

        Returns:
            The intent, plan and tool calls.

        Raises:
            PlanParseError: The answer was unusable even after the repair round-trip.
            UsageError: `"structured"` mode on a provider without structured output.
            ProviderError: The model call failed.
        """
        options = ctx.props.options
        mode = self.planning_mode
        if options is not None and options.planning_mode is not None:
            mode = options.planning_mode
        channel = self._channel(ctx, mode)
        # A tuple, which the model caller's request takes as it is: no list besides it kept
        # alive while the model answers.
        base = tuple(
            build_planning_messages(
                system_prompt=ctx.system_prompt,
                history=ctx.history,
                query=ctx.props.query,
                tools=ctx.tools,
                passages=ctx.passages,
            )
        )
        messages = channel.prompt(base)
        reader = _reader(ctx, self._parser)
        try:
            # The channel's call awaited here, its answer read after: no coroutine of the
            # channel's alive in each run while the model answers (as `channel.ask` would).
            response = await channel.call(ctx.llm, messages, phase="planning", listener=reader)
        except ProviderError as error:
            if not (mode == "auto" and channel.structured and refused_structured_output(error)):
                raise
            await self._fall_back(ctx, channel, error)
            if ctx.dispatch is not None:
                await ctx.dispatch.discard("structured planning was refused")
            channel = _TEXT
            messages = base
            reader = _reader(ctx, self._parser)
            response = await channel.call(ctx.llm, messages, phase="planning", listener=reader)
        reply = channel.reply(response)
        output = self._read(reply.text, reader)
        problems = _problems(output)
        if not problems:
            return output
        if ctx.dispatch is not None:
            # Calls of the unusable answer may have started: the repair starts from scratch.
            await ctx.dispatch.discard("the plan could not be used: " + "; ".join(problems))
        repair = channel.repair(messages, reply, problems)
        reader = _reader(ctx, self._parser)
        reply = channel.reply(await channel.call(ctx.llm, repair, phase="repair", listener=reader))
        output = self._read(reply.text, reader)
        problems = _problems(output)
        if problems:
            raise PlanParseError(
                "the model's plan was unusable after one repair attempt: " + "; ".join(problems),
                raw_output=reply.text,
                errors=problems,
                thread_id=ctx.thread_id,
                trace_id=ctx.trace_id,
            )
        return output

    def _read(self, text: str, reader: PlanStreamReader | None) -> PlanningOutput:
        """The plan in `text`; the lines the reader read as it streamed are not read again."""
        if reader is None:
            return self._parser.parse_planning_output(text)
        return self._parser.parse_planning_output(text, read=reader.read)

    async def _fall_back(
        self, ctx: PlanningContext, channel: PlanChannel, error: ProviderError
    ) -> None:
        """Remember that `ctx.provider` refused structured output; log and record it."""
        provider = ctx.provider
        self._refusals.remember(provider)
        name = getattr(provider, "name", None)
        model = getattr(provider, "model", None)
        _log.warning(
            "structured_planning_refused",
            thread_id=ctx.thread_id,
            trace_id=ctx.trace_id,
            provider=name,
            model=model,
            structured_output=channel.kind,
            error=error.message,
        )
        if ctx.record is not None:
            await ctx.record(
                ObservationType.PLAN,
                "Structured planning refused; planning in text",
                {
                    "status": "structured_fallback",
                    "structured_output": channel.kind,
                    "provider": name,
                    "model": model,
                    "reason": error.message,
                },
            )
