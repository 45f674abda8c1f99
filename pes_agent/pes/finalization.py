"""FinalizationSystem [20] and ErrorHandlingSystem [99]: every run ends in one of them."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from ecs_core import EntityId, TerminalComponent, World
from pes_agent.config import AgentState, StateSaving
from pes_agent.messages import ConversationMessage, MessageRole
from pes_agent.observation_types import ObservationType
from pes_agent.pes.base import PhaseSystem
from pes_agent.pes.components import (
    Executed,
    Finalized,
    Phase,
    RunFailed,
    RunSpec,
    RunTelemetry,
    Synthesized,
)
from pes_agent.storage.base import Storage

__all__ = ["ErrorHandlingSystem", "FinalizationSystem"]


def _status(executed: Executed) -> Literal["success", "partial"]:
    return "partial" if any(r.status == "error" for r in executed.results) else "success"


class FinalizationSystem(PhaseSystem):
    """Saves the user and AI messages (and state) in one commit, then ends the run."""

    phase: ClassVar[Phase] = "finalization"
    requires = (Executed, Synthesized)
    done_when = (TerminalComponent,)

    def __init__(self, storage: Storage, state_saving: StateSaving) -> None:
        self._storage = storage
        self._state_saving = state_saving

    async def run(
        self,
        world: World,
        entity: EntityId,
        spec: RunSpec,
        telemetry: RunTelemetry,
        *inputs: Any,
    ) -> None:
        executed: Executed = inputs[0]
        synthesized: Synthesized = inputs[1]
        status = _status(executed)
        user = ConversationMessage(
            thread_id=spec.thread_id,
            role=MessageRole.USER,
            content=spec.props.query,
            metadata={"trace_id": spec.trace_id, "user_id": spec.props.user_id},
        )
        answer = ConversationMessage(
            thread_id=spec.thread_id,
            role=MessageRole.AI,
            content=synthesized.text,
            metadata={
                "trace_id": spec.trace_id,
                "status": status,
                "tool_calls": len(executed.results),
            },
        )
        state: AgentState | None = None
        if self._state_saving == "implicit" and spec.thread.state.data != spec.state_snapshot:
            state = spec.thread.state
        saved = await self._storage.commit_turn(spec.thread_id, [user, answer], state)
        if saved is not None:
            await telemetry.record(
                ObservationType.STATE_UPDATE,
                "State saved",
                {"version": saved.version, "data": saved.data},
            )
        await telemetry.record(
            ObservationType.FINAL_RESPONSE,
            "Final response",
            {"message": answer.model_dump(mode="json"), "status": status},
        )
        world.add_component(entity, Finalized(message=answer))
        world.add_component(entity, TerminalComponent(reason="completed"))


class ErrorHandlingSystem:
    """Records an ERROR observation for each failed run and ends it; nothing is saved."""

    name = "ErrorHandlingSystem"

    async def process(self, world: World) -> None:
        for entity, (_spec, telemetry, failed) in list(
            world.query(RunSpec, RunTelemetry, RunFailed, exclude=(TerminalComponent,))
        ):
            content: dict[str, Any] = {"phase": failed.phase, "error": failed.message}
            if failed.raw_output is not None:
                content["raw"] = failed.raw_output
            if failed.error is not None:
                content["errorType"] = type(failed.error).__name__
            await telemetry.record(
                ObservationType.ERROR,
                f"{failed.phase.capitalize()} failed",
                content,
            )
            world.add_component(entity, TerminalComponent(reason=f"error in {failed.phase}"))
