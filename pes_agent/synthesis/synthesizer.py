"""The default synthesizer: one streamed model call over the query, plan and tool results."""

from __future__ import annotations

from pes_agent.planning.parser import OutputParser
from pes_agent.protocols import SynthesisContext
from pes_agent.synthesis.prompts import build_synthesis_messages

__all__ = ["LLMSynthesizer"]


class LLMSynthesizer:
    """Asks the model for the final answer and returns its text."""

    def __init__(self, parser: OutputParser | None = None) -> None:
        """Write answers with the run's model.

        Args:
            parser: Reads the model's answer; the default `OutputParser` when None.
        """
        self._parser = parser or OutputParser()

    async def synthesize(self, ctx: SynthesisContext) -> str:
        """Write the answer for the run described by `ctx`.

        Args:
            ctx: The run's query, history, plan, tool results and model caller.

        Returns:
            The answer's text, without thinking blocks.

        Raises:
            ProviderError: The model call failed.
        """
        # A tuple, which the model caller's request takes as it is: no list besides it kept
        # alive while the model answers.
        messages = tuple(
            build_synthesis_messages(
                system_prompt=ctx.system_prompt,
                history=ctx.history,
                query=ctx.props.query,
                planning=ctx.planning,
                results=ctx.results,
                steps=ctx.steps,
                calls=ctx.calls,
                passages=ctx.passages,
            )
        )
        response = await ctx.llm(messages, phase="synthesis")
        return self._parser.parse_synthesis_output(response.text)
