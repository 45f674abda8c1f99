"""FinalizationSystem [20]: a run that got this far saves its turn, FINAL_RESPONSE and ends."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Literal

from ecs_core import TerminalComponent
from pes_agent.config import AgentState, StateSaving
from pes_agent.errors import StorageError
from pes_agent.observing.logs import get_logger
from pes_agent.observing.types import ObservationType
from pes_agent.pes.base import PhaseRun, PhaseSystem
from pes_agent.pes.components import (
    Executed,
    Finalized,
    Phase,
    Retrieved,
    RunSpec,
    Synthesized,
)
from pes_agent.pes.resources import ResourceTable
from pes_agent.storage.base import Storage
from pes_agent.threads.messages import ConversationMessage, MessageRole
from pes_agent.threads.state import commit_turn_merging_state
from pes_agent.tools.base import ToolResult

__all__ = ["FinalizationSystem", "run_status"]

_log = get_logger("pes_agent.pes")


def run_status(
    results: Sequence[ToolResult], retrieved: Retrieved | None
) -> Literal["success", "partial"]:
    """`partial` when a tool call failed or the retriever did, else `success`."""
    # A loop rather than any() over a generator: every run asks this twice (here and for
    # its response), and a generator costs a Python call per result.
    for result in results:
        if result.status == "error":
            return "partial"
    if retrieved is not None and retrieved.error is not None:
        return "partial"
    return "success"


def _transient(error: Exception) -> bool:
    """Whether the same save may succeed if tried again (a busy database, a lost connection)."""
    if isinstance(error, StorageError):
        return error.transient
    # A pluggable store may let its driver's network errors through unwrapped.
    return isinstance(error, ConnectionError | TimeoutError)


class FinalizationSystem(PhaseSystem[Executed, Synthesized]):
    """Saves the user and AI messages (and state) in one commit, then ends the run.

    A transient storage error is retried once, with the run's trace id, so a commit that
    landed although its caller saw an error is not written twice. When the save fails for
    good, the run fails, but the answer stays on the entity (`Finalized`) for the caller.
    """

    phase: ClassVar[Phase] = "finalization"
    done_when = (TerminalComponent,)

    def __init__(
        self, resources: ResourceTable, storage: Storage, state_saving: StateSaving
    ) -> None:
        super().__init__(resources)
        self._storage = storage
        self._state_saving = state_saving

    async def run(self, run: PhaseRun, executed: Executed, synthesized: Synthesized) -> None:
        spec = run.spec
        status = run_status(executed.results, run.world.get_component(run.entity, Retrieved))
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

        async def commit() -> AgentState | None:
            try:
                return await self._save_turn(spec, [user, answer])
            except Exception as error:
                if not _transient(error):
                    raise
                _log.warning(
                    "turn_save_retried",
                    thread_id=spec.thread_id,
                    trace_id=spec.trace_id,
                    error_type=type(error).__name__,
                )
                return await self._save_turn(spec, [user, answer])

        async def commit_and_announce() -> None:
            saved = await commit()
            if saved is not None:
                await run.resources.recorder.record(
                    ObservationType.STATE_UPDATE,
                    "State saved",
                    {"version": saved.version, "data": saved.data, "saving": "implicit"},
                )
            await run.resources.recorder.record(
                ObservationType.FINAL_RESPONSE,
                "Final response",
                {"message": answer.model_dump(mode="json"), "status": status},
            )

        effects = run.resources.effects
        try:
            # On an engine the commit is a step, its observations recorded in it: a run taken
            # over after it saves and announces nothing again (the store writes a trace id's
            # turn once, so an engine may also do it again instead of recording it).
            await (
                commit_and_announce()
                if effects is None
                else effects.once("pes_agent.commit_turn", commit_and_announce, kind="idempotent")
            )
        except Exception as error:
            # The answer was written and paid for: hand it back with the error, never drop it.
            metadata = {**answer.metadata, "status": "error", "saved": False}
            run.add(Finalized(message=answer.model_copy(update={"metadata": metadata})))
            reason = str(error)
            raise StorageError(
                f"saving the turn to storage failed, so this answer is not in the thread's "
                f"history ({type(error).__name__}: {reason})",
                thread_id=spec.thread_id,
                trace_id=spec.trace_id,
            ) from error
        run.add(Finalized(message=answer))
        run.add(TerminalComponent(reason="completed"))

    async def _save_turn(
        self, spec: RunSpec, messages: list[ConversationMessage]
    ) -> AgentState | None:
        """Commit the turn's messages (and, saving implicitly, the run's state) in one go."""
        changed = self._state_saving == "implicit" and spec.thread.state.data != spec.state_snapshot
        return await commit_turn_merging_state(
            self._storage,
            spec.thread_id,
            messages,
            ours=spec.thread.state if changed else None,
            base=spec.state_snapshot,
            trace_id=spec.trace_id,
        )
