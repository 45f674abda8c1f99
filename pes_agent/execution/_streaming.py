"""Scheduling a plan that is still streaming: which of its calls may start before it is final.

A call submitted while the planner still writes the plan starts at once, once its inputs are
known, only when nothing the rest of the plan could say would change what it does:

- every placeholder names an earlier step (a forward reference waits: it is a plan error the
  final plan reports);
- it has no `dependsOn` (`after` in the compact protocol): a call id names every call that
  has it, and a later call of the plan may still take the same id;
- its call id is new (a repeated id is a plan error);
- it is within `max_tool_calls` (the refusal of a call past the limit names the plan's size).

Any other call waits for the plan to be final (`settle`), and is then scheduled from the final
plan's `CallGraph`, exactly as if the plan had been given whole: the calls that already run
are unaffected (a call that starts early never depends on a later one, so it cannot be part of
a cycle). Calls that need approval start like any other, but wait for the final plan before
anyone is asked (`CallRunner.feed`).
"""

from __future__ import annotations

from collections.abc import Callable

from pes_agent.execution._runner import CallRunner
from pes_agent.execution.dag import call_references
from pes_agent.planning.plan import ParsedToolCall

__all__ = ["StreamSchedule"]


class StreamSchedule:
    """Which calls of a streaming plan wait, for what, and when each may start."""

    __slots__ = (
        "_dependents",
        "_finished",
        "_ids",
        "_runner",
        "_settled",
        "_start",
        "_started",
        "_waiting",
    )

    def __init__(self, runner: CallRunner, start: Callable[[int], None]) -> None:
        self._runner = runner
        self._start = start  # starts the call at an index (the executor's task)
        self._started: list[bool] = []
        self._waiting: list[int] = []  # per call: unfinished calls it waits for
        self._dependents: list[list[int]] = []  # per call: who waits for it (before settle)
        self._finished: set[int] = set()
        self._ids: set[str] = set()
        self._settled = False

    def add(self, call: ParsedToolCall) -> None:
        """A call was submitted: start it if it may start now (see the module docstring)."""
        ledger = self._runner.ledger
        index = len(ledger.calls)
        needed = self._known_inputs(index, call)
        ledger.add(call, needed if needed is not None else frozenset())
        self._ids.add(call.call_id)
        self._started.append(False)
        self._dependents.append([])
        if needed is None or index >= self._runner.ctx.max_tool_calls:
            self._waiting.append(-1)  # scheduled once the plan is final
            return
        for dependency in needed:
            self._dependents[dependency].append(index)
        self._waiting.append(len(needed - self._finished))
        if self._waiting[index] == 0:
            self._begin(index)

    def settle(self, calls: list[ParsedToolCall]) -> None:
        """The plan is final: schedule every call not started from its graph."""
        runner = self._runner
        graph = runner.ledger.settle(calls)
        self._settled = True
        added = len(graph.calls) - len(self._started)
        self._started.extend([False] * added)
        self._waiting.extend([-1] * added)
        finished = self._finished
        for index in range(len(graph.calls)):
            if self._started[index]:
                continue
            needed = graph.dependencies[index]
            open_inputs = 0 if runner.refusal(index) else len(needed - finished)
            self._waiting[index] = open_inputs
            if open_inputs == 0:
                self._begin(index)

    def finish(self, index: int) -> None:
        """Call `index` ended: start the calls that waited for it last."""
        self._finished.add(index)
        ledger = self._runner.ledger
        dependents = ledger.graph.dependents[index] if self._settled else self._dependents[index]
        for dependent in dependents:
            if self._started[dependent] or self._waiting[dependent] <= 0:
                continue
            self._waiting[dependent] -= 1
            if self._waiting[dependent] == 0:
                self._begin(dependent)

    def _begin(self, index: int) -> None:
        self._started[index] = True
        self._start(index)

    def _known_inputs(self, index: int, call: ParsedToolCall) -> frozenset[int] | None:
        """The earlier calls `call` needs, or None when it must wait for the final plan."""
        if call.call_id in self._ids or call.depends_on:
            return None
        needed: set[int] = set()
        for step in call_references(call):
            if not 0 < step <= index:  # step 0, itself, or a later step
                return None
            needed.add(step - 1)
        return frozenset(needed)
