"""The dependency graph of a plan's tool calls, and the plan errors that make it unusable.

A call depends on every step its arguments (or a language step's instruction) reference with a
``{step_N_result}`` placeholder and on every call id listed in its ``dependsOn``; a language step
is a node like any tool call. `plan_errors(calls)` lists what is wrong with
a plan in sentences meant for the model (they are quoted back to it in the repair round-trip);
`CallGraph.build(calls)` gives the executor each call's dependencies and marks the calls that
cannot run because of such an error, so even an unrepaired plan never deadlocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pes_agent.execution.placeholders import _PLACEHOLDER, find_references
from pes_agent.planning.plan import ParsedToolCall

_NONE: frozenset[int] = frozenset()
_NO_EDGES: set[int] = set()  # read only
# Argument values that cannot hold a placeholder.
_INERT = frozenset({int, float, bool, type(None)})

__all__ = ["CallGraph", "call_references", "plan_errors"]


def call_references(call: ParsedToolCall) -> set[int]:
    """The step numbers a call's placeholders refer to: in its arguments, or in the
    instruction of a language step."""
    found = find_references(call.arguments)
    if call.instruction is not None:
        found |= find_references(call.instruction)
    return found


def _plain_references(arguments: object) -> set[int] | None:
    """The step numbers referred to by `arguments` when they are a dict of numbers, booleans,
    None and strings (most calls), scanned here without `find_references`' generic walk
    (a third of a chain call's graph building); None for anything else, to scan fully."""
    if type(arguments) is not dict:
        return None
    found: set[int] = set()
    for value in arguments.values():
        kind = type(value)
        if kind is str:
            if "step_" in value:
                for brace, _, angle, _ in _PLACEHOLDER.findall(value):
                    found.add(int(brace or angle))
        elif kind not in _INERT:
            return None
    return found


def plan_errors(calls: Sequence[ParsedToolCall]) -> list[str]:
    """List every problem of a plan's tool calls, one readable sentence each; [] if none.

    Problems: duplicate call ids; a placeholder referring to step 0, a step that does not exist,
    the call itself or a later step; a ``dependsOn`` naming an unknown call id or the call
    itself; and dependency cycles (named call by call).
    """
    return CallGraph.build(calls).errors


@dataclass(frozen=True, slots=True)
class CallGraph:
    """Who waits for whom among a plan's calls; positions are 0-based indices into `calls`.

    - `dependencies[i]`: the calls that must finish before call `i` may run;
    - `dependents[i]`: the calls waiting for call `i` (the reverse edges);
    - `problems[i]`: why call `i` cannot run (empty if it can). A call with problems is refused
      by the executor instead of run, and it waits for nothing.
    """

    calls: tuple[ParsedToolCall, ...]
    dependencies: tuple[frozenset[int], ...]
    dependents: tuple[tuple[int, ...], ...]
    problems: tuple[tuple[str, ...], ...]

    @classmethod
    def build(cls, calls: Sequence[ParsedToolCall]) -> CallGraph:
        """Derive the dependency edges and plan problems of `calls` (never raises).

        Args:
            calls: A plan's calls, in step order.

        Returns:
            Their graph: each call's dependencies, dependents and problems.
        """
        calls = tuple(calls)
        count = len(calls)
        # Only calls with problems or edges get containers of their own (most plans: none).
        problems: dict[int, list[str]] = {}
        edges: dict[int, set[int]] = {}

        forward = False
        first: dict[str, int] = {}  # each call id's first step (index)
        repeated: dict[str, list[int]] = {}  # a call id used more than once: all its indices
        for index, call in enumerate(calls):
            call_id = call.call_id
            if call_id not in first:  # the common call: no method call for it
                first[call_id] = index
                continue
            earlier = first[call_id]
            same = repeated.get(call_id)
            if same is None:
                same = repeated[call_id] = [earlier]
            same.append(index)
            problems.setdefault(index, []).append(
                f'{_label(calls, index)} reuses the call id "{call_id}" of step '
                f"{earlier + 1}; give every call a unique callId."
            )

        for index, call in enumerate(calls):
            references = None
            if call.instruction is None:
                references = _plain_references(call.arguments)
            if references is None:
                references = call_references(call)
            if not references and not call.depends_on:
                continue  # the common call: no placeholder, no dependsOn
            # Each problem writes the call's label itself: a plan without problems (the
            # usual one) formats none.
            found: list[str] = []
            linked: set[int] = set()
            for step in sorted(references) if len(references) > 1 else references:
                target = step - 1
                if step == 0:
                    label = _label(calls, index)
                    found.append(f"{label} refers to step_0_result, but steps are numbered from 1.")
                elif step > count:
                    label = _label(calls, index)
                    found.append(
                        f"{label} refers to step_{step}_result, but the plan has only "
                        f"{_calls(count)}."
                    )
                elif target == index:
                    label = _label(calls, index)
                    found.append(
                        f"{label} refers to its own result (step_{step}_result); a call can "
                        "only use the results of earlier steps."
                    )
                else:
                    linked.add(target)
                    forward = forward or target > index
                    if target > index:
                        label = _label(calls, index)
                        found.append(
                            f"{label} refers to step_{step}_result, a later step; a call can "
                            "only use the results of earlier steps, so reorder the calls."
                        )
            for call_id in call.depends_on:
                position = first.get(call_id)
                if position is None:
                    label = _label(calls, index)
                    found.append(
                        f'{label} depends on "{call_id}", which is not a call id in this plan.'
                    )
                    continue
                targets = repeated.get(call_id) or [position]
                if targets == [index]:
                    label = _label(calls, index)
                    found.append(f'{label} depends on itself ("{call_id}").')
                else:
                    others = [t for t in targets if t != index]
                    linked.update(others)
                    forward = forward or max(others) > index
            if found:
                problems.setdefault(index, []).extend(found)
            if linked:
                edges[index] = linked

        # Edges that all point to earlier calls cannot close a cycle (the common case).
        for cycle in _cycles([edges.get(i, _NO_EDGES) for i in range(count)]) if forward else ():
            names = " -> ".join(f'"{calls[i].call_id}"' for i in (*cycle, cycle[0]))
            message = (
                f"The calls {names} form a dependency cycle, so none of them can run; "
                "remove one of these dependencies."
            )
            for index in cycle:
                problems.setdefault(index, []).append(message)

        # A call that cannot run is refused at once, so it waits for nothing; this also drops
        # every edge of every cycle, leaving the executor an acyclic graph.
        dependencies = [_NONE] * count
        dependents: list[tuple[int, ...]] = [()] * count
        if edges:
            waited: dict[int, list[int]] = {}
            for index in edges:  # ascending: added in call order
                if index in problems:
                    continue
                needed = dependencies[index] = frozenset(edges[index])
                for target in needed:
                    waited.setdefault(target, []).append(index)  # ascending: index only grows
            for target, waiting in waited.items():
                dependents[target] = tuple(waiting)
        stated: list[tuple[str, ...]] = [()] * count
        for index, found in problems.items():
            stated[index] = tuple(found)
        return cls(
            calls=calls,
            dependencies=tuple(dependencies),
            dependents=tuple(dependents),
            problems=tuple(stated),
        )

    @property
    def errors(self) -> list[str]:
        """Every problem of the plan, in call order, each message once."""
        return list(dict.fromkeys(message for problems in self.problems for message in problems))

    def order(self) -> list[int]:
        """Return the call indices in an order that runs every dependency first.

        Plan order is kept wherever the dependencies allow (a `dependsOn` naming a later call
        moves that call forward). Calls with problems keep their place: they wait for nothing.
        """
        waiting = [len(deps) for deps in self.dependencies]
        ready = [i for i, count in enumerate(waiting) if count == 0]
        ordered: list[int] = []
        # Few calls per plan: picking the smallest ready index each time keeps plan order simply.
        while ready:
            ready.sort()
            index = ready.pop(0)
            ordered.append(index)
            for dependent in self.dependents[index]:
                waiting[dependent] -= 1
                if waiting[dependent] == 0:
                    ready.append(dependent)
        return ordered


def _label(calls: Sequence[ParsedToolCall], index: int) -> str:
    return f'Step {index + 1} ("{calls[index].call_id}")'


def _calls(count: int) -> str:
    return "1 tool call" if count == 1 else f"{count} tool calls"


def _cycles(edges: Sequence[set[int]]) -> list[tuple[int, ...]]:
    """Return cycles (as call indices) that together pass through every call of every cycle.

    One cycle per strongly connected group is not enough: the group's other calls may still
    wait for each other, and an executor would wait for them forever. So each call of a group
    not yet on a reported cycle gets its own shortest cycle, found inside the group.
    """
    cycles: list[tuple[int, ...]] = []
    for component in _strongly_connected(edges):
        if len(component) < 2:
            continue
        members = set(component)
        covered: set[int] = set()
        for start in component:  # ascending, so messages follow plan order
            if start in covered:
                continue
            cycle = _shortest_cycle(edges, members, start)
            covered.update(cycle)
            cycles.append(cycle)
    return cycles


def _shortest_cycle(edges: Sequence[set[int]], members: set[int], start: int) -> tuple[int, ...]:
    """Return the shortest cycle from `start` back to itself inside `members` (it exists)."""
    # Breadth-first from `start`, lowest index first, so the cycle found is deterministic.
    came_from: dict[int, int] = {}
    frontier = [start]
    while frontier:
        following: list[int] = []
        for node in frontier:
            for target in sorted(edges[node] & members):
                if target == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return tuple(reversed(path))
                if target not in came_from:
                    came_from[target] = node
                    following.append(target)
        frontier = following
    # Unreachable for a member of a strongly connected group of two or more calls; a
    # one-call "cycle" still refuses the call rather than letting it wait forever.
    return (start,)


def _strongly_connected(edges: Sequence[set[int]]) -> list[list[int]]:
    """Tarjan's algorithm, iterative so a long chain of calls cannot hit the recursion limit."""
    index_of: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    components: list[list[int]] = []
    counter = 0
    for root in range(len(edges)):
        if root in index_of:
            continue
        work: list[tuple[int, list[int]]] = [(root, sorted(edges[root]))]
        index_of[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, pending = work[-1]
            if pending:
                target = pending.pop(0)
                if target not in index_of:
                    index_of[target] = low[target] = counter
                    counter += 1
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, sorted(edges[target])))
                elif target in on_stack:
                    low[node] = min(low[node], index_of[target])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index_of[node]:
                component: list[int] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components
