"""SynthesisSystem [10]: query, plan and tool results become the answer."""

from __future__ import annotations

from typing import Any, ClassVar

from ecs_core import EntityId, World
from pes_agent.observing.types import ObservationType
from pes_agent.pes.base import PhaseSystem, returned
from pes_agent.pes.components import Executed, Phase, Planned, RunSpec, RunTelemetry, Synthesized
from pes_agent.protocols import SynthesisContext, Synthesizer

__all__ = ["SynthesisSystem"]


class SynthesisSystem(PhaseSystem):
    """Runs the synthesizer once the tools are done and records SYNTHESIS."""

    phase: ClassVar[Phase] = "synthesis"
    requires = (Planned, Executed)
    done_when = (Synthesized,)

    def __init__(self, synthesizer: Synthesizer) -> None:
        self._synthesizer = synthesizer

    async def run(
        self,
        world: World,
        entity: EntityId,
        spec: RunSpec,
        telemetry: RunTelemetry,
        *inputs: Any,
    ) -> None:
        planned: Planned = inputs[0]
        executed: Executed = inputs[1]
        answer = await self._synthesizer.synthesize(
            SynthesisContext(
                props=spec.props,
                thread_id=spec.thread_id,
                trace_id=spec.trace_id,
                system_prompt=spec.system_prompt,
                history=spec.history,
                planning=planned.output,
                results=executed.results,
                llm=telemetry.llm,
            )
        )
        text = returned(answer, str, self._synthesizer, "synthesize")
        await telemetry.record(
            ObservationType.SYNTHESIS, "Answer written", {"status": "done", "length": len(text)}
        )
        world.add_component(entity, Synthesized(text=text))
