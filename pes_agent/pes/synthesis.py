"""SynthesisSystem [10]: query, plan and tool results become the answer."""

from __future__ import annotations

from typing import ClassVar

from pes_agent.observing.types import ObservationType
from pes_agent.pes.base import PhaseRun, PhaseSystem, passages_of, returned
from pes_agent.pes.components import Executed, Phase, Planned, Synthesized
from pes_agent.pes.resources import ResourceTable
from pes_agent.protocols import SynthesisContext, Synthesizer

__all__ = ["SynthesisSystem"]


class SynthesisSystem(PhaseSystem[Planned, Executed]):
    """Runs the synthesizer once the tools are done and records SYNTHESIS."""

    phase: ClassVar[Phase] = "synthesis"
    done_when = (Synthesized,)

    def __init__(self, resources: ResourceTable, synthesizer: Synthesizer) -> None:
        super().__init__(resources)
        self._synthesizer = synthesizer

    async def run(self, run: PhaseRun, planned: Planned, executed: Executed) -> None:
        spec = run.spec
        answer = await self._synthesizer.synthesize(
            SynthesisContext(
                props=spec.props,
                thread_id=spec.thread_id,
                trace_id=spec.trace_id,
                system_prompt=spec.system_prompt,
                history=spec.history,
                planning=planned.output,
                results=executed.results,
                llm=run.resources.llm,
                steps=executed.steps,
                calls=executed.calls,
                passages=passages_of(run),
            )
        )
        text = returned(answer, str, self._synthesizer, "synthesize")
        await run.resources.recorder.record(
            ObservationType.SYNTHESIS, "Answer written", {"status": "done", "length": len(text)}
        )
        run.add(Synthesized(text=text))
