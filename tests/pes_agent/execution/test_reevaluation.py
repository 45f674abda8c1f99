"""Re-evaluation in the executors: waves, revisions, their bounds, and the plan kept."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from pes_agent.config import Reevaluate
from pes_agent.errors import PlanParseError, ProviderError
from pes_agent.execution.executors import ConcurrentExecutor, SequentialExecutor
from pes_agent.execution.revision import PlanProgress, PlanRevision, adopt_call_ids
from pes_agent.planning.plan import ParsedToolCall
from pes_agent.protocols import ExecutionContext, Executor, Reevaluation
from pes_agent.tools import ToolRegistry, tool
from pes_agent.tools.base import ToolResult

Answer = Callable[[PlanProgress], Sequence[ParsedToolCall] | None]


class Reviser:
    """A `PlanReviser` that answers with `answer(progress)` and keeps every progress it saw."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.seen: list[PlanProgress] = []

    async def revise(self, progress: PlanProgress) -> Sequence[ParsedToolCall] | None:
        self.seen.append(progress)
        return self.answer(progress)


class Outcomes:
    """Hooks that keep the re-evaluation outcomes and the calls that started."""

    def __init__(self) -> None:
        self.outcomes: list[PlanRevision] = []
        self.started: list[str] = []

    async def on_call_start(self, call: ParsedToolCall, arguments: dict[str, Any]) -> None:
        self.started.append(call.call_id)

    async def on_call_end(self, call: ParsedToolCall, result: ToolResult) -> None:
        return None

    async def on_plan_revision(self, outcome: PlanRevision) -> None:
        self.outcomes.append(outcome)


ran: list[str] = []


@tool
async def work(name: str, seconds: float = 0.0) -> str:
    """Note the call, wait, and return its name."""
    ran.append(name)
    await asyncio.sleep(seconds)
    return name


@tool
def fail(name: str) -> str:
    """Always fail."""
    ran.append(name)
    raise RuntimeError(f"{name} is down")


def w(
    call_id: str, name: str | None = None, *, after: Sequence[str] = (), **args: Any
) -> ParsedToolCall:
    return ParsedToolCall(
        call_id=call_id,
        tool_name="work",
        arguments={"name": name or call_id, **args},
        depends_on=list(after),
    )


def f(call_id: str) -> ParsedToolCall:
    return ParsedToolCall(call_id=call_id, tool_name="fail", arguments={"name": call_id})


def context(
    reviser: Reviser, mode: Reevaluate, hooks: Outcomes, *, max_revisions: int = 2, **options: Any
) -> ExecutionContext:
    registry = ToolRegistry([work, fail])
    return ExecutionContext(
        thread_id="t1",
        trace_id="tr1",
        tools=registry.as_mapping(),
        enabled_tools=frozenset(registry.names),
        hooks=hooks,
        reevaluation=Reevaluation(mode=mode, reviser=reviser, max_revisions=max_revisions),
        **options,
    )


@pytest.fixture(params=[ConcurrentExecutor, SequentialExecutor])
def executor(request: pytest.FixtureRequest) -> Executor:
    """Each shared-semantics test runs against both executors."""
    made: Executor = request.param()
    return made


@pytest.fixture(autouse=True)
def _fresh_log() -> None:
    ran.clear()


async def test_revision_replaces_the_remaining_calls_and_the_replaced_call_never_runs(
    executor: Executor,
) -> None:
    """After step 2 fails, step 3 is replaced by a call that uses finished step 1's result."""
    plan = [w("c1", "alpha"), f("c2"), w("c3", "{step_2_result}")]
    reviser = Reviser(lambda progress: [w("c4", "{step_1_result} again")])
    hooks = Outcomes()
    results = await executor.execute(plan, context(reviser, "on_failure", hooks))

    # The replaced call never ran.
    assert "{step_2_result}" not in ran
    assert "c3" not in hooks.started
    assert [(r.call_id, r.status, r.output) for r in results] == [
        ("c1", "success", "alpha"),
        ("c2", "error", None),
        ("c4", "success", "alpha again"),
    ]
    [progress] = reviser.seen
    assert (progress.wave, progress.pending, progress.running, progress.next_step) == (
        (1, 2),
        (3,),
        (),
        4,
    )
    assert progress.results[1].output == "alpha"
    [outcome] = hooks.outcomes
    assert (outcome.status, outcome.revision, outcome.replaced, outcome.first_step) == (
        "revised",
        1,
        ["c3"],
        4,
    )
    assert outcome.replaced_steps == [3]
    assert [call.call_id for call in outcome.calls] == ["c4"]


async def test_max_revisions_bounds_model_and_tool_calls_when_the_reviser_always_revises(
    executor: Executor,
) -> None:
    """A reviser that always adds two more calls is asked max_revisions times, no more."""
    counter = iter(range(100))

    def more(progress: PlanProgress) -> list[ParsedToolCall]:
        n = next(counter)
        return [w(f"n{n}a"), w(f"n{n}b", after=[f"n{n}a"])]

    reviser = Reviser(more)
    hooks = Outcomes()
    plan = [w("c1"), w("c2", after=["c1"])]
    results = await executor.execute(plan, context(reviser, "each_wave", hooks, max_revisions=2))

    assert len(reviser.seen) == 2
    assert [o.revision for o in hooks.outcomes] == [1, 2]
    # c1, then the first revision's first call, then the second revision's two calls.
    assert ran == ["c1", "n0a", "n1a", "n1b"]
    assert [r.call_id for r in results] == ["c1", "n0a", "n1a", "n1b"]


async def test_on_failure_revisions_stop_at_the_limit_when_every_new_call_fails(
    executor: Executor,
) -> None:
    """A reviser that answers each failure with another failing call is asked twice only."""
    counter = iter(range(100))
    reviser = Reviser(lambda progress: [f(f"retry{next(counter)}")])
    hooks = Outcomes()
    results = await executor.execute([f("c1")], context(reviser, "on_failure", hooks))
    assert len(reviser.seen) == 2
    assert ran == ["c1", "retry0", "retry1"]
    assert [r.status for r in results] == ["error", "error", "error"]


def _refers_to_replaced(progress: PlanProgress) -> list[ParsedToolCall]:
    return [w("c9", "{step_3_result}")]


def _unparseable(progress: PlanProgress) -> list[ParsedToolCall]:
    raise PlanParseError("bad answer", errors=["not JSON"])


def _provider_down(progress: PlanProgress) -> list[ParsedToolCall]:
    raise ProviderError("the model is down")


def _buggy(progress: PlanProgress) -> list[ParsedToolCall]:
    raise KeyError("oops")


def _too_many(progress: PlanProgress) -> list[ParsedToolCall]:
    return [w(f"x{i}") for i in range(5)]


@pytest.mark.parametrize(
    ("answer", "status", "problem"),
    [
        (_refers_to_replaced, "unusable", "a call that is replaced and never runs"),
        (_unparseable, "unusable", "not JSON"),
        (_too_many, "unusable", "more than the limit of 4"),
        (_provider_down, "failed", "the model is down"),
        (_buggy, "failed", "KeyError"),
    ],
)
async def test_an_unusable_revision_keeps_the_plan(
    executor: Executor, answer: Answer, status: str, problem: str
) -> None:
    """A revision that cannot be used, or a failed re-evaluation, leaves the plan as it was."""
    plan = [w("c1"), w("c2", after=["c1"]), w("c3", after=["c2"])]
    hooks = Outcomes()
    results = await executor.execute(
        plan, context(Reviser(answer), "each_wave", hooks, max_tool_calls=4)
    )
    assert [(r.call_id, r.status) for r in results] == [
        ("c1", "success"),
        ("c2", "success"),
        ("c3", "success"),
    ]
    # Asked after c1 and after c2, each time in vain; nothing is left to ask about after c3.
    assert [o.status for o in hooks.outcomes] == [status, status]
    first = hooks.outcomes[0]
    assert problem in " ".join([*first.problems, first.reason or ""])


async def test_on_failure_does_not_ask_the_reviser_when_nothing_failed(
    executor: Executor,
) -> None:
    """With "on_failure" a plan whose calls all succeed is never re-evaluated."""
    reviser = Reviser(lambda progress: [])
    hooks = Outcomes()
    plan = [w("c1"), w("c2", "{step_1_result}"), w("c3", after=["c2"])]
    results = await executor.execute(plan, context(reviser, "on_failure", hooks))
    assert reviser.seen == []
    assert hooks.outcomes == []
    assert [r.status for r in results] == ["success"] * 3


@pytest.mark.parametrize(("mode", "limit"), [("never", 2), ("each_wave", 0)])
async def test_never_or_no_revisions_left_never_asks(
    executor: Executor, mode: Reevaluate, limit: int
) -> None:
    """`reevaluate="never"` or `max_revisions=0` runs the plan without asking."""
    reviser = Reviser(lambda progress: [])
    hooks = Outcomes()
    plan = [f("c1"), w("c2", after=["c1"])]
    await executor.execute(plan, context(reviser, mode, hooks, max_revisions=limit))
    assert reviser.seen == []


async def test_keeping_the_plan_runs_the_remaining_calls(executor: Executor) -> None:
    """A reviser that keeps (None, or the same calls) changes nothing but is recorded."""
    answers: list[Answer] = [
        lambda progress: None,
        lambda progress: [progress.call(step) for step in progress.pending],
    ]
    reviser = Reviser(lambda progress: answers[len(reviser.seen) - 1](progress))
    hooks = Outcomes()
    plan = [w("c1"), w("c2", after=["c1"]), w("c3", after=["c2"])]
    results = await executor.execute(plan, context(reviser, "each_wave", hooks))
    assert [r.call_id for r in results] == ["c1", "c2", "c3"]
    assert [o.status for o in hooks.outcomes] == ["kept", "kept"]
    assert [o.revision for o in hooks.outcomes] == [0, 0]


async def test_a_wave_ends_only_when_calls_are_about_to_start() -> None:
    """Two parallel calls finishing one after the other make one wave for their dependent."""
    reviser = Reviser(lambda progress: None)
    plan = [w("c1", seconds=0.01), w("c2", seconds=0.1), w("c3", after=["c1", "c2"])]
    await ConcurrentExecutor().execute(plan, context(reviser, "each_wave", Outcomes()))
    assert [p.wave for p in reviser.seen] == [(1, 2)]


async def test_running_calls_are_not_cancelled_by_a_revision() -> None:
    """A revision made while a call runs leaves it running; its result counts as usual."""
    reviser = Reviser(lambda progress: [w("c4", "recovered")])
    hooks = Outcomes()
    plan = [w("c1", "slow", seconds=0.3), f("c2"), w("c3", "{step_2_result}")]
    results = await ConcurrentExecutor().execute(plan, context(reviser, "on_failure", hooks))
    [progress] = reviser.seen
    assert progress.running == (1,)
    assert progress.pending == (3,)
    assert [(r.call_id, r.status) for r in results] == [
        ("c1", "success"),
        ("c2", "error"),
        ("c4", "success"),
    ]
    assert ran == ["slow", "c2", "recovered"]


async def test_new_calls_may_wait_for_a_running_call() -> None:
    """A new call referring to a still-running step starts once that step finishes."""
    reviser = Reviser(lambda progress: [w("c4", "after {step_1_result}")])
    plan = [w("c1", "slow", seconds=0.2), f("c2"), w("c3", after=["c2"])]
    results = await ConcurrentExecutor().execute(plan, context(reviser, "on_failure", Outcomes()))
    assert results[-1].output == "after slow"


async def test_independent_calls_still_overlap_when_nothing_fails() -> None:
    """With "on_failure", a plan that does not fail keeps its concurrency."""
    reviser = Reviser(lambda progress: None)
    plan = [w(f"c{i}", seconds=0.2) for i in range(4)]
    loop = asyncio.get_running_loop()
    started = loop.time()
    await ConcurrentExecutor().execute(plan, context(reviser, "on_failure", Outcomes()))
    assert loop.time() - started < 0.35


async def test_reused_call_ids_get_fresh_ids_and_dependencies_follow() -> None:
    """A new call reusing the replaced call's id is renamed; a dependsOn naming it follows."""
    reviser = Reviser(lambda progress: [w("c3", "new"), w("c1", "newer", after=["c3"])])
    hooks = Outcomes()
    plan = [w("c1"), f("c2"), w("c3", after=["c2"])]
    results = await ConcurrentExecutor().execute(plan, context(reviser, "on_failure", hooks))
    assert [r.call_id for r in results] == ["c1", "c2", "call_4", "call_5"]
    assert hooks.outcomes[0].calls[1].depends_on == ["call_4"]
    assert ran[-2:] == ["new", "newer"]


def test_adopt_call_ids_keeps_a_dependency_on_a_finished_call() -> None:
    """A dependsOn naming a finished call still means that call after renaming."""
    progress = PlanProgress(
        calls=(w("c1"), w("c2")),
        results={},
        running=(),
        pending=(2,),
        replaced=(),
        wave=(1,),
        revisions=0,
        max_revisions=2,
        max_tool_calls=32,
    )
    adopted = adopt_call_ids([w("c1", after=["c1"]), w("c2", after=["c2"])], progress)
    assert [(c.call_id, c.depends_on) for c in adopted] == [
        ("call_3", ["c1"]),
        ("call_4", ["call_4"]),
    ]
