"""Scheduling with re-evaluation: which calls wait, are ready or run, and when the reviser
is asked (the rules are in `pes_agent.execution.revision`)."""

from __future__ import annotations

from collections.abc import Sequence

from pes_agent.errors import PlanParseError, RunError
from pes_agent.execution._runner import CallRunner, describe
from pes_agent.execution.revision import (
    PlanProgress,
    PlanRevision,
    RevisionStatus,
    adopt_call_ids,
    revision_errors,
    same_calls,
)
from pes_agent.planning.plan import ParsedToolCall
from pes_agent.protocols import Reevaluation

__all__ = ["WaveSchedule"]


class WaveSchedule:
    """The state of a re-evaluated `execute`: which calls wait, are ready or run, the current
    wave, and the revisions made."""

    __slots__ = (
        "consulting",
        "pending",
        "ready",
        "reevaluation",
        "revisions",
        "runner",
        "running",
        "waiting",
        "wave",
    )

    def __init__(self, runner: CallRunner, reevaluation: Reevaluation) -> None:
        self.runner = runner
        self.reevaluation = reevaluation
        self.revisions = 0
        self.consulting = False  # the reviser is being asked: no call starts meanwhile
        size = runner.ledger.size
        self.pending: set[int] = set(range(size))  # not started, not replaced
        self.running: set[int] = set()
        self.wave: list[int] = []
        self.waiting: dict[int, int] = {}
        self.ready: list[int] = []
        self._wait_for(range(size))

    def _wait_for(self, indices: Sequence[int]) -> None:
        """Count what each of `indices` still waits for; the ones waiting for nothing are ready."""
        runner = self.runner
        dependencies = runner.ledger.graph.dependencies
        for index in indices:
            # A refused call waits for nothing: its result is known already.
            open_deps = [
                dep for dep in dependencies[index] if dep in self.pending or dep in self.running
            ]
            self.waiting[index] = 0 if runner.refusal(index) else len(open_deps)
            if self.waiting[index] == 0:
                self.ready.append(index)

    def take_ready(self) -> list[int]:
        """Every ready call, in step order, now counted as running."""
        ready = sorted(self.ready)
        self.ready.clear()
        for index in ready:
            self.pending.discard(index)
            self.running.add(index)
        return ready

    def take_next(self) -> int | None:
        """The ready call with the lowest step number, now running; None when none is ready."""
        if not self.ready:
            return None
        index = min(self.ready)
        self.ready.remove(index)
        self.pending.discard(index)
        self.running.add(index)
        return index

    def finish(self, index: int) -> None:
        """A call ended: it joins the wave (unless it was only skipped) and releases its
        dependents."""
        ledger = self.runner.ledger
        self.running.discard(index)
        if index not in ledger.skipped:
            self.wave.append(index)
        for dependent in ledger.graph.dependents[index]:
            if dependent in self.pending and dependent in self.waiting:
                self.waiting[dependent] -= 1
                if self.waiting[dependent] == 0:
                    self.ready.append(dependent)

    def should_consult(self) -> bool:
        """Whether a wave ended that the reviser must see now."""
        if not self.wave or (not self.ready and self.running):
            return False  # no wave yet, or it goes on: nothing is about to start
        if self.revisions >= self.reevaluation.max_revisions:
            return False
        ledger = self.runner.ledger
        failed = any(
            (result := ledger.result_of(index)) is not None and result.status == "error"
            for index in self.wave
        )
        if self.reevaluation.mode == "on_failure":
            return failed
        return failed or bool(self.pending)

    async def consult(self) -> None:
        """Ask the reviser about the calls not yet run and adopt a usable revision; never
        raises (but for cancellation): whatever goes wrong keeps the plan."""
        ledger = self.runner.ledger
        wave = list(self.wave)
        self.wave.clear()
        pending = sorted(self.pending)
        progress = ledger.progress(
            pending,
            sorted(self.running),
            wave,
            self.revisions,
            self.reevaluation.max_revisions,
            self.runner.ctx.max_tool_calls,
        )
        outcome = await self._ask(progress)
        if outcome.status == "revised":
            self.revisions += 1
            added = ledger.adopt(pending, outcome.calls)
            self.pending.difference_update(pending)
            self.ready = [index for index in self.ready if index not in ledger.replaced]
            for index in pending:
                self.waiting.pop(index, None)
            self.pending.update(added)
            self._wait_for(added)
        await self.runner.report_revision(outcome)

    async def _ask(self, progress: PlanProgress) -> PlanRevision:
        """The reviser's answer on `progress`, checked: a revision to adopt, or why not."""
        wave_ids = [progress.call(step).call_id for step in progress.wave]

        def kept(status: RevisionStatus, reason: str, problems: Sequence[str] = ()) -> PlanRevision:
            return PlanRevision(
                status=status,
                revision=self.revisions,
                wave=wave_ids,
                first_step=progress.next_step,
                reason=reason,
                problems=list(problems),
            )

        try:
            proposed = await self.reevaluation.reviser.revise(progress)
        except PlanParseError as exc:
            return kept("unusable", "the re-evaluation answer could not be used", exc.errors)
        except RunError as exc:
            return kept("failed", f"the re-evaluation failed: {exc.message}")
        except Exception as exc:
            # A reviser's bug must not end the run: the plan goes on as it was.
            self.runner.logger().exception("plan_reviser_failed")
            return kept("failed", f"the re-evaluation failed: {describe(exc)}")
        if proposed is None:
            return kept("kept", "the model kept the remaining calls")
        calls = list(proposed)
        if not all(isinstance(call, ParsedToolCall) for call in calls):
            return kept("unusable", "the reviser returned something other than ParsedToolCalls")
        if same_calls(calls, progress):
            return kept("kept", "the model proposed the same remaining calls")
        calls = adopt_call_ids(calls, progress)
        problems = revision_errors(progress, calls)
        if problems:
            return kept("unusable", "the revised calls could not be used", problems)
        return PlanRevision(
            status="revised",
            revision=self.revisions + 1,
            wave=wave_ids,
            replaced=[progress.call(step).call_id for step in progress.pending],
            replaced_steps=list(progress.pending),
            calls=calls,
            first_step=progress.next_step,
        )
