"""`TreeSearchSystem` [0]: Monte Carlo tree search over plans, with the model as proposer and judge.

```python
world.register_system(TreeSearchSystem(seed=True), priority=0)
world.register_system(PlanningSystem(), priority=0)
agent = world.create_entity(
    LLMComponent(model), ConversationComponent([ChatMessage("user", goal)]),
    PlanSearchComponent(goal, max_depth=3, iterations=20, branching=3),
)
await Runner().run(world, until=agent, max_ticks=50)   # search, then walk the best plan
```

A node is a plan prefix: the root is the empty plan, each child adds one step. One iteration:

1. **Selection**: from the root, while the node has children, go to the child with the highest
   UCB1 value ``mean + exploration * sqrt(ln(parent visits) / visits)`` (an unvisited child
   first; ties go to the earlier child).
2. At the leaf reached, exactly one of:
   - **scoring** (an unvisited node): one call (phase ``"tree_search"``) rates the plan so far
     from 0 to 1 (`parse_score`; a reply without a number scores 0, and a warning says so),
     then **backpropagation**: the node and every ancestor count one more visit and fold the
     score into their mean value; `MCTSNodeScoredEvent(entity_id, node_id, plan, score)`;
   - **expansion** (a visited node above `max_depth` steps): one call proposes up to
     `branching` next steps as a JSON array of strings (`parse_steps`); they become unvisited
     children, scored by the following iterations. An empty array marks the node terminal (the
     plan is complete); an unusable reply or a failed call adds nothing;
   - a terminal node or one at `max_depth` is backpropagated again with its own mean, no call.

**Budget**: every iteration makes at most one model call and counts itself in
`iterations_done` *before* calling (a failed call too), and the search ends after `iterations`
iterations, so a search never makes more than `iterations` calls. At most `iterations_per_tick`
iterations run per tick, so other entities and systems are not held up; entities search
concurrently.

**State**: the tree is plain data in `PlanSearchComponent.tree` — node id → `SearchNode`
(``parent``, ``step``, ``visits``, ``value`` (the mean score), ``children``, ``terminal``);
``"0"`` is the root — so a checkpoint restores a search mid-way and it continues from there.

**Result**: when the budget is spent (or the root is terminal), `best_plan` is set to the
greedy path of highest mean value (`best_path`: at each node the visited child with the best
mean, ties to the most visits) and `search_active` becomes False. A finished search is never
restarted. With `seed=True` a non-empty best plan then becomes the entity's `PlanComponent`
(`seed_plan`), which `PlanningSystem` walks; without it, wait for the search with
``Runner().run(world, until=lambda w: not w.require_component(agent, PlanSearchComponent)
.search_active)``. `query_with_plan` turns a best plan into a PES query.

Entities with a `PlanComponent` (a plan already drives them), without an `LLMComponent`, or
finished are skipped. Failed calls leave an `ErrorComponent`; a scripted model that ran out
ends the search with what it found. Wrong settings are a `UsageError` in an `ErrorComponent`
and end the search with no plan.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Sequence
from typing import Final, TypedDict, cast

from ecs_core import EntityId, ErrorComponent, TerminalComponent, World
from pes_agent.ecs._model import call_model
from pes_agent.ecs.components import LLMComponent, PlanComponent, PlanSearchComponent
from pes_agent.ecs.events import MCTSNodeScoredEvent
from pes_agent.ecs.messages import ChatMessage
from pes_agent.ecs.replanning import numbered, parse_steps
from pes_agent.errors import ScriptExhaustedError, UsageError
from pes_agent.observing.logs import get_logger

# The planning parser's think-block splitter: a number inside a model's reasoning is no score.
from pes_agent.planning.model_text import split_thoughts

__all__ = [
    "EXPANSION_PROMPT",
    "ROOT",
    "SCORING_PROMPT",
    "SearchNode",
    "Tree",
    "TreeSearchSystem",
    "backpropagate",
    "best_path",
    "parse_score",
    "plan_of_node",
    "query_with_plan",
    "seed_plan",
    "select_child",
    "ucb1",
]

_log = get_logger("pes_agent.ecs.tree_search")

ROOT: Final = "0"
"""The id of the root node (the empty plan) in `PlanSearchComponent.tree`."""

EXPANSION_PROMPT: Final = (
    "You plan how to reach a goal one step at a time. You are given the goal and the steps "
    "chosen so far. Propose different candidates for the single next step, most promising "
    "first. Answer with a JSON array of strings only, one short imperative step per string, "
    'e.g. ["Search for flights", "Ask for the budget"]; answer [] if the steps so far already '
    "reach the goal."
)
"""The system prompt of an expansion call."""

SCORING_PROMPT: Final = (
    "You judge plans. Rate how likely the plan is to reach the goal, from 0 (useless) to 1 "
    "(certain). The plan may be a beginning that later steps will continue: judge whether it "
    "is a good way to start. Answer with one number between 0 and 1 only."
)
"""The system prompt of a scoring call."""


class SearchNode(TypedDict):
    """One node of a search tree: a plan prefix ending with `step` (None at the root).

    `value` is the mean of the scores backpropagated through the node; `terminal` marks a
    plan the model called complete.
    """

    parent: str | None
    step: str | None
    visits: int
    value: float
    children: list[str]
    terminal: bool


Tree = dict[str, SearchNode]


# The search's pieces, on plain data ----------------------------------------------------------


def ucb1(value: float, visits: int, parent_visits: int, exploration: float) -> float:
    """UCB1 of a child: infinite when unvisited, else mean + exploration bonus."""
    if visits == 0:
        return math.inf
    return value + exploration * math.sqrt(math.log(max(parent_visits, 1)) / visits)


def select_child(tree: Tree, node_id: str, exploration: float = math.sqrt(2)) -> str:
    """The child of `node_id` with the highest UCB1 (the first unvisited one, if any).

    Raises `UsageError` when the node has no children.
    """
    node = tree[node_id]
    if not node["children"]:
        raise UsageError(f"node {node_id!r} has no children to select from; expand it first")
    best_id, best = node["children"][0], -math.inf
    for child_id in node["children"]:
        child = tree[child_id]
        score = ucb1(child["value"], child["visits"], node["visits"], exploration)
        if score > best:  # strictly: ties keep the earlier (more promising) child
            best_id, best = child_id, score
    return best_id


def backpropagate(tree: Tree, node_id: str, score: float) -> None:
    """Count one visit of `score` on the node and each ancestor, updating their mean value."""
    current: str | None = node_id
    while current is not None:
        node = tree[current]
        node["visits"] += 1
        node["value"] += (score - node["value"]) / node["visits"]
        current = node["parent"]


def plan_of_node(tree: Tree, node_id: str) -> list[str]:
    """The steps from the root to `node_id`, in order."""
    steps: list[str] = []
    current: str | None = node_id
    while current is not None:
        node = tree[current]
        if node["step"] is not None:
            steps.append(node["step"])
        current = node["parent"]
    steps.reverse()
    return steps


def best_path(tree: Tree) -> list[str]:
    """The plan of highest mean value: from the root, the visited child with the best mean
    (ties to the most visits, then the earlier child) until a node has no visited child."""
    if ROOT not in tree:
        return []
    current = ROOT
    while True:
        visited = [c for c in tree[current]["children"] if tree[c]["visits"] > 0]
        if not visited:
            return plan_of_node(tree, current)
        current = max(visited, key=lambda c: (tree[c]["value"], tree[c]["visits"]))


# Reading scores ------------------------------------------------------------------------------

_NUMBER: Final = re.compile(
    r"(?<![\w.])(\d{1,6}(?:\.\d+)?|\.\d+)[ \t]*(%|/[ \t]*(\d{1,6}(?:\.\d+)?)"
    r"|out[ \t]+of[ \t]+(\d{1,6}(?:\.\d+)?))?",
    re.IGNORECASE,
)


def parse_score(text: str) -> float | None:
    """The first score in a reply, between 0 and 1; None when there is none.

    ``"0.7"``, ``"Score: .7"``, ``'{"score": 0.7}'`` read 0.7; ``"70%"``, ``"7/10"`` and
    ``"7 out of 10"`` are scaled. A bare number above 1 is read as out of 10 up to 10 and as
    a percentage up to 100 (models drift to those scales); larger ones are no score. Text in
    ``<think>`` blocks is ignored.
    """
    _, body = split_thoughts(text, plan_aware=False)
    match = _NUMBER.search(body)
    if match is None:
        return None
    number = float(match.group(1))
    scale = match.group(3) or match.group(4)
    if match.group(2) == "%":
        number /= 100
    elif scale is not None:
        if float(scale) <= 0:
            return None
        number /= float(scale)
    elif number > 10:
        number /= 100
    elif number > 1:
        number /= 10
    return number if 0.0 <= number <= 1.0 else None


# Seeding what comes next ---------------------------------------------------------------------


def seed_plan(world: World, entity: EntityId) -> PlanComponent:
    """Give the entity a `PlanComponent` of its finished search's `best_plan` and return it.

    It replaces any plan the entity had; `PlanningSystem` then walks it. Raises `UsageError`
    when the entity has no `PlanSearchComponent` or its search has not finished.
    """
    search = world.get_component(entity, PlanSearchComponent)
    if search is None:
        raise UsageError(
            f"entity {entity} has no PlanSearchComponent; add PlanSearchComponent(goal) and "
            "register TreeSearchSystem() to search for a plan first"
        )
    if search.search_active or search.best_plan is None:
        raise UsageError(
            f"the plan search of entity {entity} has not finished; tick the world until "
            "PlanSearchComponent.search_active is False (or use TreeSearchSystem(seed=True))"
        )
    plan = PlanComponent(list(search.best_plan))
    world.add_component(entity, plan)
    return plan


def query_with_plan(query: str, plan: Sequence[str] | None) -> str:
    """A PES query that carries a plan found by a search, for `AgentProps(query, thread_id)`.

    The plan is appended as a numbered suggestion the PES planner may follow; without steps
    the query is returned as it is.
    """
    if not plan:
        return query
    # Concatenated, never formatted: the steps are model text.
    return query + "\n\nA plan worked out in advance (follow it where it fits):\n" + numbered(plan)


# The system ----------------------------------------------------------------------------------


class TreeSearchSystem:
    """Searches plans for each entity's active `PlanSearchComponent` (module docstring).

    `iterations_per_tick` bounds the work (and model calls) per entity per tick; `exploration`
    is UCB1's constant; with `seed`, a finished search's best plan becomes a `PlanComponent`.
    """

    def __init__(
        self,
        *,
        iterations_per_tick: int = 3,
        exploration: float = math.sqrt(2),
        seed: bool = False,
    ) -> None:
        if iterations_per_tick < 1:
            raise UsageError(f"iterations_per_tick must be at least 1, got {iterations_per_tick}")
        if exploration < 0:
            raise UsageError(f"exploration must be >= 0, got {exploration}")
        self.iterations_per_tick = iterations_per_tick
        self.exploration = exploration
        self.seed = seed

    async def process(self, world: World) -> None:
        """Run a few iterations of every active search, concurrently."""
        due: list[tuple[EntityId, PlanSearchComponent]] = []
        for entity, (search, _) in world.query(
            PlanSearchComponent, LLMComponent, exclude=(PlanComponent, TerminalComponent)
        ):
            if not search.search_active:
                continue
            problem = _settings_problem(search)
            if problem is not None:
                search.search_active = False  # reported once, not every tick
                world.add_component(
                    entity, ErrorComponent(UsageError(problem), type(self).__name__)
                )
                continue
            due.append((entity, search))
        if len(due) == 1:
            await self._search(world, *due[0])
        elif due:
            async with asyncio.TaskGroup() as group:
                for entity, search in due:
                    group.create_task(self._search(world, entity, search))

    async def _search(self, world: World, entity: EntityId, search: PlanSearchComponent) -> None:
        # Never raises (but for cancellation): one entity's failure must not cancel the others.
        tree = _tree_of(search)
        try:
            for _ in range(self.iterations_per_tick):
                if search.iterations_done >= search.iterations or tree[ROOT]["terminal"]:
                    break
                if not await self._iterate(world, entity, search, tree):
                    return  # the search was replaced or restored during the call
        except ScriptExhaustedError as error:
            if world.get_component(entity, PlanSearchComponent) is search:
                world.add_component(entity, ErrorComponent(error, type(self).__name__))
                await self._finish(world, entity, search, tree)
            return
        except Exception as error:
            # The iteration is spent; the next tick tries again within the budget.
            if world.get_component(entity, PlanSearchComponent) is search:
                world.add_component(entity, ErrorComponent(error, type(self).__name__))
            return
        if search.iterations_done >= search.iterations or tree[ROOT]["terminal"]:
            await self._finish(world, entity, search, tree)

    async def _iterate(
        self, world: World, entity: EntityId, search: PlanSearchComponent, tree: Tree
    ) -> bool:
        """One iteration; False when the search changed under a call (its result is dropped)."""
        # Counted first, so failed calls (and a tree that cannot be walked) spend the budget too.
        search.iterations_done += 1
        node_id = ROOT
        while tree[node_id]["children"]:
            node_id = select_child(tree, node_id, self.exploration)
        node = tree[node_id]
        plan = plan_of_node(tree, node_id)
        if node_id != ROOT and node["visits"] == 0:
            reply = await self._ask(world, entity, SCORING_PROMPT, _scoring_message(search, plan))
            if not _still(world, entity, search, tree, node_id):
                return False
            score = parse_score(reply)
            if score is None:
                _log.warning(
                    "mcts_score_unparseable",
                    entity=entity,
                    node_id=node_id,
                    reply=reply[:200],
                    detail="no score between 0 and 1 in the reply; scored 0",
                )
                score = 0.0
            backpropagate(tree, node_id, score)
            await world.events.publish(MCTSNodeScoredEvent(entity, node_id, tuple(plan), score))
        elif node["terminal"] or len(plan) >= search.max_depth:
            backpropagate(tree, node_id, node["value"])
        else:
            message = _expansion_message(search, plan)
            reply = await self._ask(world, entity, EXPANSION_PROMPT, message)
            if not _still(world, entity, search, tree, node_id):
                return False
            steps = parse_steps(reply)
            if steps is None:
                _log.warning(
                    "mcts_expansion_unparseable",
                    entity=entity,
                    node_id=node_id,
                    reply=reply[:200],
                    detail="no JSON array of steps; the node stays a leaf",
                )
            elif not steps:
                node["terminal"] = True
            else:
                distinct = list(dict.fromkeys(steps))  # a repeated step is one child
                for step in distinct[: search.branching]:
                    child_id = str(len(tree))  # nodes are never removed: ids stay unique
                    tree[child_id] = _node(node_id, step)
                    node["children"].append(child_id)
        return True

    async def _ask(
        self, world: World, entity: EntityId, system_prompt: str, message: ChatMessage
    ) -> str:
        response = await call_model(
            world, entity, [message], phase="tree_search", system_prompt=system_prompt
        )
        return response.text

    async def _finish(
        self, world: World, entity: EntityId, search: PlanSearchComponent, tree: Tree
    ) -> None:
        search.best_plan = best_path(tree)
        search.search_active = False
        _log.debug(
            "mcts_search_finished",
            entity=entity,
            iterations=search.iterations_done,
            nodes=len(tree),
            best_plan=search.best_plan,
        )
        if self.seed and search.best_plan and world.entity_exists(entity):
            seed_plan(world, entity)


def _settings_problem(search: PlanSearchComponent) -> str | None:
    if search.max_depth < 1 or search.branching < 1 or search.iterations < 0:
        return (
            "PlanSearchComponent needs max_depth >= 1, branching >= 1 and iterations >= 0, got "
            "max_depth="
            + str(search.max_depth)
            + ", branching="
            + str(search.branching)
            + ", iterations="
            + str(search.iterations)
        )
    return None


def _node(parent: str | None, step: str | None) -> SearchNode:
    return SearchNode(parent=parent, step=step, visits=0, value=0.0, children=[], terminal=False)


def _tree_of(search: PlanSearchComponent) -> Tree:
    """The component's tree, with its root made on first use."""
    tree = cast(Tree, search.tree)
    if ROOT not in tree:
        tree[ROOT] = _node(None, None)
    return tree


def _still(
    world: World, entity: EntityId, search: PlanSearchComponent, tree: Tree, node_id: str
) -> bool:
    """Whether the search a call was made for is still the entity's (not restored or replaced)."""
    return (
        world.entity_exists(entity)
        and world.get_component(entity, PlanSearchComponent) is search
        and search.tree is tree
        and node_id in tree
        and search.search_active
    )


def _expansion_message(search: PlanSearchComponent, plan: list[str]) -> ChatMessage:
    # Concatenated, never formatted: goal and steps may hold braces.
    return ChatMessage(
        "user",
        "Goal: "
        + search.goal
        + "\nSteps so far:\n"
        + numbered(plan)
        + "\n\nPropose up to "
        + str(search.branching)
        + " alternative next steps as a JSON array of strings.",
    )


def _scoring_message(search: PlanSearchComponent, plan: list[str]) -> ChatMessage:
    return ChatMessage(
        "user",
        "Goal: " + search.goal + "\nPlan:\n" + numbered(plan) + "\n\nScore from 0 to 1:",
    )
