"""TreeSearchSystem: MCTS over plans within its call budget, its tree kept as plain data."""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable

import pytest
import structlog

from ecs_core import EntityId, ErrorComponent, Runner, TerminalComponent, World
from pes_agent.ecs import checkpoints
from pes_agent.ecs.checkpoints import CheckpointSystem
from pes_agent.ecs.components import (
    CheckpointComponent,
    ConversationComponent,
    LLMComponent,
    PlanComponent,
    PlanSearchComponent,
)
from pes_agent.ecs.events import MCTSNodeScoredEvent
from pes_agent.ecs.messages import ChatMessage
from pes_agent.ecs.planning import PlanningSystem
from pes_agent.ecs.tree_search import (
    EXPANSION_PROMPT,
    ROOT,
    SCORING_PROMPT,
    SearchNode,
    Tree,
    TreeSearchSystem,
    backpropagate,
    best_path,
    parse_score,
    plan_of_node,
    query_with_plan,
    seed_plan,
    select_child,
)
from pes_agent.errors import UsageError
from pes_agent.providers.base import LLMRequest
from pes_agent.testing import ScriptedProvider

from .conftest import EventLog

GOAL = "Get to Lyon by noon"


class Judge:
    """A scripted model: expansion calls get `expand(plan)`, scoring calls `score(plan)`, where
    `plan` is the prompt's numbered plan text (it counts both kinds); calls of other phases
    get `other(request)`."""

    def __init__(
        self,
        expand: Callable[[str], str] = lambda plan: '["train", "car", "bike"]',
        score: Callable[[str], str] = lambda plan: "0.5",
        *,
        other: Callable[[LLMRequest], str] | None = None,
        latency_s: float = 0.0,
    ) -> None:
        self.expand, self.score, self.other = expand, score, other
        self.expansions = self.scorings = 0
        self.provider = ScriptedProvider([self._answer], repeat=True, latency_s=latency_s)

    def _answer(self, request: LLMRequest) -> str:
        if request.phase != "tree_search":
            assert self.other is not None, "unexpected " + request.phase + " call"
            return self.other(request)
        system, user = request.messages[0].content, request.messages[-1].content
        plan = user.split("\n", 2)[2].split("\n\n")[0]
        if system == EXPANSION_PROMPT:
            self.expansions += 1
            return self.expand(plan)
        assert system == SCORING_PROMPT
        self.scorings += 1
        return self.score(plan)


def failing(plan: str) -> str:
    """A reply that fails like a provider outage."""
    raise RuntimeError("model down")


def searcher(world: World, judge: Judge, *extra: object, **settings: int) -> EntityId:
    return world.create_entity(
        LLMComponent(judge.provider), PlanSearchComponent(GOAL, **settings), *extra
    )


def search_of(world: World, entity: EntityId) -> PlanSearchComponent:
    return world.require_component(entity, PlanSearchComponent)


def finished(entity: EntityId) -> Callable[[World], bool]:
    return lambda world: not world.require_component(entity, PlanSearchComponent).search_active


def node(parent: str | None, step: str | None, visits: int, value: float) -> SearchNode:
    return SearchNode(
        parent=parent, step=step, visits=visits, value=value, children=[], terminal=False
    )


def hand_built() -> Tree:
    """root -> a (5 visits, 0.6), b (unvisited), c (5 visits, 0.9); a -> a1 (5 visits, 0.6)."""
    tree: Tree = {
        ROOT: node(None, None, 10, 0.75),
        "1": node(ROOT, "a", 5, 0.6),
        "2": node(ROOT, "b", 0, 0.0),
        "3": node(ROOT, "c", 5, 0.9),
        "4": node("1", "a1", 5, 0.6),
    }
    tree[ROOT]["children"] = ["1", "2", "3"]
    tree["1"]["children"] = ["4"]
    return tree


# The pieces on plain data ---------------------------------------------------------------------


def test_ucb1_selection_prefers_an_unvisited_child() -> None:
    """Among visited and unvisited children the unvisited one is selected."""
    assert select_child(hand_built(), ROOT) == "2"


def test_ucb1_selection_balances_value_and_visits() -> None:
    """With all children visited, a rarely visited child wins on its bonus; without exploration
    the best mean wins."""
    tree = hand_built()
    tree["2"].update(visits=1, value=0.5)
    tree["3"].update(visits=9, value=0.6)
    tree[ROOT]["visits"] = 15
    assert select_child(tree, ROOT) == "2"
    assert select_child(tree, ROOT, exploration=0.0) == "1"  # 0.6 ties 0.6: the earlier child
    tree["3"]["value"] = 0.9
    assert select_child(tree, ROOT, exploration=0.0) == "3"


def test_select_child_of_a_leaf_is_a_usage_error() -> None:
    """A leaf has nothing to select: the error says to expand it."""
    with pytest.raises(UsageError, match="expand it first"):
        select_child(hand_built(), "2")


def test_backpropagation_updates_visits_and_means_up_to_the_root() -> None:
    """A score of 0 at a1 adds one visit to a1, a and the root and folds 0 into their means."""
    tree = hand_built()
    backpropagate(tree, "4", 0.0)
    assert (tree["4"]["visits"], tree["4"]["value"]) == (6, pytest.approx(0.5))
    assert (tree["1"]["visits"], tree["1"]["value"]) == (6, pytest.approx(0.5))
    assert (tree[ROOT]["visits"], tree[ROOT]["value"]) == (11, pytest.approx(7.5 / 11))
    assert (tree["3"]["visits"], tree["3"]["value"]) == (5, 0.9)


def test_best_path_follows_the_best_mean_and_plan_of_node_reads_steps() -> None:
    """The best plan descends by mean value; a node's plan is its steps from the root."""
    tree = hand_built()
    assert best_path(tree) == ["c"]
    tree["1"]["value"] = 0.95
    assert best_path(tree) == ["a", "a1"]
    assert plan_of_node(tree, "4") == ["a", "a1"]
    assert best_path({}) == []


@pytest.mark.parametrize(
    ("text", "score"),
    [
        ("0.7", 0.7),
        ("Score: .25", 0.25),
        ('{"score": 0.9}', 0.9),
        ("70%", 0.7),
        ("I'd say 7/10.", 0.7),
        ("8 out of 10", 0.8),
        ("7", 0.7),
        ("85", 0.85),
        ("1", 1.0),
        ("<think>maybe 0.1</think>0.6", 0.6),
    ],
)
def test_parse_score_reads_what_models_write(text: str, score: float) -> None:
    """Decimals, JSON, percentages, fractions and out-of-ten answers become 0-1 scores."""
    assert parse_score(text) == pytest.approx(score)


@pytest.mark.parametrize("text", ["no idea", "", "1500", "3/0", "12/10"])
def test_parse_score_refuses_what_is_not_a_score(text: str) -> None:
    """No number, an impossible scale or a value off every scale is no score."""
    assert parse_score(text) is None


# The system ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("iterations", "branching", "max_depth"),
    [(7, 3, 3), (20, 2, 2), (10, 2, 1), (1, 3, 3), (0, 3, 3)],
)
async def test_a_search_never_makes_more_calls_than_iterations(
    world: World, iterations: int, branching: int, max_depth: int
) -> None:
    """Total calls stay within `iterations`, calls per tick within iterations_per_tick, and the
    search ends with a best plan no deeper than max_depth."""
    world.register_system(TreeSearchSystem(iterations_per_tick=2), priority=0)
    judge = Judge()
    entity = searcher(world, judge, iterations=iterations, branching=branching, max_depth=max_depth)
    per_tick: list[int] = []
    for _ in range(iterations + 2):
        before = judge.provider.calls
        await world.process()
        per_tick.append(judge.provider.calls - before)
    search = search_of(world, entity)
    assert not search.search_active
    assert judge.provider.calls <= iterations
    assert max(per_tick) <= 2
    assert search.iterations_done == iterations
    assert search.best_plan is not None
    assert len(search.best_plan) <= max_depth
    assert all(len(search.tree[n]["children"]) <= branching for n in search.tree)


async def test_a_search_expands_scores_and_backpropagates_step_by_step(world: World) -> None:
    """Iteration 1 expands the root, iterations 2-4 score its children (one event each), and
    iteration 5 expands the best child."""
    world.register_system(TreeSearchSystem(iterations_per_tick=1), priority=0)
    scores = {"1. train": "0.9", "1. car": "0.4", "1. bike": "0.1"}
    judge = Judge(score=lambda plan: scores.get(plan, "0.5"))
    log = EventLog(world, MCTSNodeScoredEvent)
    entity = searcher(world, judge, iterations=5)
    tree = search_of(world, entity).tree
    await world.process()
    assert judge.expansions == 1
    assert [tree[c]["step"] for c in tree[ROOT]["children"]] == ["train", "car", "bike"]
    for _ in range(3):
        await world.process()
    assert [(e.node_id, e.plan, e.score) for e in log.events] == [
        ("1", ("train",), 0.9),
        ("2", ("car",), 0.4),
        ("3", ("bike",), 0.1),
    ]
    assert (tree[ROOT]["visits"], tree[ROOT]["value"]) == (3, pytest.approx(1.4 / 3))
    await world.process()
    assert judge.expansions == 2
    assert tree["1"]["children"] == ["4", "5", "6"]
    search = search_of(world, entity)
    assert (search.search_active, search.best_plan) == (False, ["train"])


async def test_an_unusable_score_counts_as_zero_and_is_logged(world: World) -> None:
    """A scoring reply without a number scores 0, and a warning names the node."""
    world.register_system(TreeSearchSystem(iterations_per_tick=2), priority=0)
    judge = Judge(score=lambda plan: "It depends on the weather.")
    log = EventLog(world, MCTSNodeScoredEvent)
    entity = searcher(world, judge, iterations=2)
    with structlog.testing.capture_logs() as logs:
        await world.process()
    assert [e.score for e in log.events] == [0.0]
    warnings = [e for e in logs if e["event"] == "mcts_score_unparseable"]
    assert [(w["log_level"], w["node_id"]) for w in warnings] == [("warning", "1")]
    assert search_of(world, entity).tree["1"]["visits"] == 1


async def test_branching_caps_and_dedupes_the_children(world: World) -> None:
    """An expansion with more (and repeated) steps than `branching` keeps the first distinct."""
    world.register_system(TreeSearchSystem(iterations_per_tick=1), priority=0)
    judge = Judge(expand=lambda plan: '["a", "a", "b", "c", "d"]')
    entity = searcher(world, judge, iterations=1, branching=2)
    await world.process()
    tree = search_of(world, entity).tree
    assert [tree[c]["step"] for c in tree[ROOT]["children"]] == ["a", "b"]


async def test_an_empty_expansion_at_the_root_ends_the_search_with_no_plan(world: World) -> None:
    """`[]` at the root means nothing to do: the search ends at once with an empty plan."""
    world.register_system(TreeSearchSystem(seed=True), priority=0)
    judge = Judge(expand=lambda plan: "[]")
    entity = searcher(world, judge, iterations=10)
    await world.process()
    search = search_of(world, entity)
    assert (search.search_active, search.best_plan, judge.provider.calls) == (False, [], 1)
    assert not world.has_component(entity, PlanComponent)  # nothing to seed


async def test_a_failing_model_spends_the_budget_and_ends_the_search(world: World) -> None:
    """Failed calls are errors that count as iterations: the search still ends within budget."""
    world.register_system(TreeSearchSystem(iterations_per_tick=3), priority=0)
    judge = Judge(expand=failing)
    entity = searcher(world, judge, iterations=4)
    await world.process()
    assert world.require_component(entity, ErrorComponent).system_name == "TreeSearchSystem"
    world.remove_component(entity, ErrorComponent)
    result = await Runner().run(world, until=finished(entity), max_ticks=10)
    assert result.finished
    assert judge.provider.calls == 4
    assert search_of(world, entity).best_plan == []


async def test_a_finished_search_is_never_restarted(world: World) -> None:
    """Once search_active is False no tick calls the model or touches the tree again."""
    world.register_system(TreeSearchSystem(iterations_per_tick=5), priority=0)
    judge = Judge()
    entity = searcher(world, judge, iterations=5)
    await world.process()
    search = search_of(world, entity)
    assert not search.search_active
    calls, tree = judge.provider.calls, copy.deepcopy(search.tree)
    for _ in range(3):
        await world.process()
    assert judge.provider.calls == calls
    assert search.tree == tree
    assert search.iterations_done == 5


@pytest.mark.parametrize(
    "blocker",
    [PlanComponent(["a"], completed=True), TerminalComponent("done")],
    ids=["plan", "terminal"],
)
async def test_entities_with_a_plan_or_finished_are_skipped(world: World, blocker: object) -> None:
    """An entity that a plan drives, or that has finished, is not searched."""
    world.register_system(TreeSearchSystem(), priority=0)
    judge = Judge()
    entity = searcher(world, judge, blocker)
    await world.process()
    assert judge.provider.calls == 0
    assert search_of(world, entity).search_active


async def test_wrong_settings_end_the_search_with_one_usage_error(world: World) -> None:
    """branching=0 is reported once as a UsageError and the search stops without calls."""
    world.register_system(TreeSearchSystem(), priority=0)
    judge = Judge()
    entity = searcher(world, judge, branching=0)
    await world.process()
    assert isinstance(world.require_component(entity, ErrorComponent).error, UsageError)
    world.remove_component(entity, ErrorComponent)
    await world.process()
    assert not world.has_component(entity, ErrorComponent)
    assert (search_of(world, entity).search_active, judge.provider.calls) == (False, 0)


async def test_entities_search_concurrently(world: World) -> None:
    """Two entities' slow calls overlap within one tick."""
    world.register_system(TreeSearchSystem(iterations_per_tick=1), priority=0)
    first = searcher(world, Judge(latency_s=0.3))
    second = searcher(world, Judge(latency_s=0.3))
    started = time.perf_counter()
    await world.process()
    assert time.perf_counter() - started < 0.55
    assert search_of(world, first).iterations_done == 1
    assert search_of(world, second).iterations_done == 1


async def test_prompts_carry_goal_and_steps_verbatim(world: World) -> None:
    """Braces in the goal and in steps reach the prompts unformatted."""
    world.register_system(TreeSearchSystem(iterations_per_tick=2), priority=0)
    judge = Judge(expand=lambda plan: '["use {x}"]')
    world.create_entity(
        LLMComponent(judge.provider), PlanSearchComponent("reach {goal} {0}", iterations=2)
    )
    await world.process()
    expansion, scoring = (r.messages[-1].content for r in judge.provider.requests)
    assert expansion.startswith("Goal: reach {goal} {0}\nSteps so far:\n(none)\n")
    assert "up to 3 alternative next steps" in expansion
    assert scoring == "Goal: reach {goal} {0}\nPlan:\n1. use {x}\n\nScore from 0 to 1:"


async def test_a_checkpoint_restore_brings_the_search_tree_back(world: World) -> None:
    """Restoring an earlier checkpoint puts back that tick's tree and count; the search then
    continues from there and still ends within its budget."""
    world.register_system(TreeSearchSystem(iterations_per_tick=1), priority=0)
    world.register_system(CheckpointSystem(), priority=15)
    judge = Judge()
    entity = searcher(world, judge, CheckpointComponent(), iterations=6)
    await world.process()
    await world.process()
    saved = copy.deepcopy(search_of(world, entity).tree)  # after two iterations
    first_index = checkpoints.indices(world, entity)[-1]
    await world.process()
    await world.process()
    assert search_of(world, entity).tree != saved
    await checkpoints.restore(world, entity, first_index)
    search = search_of(world, entity)
    assert search.tree == saved
    assert (search.iterations_done, search.search_active) == (2, True)
    await Runner().run(world, until=finished(entity), max_ticks=10)
    assert search_of(world, entity).iterations_done == 6
    assert search_of(world, entity).best_plan


async def test_seed_turns_the_best_plan_into_a_plan_that_planning_walks(world: World) -> None:
    """With seed=True the finished search becomes a PlanComponent and PlanningSystem runs it to
    the end, each step answered in the conversation."""
    world.register_system(TreeSearchSystem(iterations_per_tick=4, seed=True), priority=0)
    world.register_system(PlanningSystem(), priority=0)
    judge = Judge(
        score=lambda plan: "0.9" if "train" in plan else "0.2",
        other=lambda request: "done: " + request.messages[-1].content,
    )
    entity = world.create_entity(
        LLMComponent(judge.provider),
        ConversationComponent([ChatMessage("user", GOAL)]),
        PlanSearchComponent(GOAL, iterations=8, max_depth=2),
    )
    result = await Runner().run(world, until=entity, max_ticks=20)
    assert world.require_component(entity, TerminalComponent).reason == "plan_completed"
    search = search_of(world, entity)
    assert search.best_plan == ["train", "train"]
    plan = world.require_component(entity, PlanComponent)
    assert (plan.steps, plan.completed) == (["train", "train"], True)
    messages = world.require_component(entity, ConversationComponent).messages
    assert [m.content for m in messages[-2:]] == ["Step 2/2: train", "done: Step 2/2: train"]
    assert result.finished


async def test_seed_plan_needs_a_finished_search(world: World) -> None:
    """seed_plan refuses an entity without a search or with one still running, then seeds."""
    with pytest.raises(UsageError, match="no PlanSearchComponent"):
        seed_plan(world, world.create_entity())
    entity = world.create_entity(PlanSearchComponent(GOAL))
    with pytest.raises(UsageError, match="has not finished"):
        seed_plan(world, entity)
    search = search_of(world, entity)
    search.search_active, search.best_plan = False, ["a", "b"]
    plan = seed_plan(world, entity)
    assert world.require_component(entity, PlanComponent) is plan
    assert plan.steps == ["a", "b"]
    assert plan.steps is not search.best_plan


def test_query_with_plan_appends_a_numbered_suggestion() -> None:
    """A best plan is added to a PES query as numbered lines; no plan leaves the query alone."""
    assert query_with_plan("Go to {city}", ["train", "walk"]) == (
        "Go to {city}\n\nA plan worked out in advance (follow it where it fits):\n1. train\n2. walk"
    )
    assert query_with_plan("Go", []) == "Go"
    assert query_with_plan("Go", None) == "Go"


def test_system_settings_are_checked() -> None:
    """A per-tick budget below one or a negative exploration is a usage error."""
    with pytest.raises(UsageError, match="iterations_per_tick"):
        TreeSearchSystem(iterations_per_tick=0)
    with pytest.raises(UsageError, match="exploration"):
        TreeSearchSystem(exploration=-1.0)
    assert math.isclose(TreeSearchSystem().exploration, math.sqrt(2))
