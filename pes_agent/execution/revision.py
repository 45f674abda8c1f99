"""Re-evaluating a plan while it runs: where it stands, what a revision may change, the outcome.

With `create_agent(reevaluate="on_failure" | "each_wave")` the executor pauses at the end of a
*wave* and asks a `PlanReviser` (protocols) whether the calls not yet run should change:

- a **wave** is the calls that finished since the last re-evaluation (or since the start). A
  call skipped because a dependency failed does not make a wave on its own: its cause was
  already in an earlier one.
- A wave **ends** when the executor is about to start calls whose dependencies it completed, or
  when no call is running any more. Then, if revisions are left (`max_revisions`), the reviser
  is asked: with `"each_wave"` when calls are still waiting to run or a call of the wave failed;
  with `"on_failure"` only when a call of the wave failed (an error result that is not a skip).
  While it is asked no call starts; calls already running go on and are never cancelled by a
  revision — their results count as usual, and the next wave includes them.
- A **revision** replaces every call not yet started by the calls the reviser returns. Step
  numbers never change: finished, running and replaced calls keep theirs, and the new calls are
  numbered after the last existing step, so `{step_N_result}` keeps pointing at the same call.
  New calls may use the results of finished and running calls and of new calls before them,
  never those of calls they replace. A replaced call never runs and has no result.

`revision_errors(progress, calls)` lists why proposed calls cannot replace the remaining ones;
`adopt_call_ids` gives proposed calls fresh ids where they reuse one; `PlanRevision` is the
outcome of one re-evaluation, as the executor reports it to its hooks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

from pes_agent.execution.dag import CallGraph, call_references
from pes_agent.planning.plan import ParsedToolCall
from pes_agent.tools.base import ToolResult

__all__ = [
    "PlanProgress",
    "PlanRevision",
    "RevisionStatus",
    "adopt_call_ids",
    "revision_errors",
    "same_calls",
]

#: `revised`: the calls not yet run were replaced. `kept`: the reviser kept them. `unusable`:
#: its answer could not be used, so they were kept. `failed`: asking it failed (kept too).
RevisionStatus = Literal["revised", "kept", "unusable", "failed"]


@dataclass(frozen=True, slots=True)
class PlanProgress:
    """Where a running plan stands at the end of a wave: what a `PlanReviser` is shown.

    Steps are 1-based positions in `calls`, which holds every call of the run so far: the
    planned ones, then each revision's, replaced ones included (they keep their numbers).
    """

    calls: tuple[ParsedToolCall, ...]
    #: Step number → result, for every finished call.
    results: Mapping[int, ToolResult]
    #: Steps started and not finished yet; a revision never cancels them.
    running: tuple[int, ...]
    #: Steps not started yet, in plan order: what a revision replaces.
    pending: tuple[int, ...]
    #: Steps an earlier revision replaced; they never run.
    replaced: tuple[int, ...]
    #: Steps that finished in this wave.
    wave: tuple[int, ...]
    #: Revisions made so far in this run, and how many are allowed.
    revisions: int
    max_revisions: int
    #: How many calls the plan may hold, replaced ones not counted.
    max_tool_calls: int

    @property
    def next_step(self) -> int:
        """The step number the first new call of a revision gets."""
        return len(self.calls) + 1

    def call(self, step: int) -> ParsedToolCall:
        """Look up the call a step number names.

        Args:
            step: The step number, 1-based, as in `pending`, `running` and `results`.

        Returns:
            The call of `step` (also of one replaced since, whose step number stays taken).
        """
        return self.calls[step - 1]


class PlanRevision(BaseModel):
    """The outcome of one re-evaluation (also the content of its PLAN observation).

    `revision` is the number of this revision (1, 2, …) when `status == "revised"`, else the
    number of revisions made so far. `calls` are the new calls, the first of them step
    `first_step`; `replaced` the ids of the calls they replace (`replaced_steps` their step
    numbers). `reason` says in a sentence
    why the plan was kept, and `problems` what was wrong with an unusable answer.
    """

    status: RevisionStatus
    revision: int
    wave: list[str] = Field(default_factory=list)
    replaced: list[str] = Field(default_factory=list)
    replaced_steps: list[int] = Field(default_factory=list)
    calls: list[ParsedToolCall] = Field(default_factory=list)
    first_step: int
    reason: str | None = None
    problems: list[str] = Field(default_factory=list)


def same_calls(proposed: Sequence[ParsedToolCall], progress: PlanProgress) -> bool:
    """Whether `proposed` repeats the calls not yet run exactly (which keeps the plan)."""
    pending = [progress.call(step) for step in progress.pending]
    return list(proposed) == pending


def adopt_call_ids(
    proposed: Sequence[ParsedToolCall], progress: PlanProgress
) -> list[ParsedToolCall]:
    """`proposed` with a fresh id for each call whose id an earlier call already has.

    Models often reuse the id of the call they replace, or restart at ``call_1``. Such a call
    gets ``call_<its step number>`` (or a free variant). A `dependsOn` naming the id of a call
    being replaced, which a new call took over, is pointed at that new call; one naming a
    finished or running call keeps meaning that call.
    """
    taken = {call.call_id for call in progress.calls}
    replaceable = {progress.call(step).call_id for step in (*progress.pending, *progress.replaced)}
    live = taken - replaceable
    renamed: dict[str, str] = {}
    fresh: list[ParsedToolCall] = []
    for offset, call in enumerate(proposed):
        if call.call_id not in taken:
            taken.add(call.call_id)
            fresh.append(call)
            continue
        step = progress.next_step + offset
        new_id = f"call_{step}"
        suffix = 1
        while new_id in taken or any(other.call_id == new_id for other in proposed):
            suffix += 1
            new_id = f"call_{step}_{suffix}"
        taken.add(new_id)
        if call.call_id in replaceable:
            renamed.setdefault(call.call_id, new_id)
        fresh.append(call.model_copy(update={"call_id": new_id}))
    if not renamed:
        return fresh
    return [
        call.model_copy(
            update={
                "depends_on": [
                    renamed.get(dep, dep) if dep not in live else dep for dep in call.depends_on
                ]
            }
        )
        for call in fresh
    ]


def revision_errors(progress: PlanProgress, proposed: Sequence[ParsedToolCall]) -> list[str]:
    """List why `proposed` cannot replace the calls not yet run, one sentence each; [] if none.

    Problems: a plan error among the new calls (see `execution.dag.plan_errors`: a reference
    to a later or missing step, an unknown `dependsOn`, a cycle), a call id already in use, a
    reference to a call being replaced or replaced earlier, and more calls than the plan may
    hold.
    """
    problems: list[str] = []
    everything = (*progress.calls, *proposed)
    graph = CallGraph.build(everything)
    start = len(progress.calls)
    gone = set(progress.pending) | set(progress.replaced)
    gone_ids = {progress.call(step).call_id for step in gone}
    for offset, call in enumerate(proposed):
        index = start + offset
        step = index + 1
        label = f'New step {step} ("{call.call_id}")'
        problems.extend(graph.problems[index])
        for target in sorted(call_references(call) & gone):
            problems.append(
                f"{label} refers to step_{target}_result, a call that is replaced and never "
                "runs; use the results of finished or running steps, or of new calls."
            )
        for dep in call.depends_on:
            if dep in gone_ids:
                problems.append(
                    f'{label} depends on "{dep}", a call that is replaced and never runs.'
                )
    kept = len(progress.calls) - len(progress.pending) - len(progress.replaced)
    if kept + len(proposed) > progress.max_tool_calls:
        problems.append(
            f"The revised plan would hold {kept + len(proposed)} calls, more than the limit of "
            f"{progress.max_tool_calls}; propose at most {max(progress.max_tool_calls - kept, 0)}."
        )
    return list(dict.fromkeys(problems))
