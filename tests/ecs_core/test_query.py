"""Cached queries: correct, maintained per entity and per type, safe to change while iterating."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ecs_core import EntityId, InvalidQueryError, Query, World


@dataclass(slots=True)
class A:
    n: int = 0


@dataclass(slots=True)
class B:
    n: int = 0


@dataclass(slots=True)
class C:
    n: int = 0


@dataclass(slots=True)
class D:
    n: int = 0


def as_dict(rows: Any) -> dict[EntityId, tuple[Any, ...]]:
    return dict(rows)


# -- results ------------------------------------------------------------------------------


def test_query_yields_entity_and_components_in_the_requested_order() -> None:
    """Each row is (entity, (c1, c2)) with components ordered as the types were given."""
    world = World()
    a, b = A(1), B(2)
    e = world.create_entity(b, a)
    world.create_entity(A())
    assert list(world.query(A, B)) == [(e, (a, b))]
    assert list(world.query(B, A)) == [(e, (b, a))]


def test_single_type_query_yields_one_tuples() -> None:
    """A one-type query still yields (entity, (component,)), like the multi-type form."""
    world = World()
    a = A()
    e = world.create_entity(a)
    assert list(world.query(A)) == [(e, (a,))]


def test_query_over_a_type_nobody_has_is_empty() -> None:
    """Querying an unknown type returns no rows and later picks up entities that gain it."""
    world = World()
    e = world.create_entity(A())
    assert list(world.query(D)) == []
    d = D()
    world.add_component(e, d)
    assert list(world.query(D)) == [(e, (d,))]


def test_exclude_leaves_out_entities_having_any_excluded_type() -> None:
    """exclude=(C, D) keeps only entities with none of C and D."""
    world = World()
    keep = world.create_entity(A(), B())
    world.create_entity(A(), C())
    world.create_entity(A(), D())
    assert [e for e, _ in world.query(A, exclude=(C, D))] == [keep]


def test_exclude_may_be_a_list_or_given_in_any_order() -> None:
    """exclude accepts any iterable; [C, D] and (D, C) give the same matches."""
    world = World()
    keep = world.create_entity(A())
    world.create_entity(A(), C())
    assert [e for e, _ in world.query(A, exclude=[C, D])] == [keep]
    assert [e for e, _ in world.query(A, exclude=(D, C))] == [keep]


def test_rows_come_oldest_match_first() -> None:
    """Matches are ordered by when the entity joined the query."""
    world = World()
    first = world.create_entity(A())
    second = world.create_entity(A())
    world.query(A)
    late = world.create_entity(A())
    world.remove_component(first, A)
    world.add_component(first, A())
    assert [e for e, _ in world.query(A)] == [second, late, first]


# -- caching and incremental upkeep -------------------------------------------------------


def test_unchanged_query_returns_the_same_cached_snapshot() -> None:
    """Without structural change, a repeat query returns the very same object."""
    world = World()
    world.create_entity(A(), B())
    assert world.query(A, B) is world.query(A, B)


def test_change_to_an_unrelated_type_keeps_the_cached_snapshot() -> None:
    """Adding or removing a type a query does not mention leaves its cache untouched."""
    world = World()
    e = world.create_entity(A(), B())
    before = world.query(A, B)
    world.add_component(e, C())
    world.create_entity(D())
    world.remove_component(e, C)
    assert world.query(A, B) is before


def test_excluded_type_change_updates_only_that_entity() -> None:
    """Gaining an excluded type drops the entity; losing it brings the entity back."""
    world = World()
    e1 = world.create_entity(A())
    e2 = world.create_entity(A())
    assert [e for e, _ in world.query(A, exclude=(C,))] == [e1, e2]
    world.add_component(e1, C())
    assert [e for e, _ in world.query(A, exclude=(C,))] == [e2]
    world.remove_component(e1, C)
    assert [e for e, _ in world.query(A, exclude=(C,))] == [e2, e1]


def test_change_rebuilds_only_the_changed_entitys_row() -> None:
    """After one entity changes, every other entity's row is the same object as before."""
    world = World()
    entities = [world.create_entity(A(i), B(i)) for i in range(5)]
    before = as_dict(world.query(A, B))
    world.add_component(entities[2], B(99))
    after = world.query(A, B)
    for entity, row in zip(entities, after, strict=True):
        if entity == entities[2]:
            assert row[1][1] == B(99)
        else:
            assert row[1] is before[entity]


def test_mutating_a_components_fields_is_seen_without_invalidation() -> None:
    """Field changes need no structural update: the cached row holds the live instance."""
    world = World()
    a = A(1)
    world.create_entity(a)
    snapshot = world.query(A)
    a.n = 42
    assert world.query(A) is snapshot
    assert snapshot[0][1][0].n == 42


def test_replacing_a_component_is_reflected_in_the_query() -> None:
    """add_component with a new instance of a present type yields the new instance."""
    world = World()
    e = world.create_entity(A(1), B())
    world.query(A, B)
    newer = A(2)
    world.add_component(e, newer)
    [(_, (a, _))] = world.query(A, B)
    assert a is newer


def test_deleting_an_entity_removes_it_from_every_query() -> None:
    """delete_entity drops the entity from all cached queries mentioning any of its types."""
    world = World()
    e = world.create_entity(A(), B())
    other = world.create_entity(A(), B())
    queries = [((A,), ()), ((B,), ()), ((A, B), ()), ((B,), (C,))]
    for types, exclude in queries:
        world.query(*types, exclude=exclude)
    world.delete_entity(e)
    for types, exclude in queries:
        assert [x for x, _ in world.query(*types, exclude=exclude)] == [other]


def test_creation_batched_before_a_change_keeps_join_order() -> None:
    """An entity created before another joins by a change is listed first: it joined first."""
    world = World()
    old = world.create_entity(B())
    world.query(A)
    new = world.create_entity(A())
    world.add_component(old, A())
    assert [e for e, _ in world.query(A)] == [new, old]


def test_entity_created_then_deleted_before_any_query_never_appears() -> None:
    """Deleting an entity whose query upkeep is still pending leaves no row behind."""
    world = World()
    world.query(A)
    doomed = world.create_entity(A())
    kept = world.create_entity(A())
    world.delete_entity(doomed)
    assert [e for e, _ in world.query(A)] == [kept]


def test_query_first_built_after_pending_creations_lists_each_entity_once() -> None:
    """A new query built while creations are pending sees each new entity exactly once."""
    world = World()
    world.query(A)
    created = [world.create_entity(A(), B()) for _ in range(3)]
    assert [e for e, _ in world.query(B)] == created
    assert [e for e, _ in world.query(A)] == created


def test_query_snapshot_is_immutable() -> None:
    """The returned snapshot is a tuple, so no caller can corrupt the cache through it."""
    world = World()
    world.create_entity(A())
    assert isinstance(world.query(A), tuple)


# -- structural change while iterating ------------------------------------------------------


def test_adding_components_while_iterating_visits_each_entity_once() -> None:
    """Adding to the entity being visited never raises, skips or repeats an entity."""
    world = World()
    entities = [world.create_entity(A(i)) for i in range(10)]
    seen = []
    for entity, (_a,) in world.query(A):
        seen.append(entity)
        world.add_component(entity, B())
        world.create_entity(A(100))
    assert seen == entities
    assert len(world.query(A)) == 20
    assert len(world.query(A, B)) == 10


def test_removing_the_iterated_type_while_iterating_is_safe() -> None:
    """Removing A from each visited entity finishes the loop and empties the next query."""
    world = World()
    entities = [world.create_entity(A(i)) for i in range(5)]
    seen = []
    for entity, _ in world.query(A):
        seen.append(entity)
        world.remove_component(entity, A)
    assert seen == entities
    assert world.query(A) == ()


def test_entity_deleted_later_in_the_loop_is_still_yielded_from_the_snapshot() -> None:
    """The snapshot semantics: a deleted entity is still visited, with its old components."""
    world = World()
    first = world.create_entity(A(1))
    second_a = A(2)
    second = world.create_entity(second_a)
    visited: list[tuple[EntityId, A, bool]] = []
    for entity, (a,) in world.query(A):
        visited.append((entity, a, world.entity_exists(entity)))
        if entity == first:
            world.delete_entity(second)
    assert visited == [(first, A(1), True), (second, second_a, False)]
    assert [e for e, _ in world.query(A)] == [first]


def test_entities_created_during_iteration_appear_in_the_next_query() -> None:
    """New matches are not part of the running loop but are in the next query() call."""
    world = World()
    world.create_entity(A())
    count = sum(1 for _ in (world.create_entity(A()) for _ in world.query(A)))
    assert count == 1
    assert len(world.query(A)) == 2


# -- bad queries ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("types", "exclude", "message"),
    [
        ((), (), r"at least one component type"),
        ((A(),), (), r"component classes.*not world.query\(Position\(\)\)"),
        ((A, A), (), r"repeat a component type"),
        ((A,), (B, B), r"repeat a component type"),
        ((A, B), (B,), r"requires and excludes B"),
        ((A,), ("B",), r"component classes"),
    ],
)
def test_malformed_queries_raise_with_the_fix(
    types: tuple[Any, ...], exclude: tuple[Any, ...], message: str
) -> None:
    """Empty, non-class, repeated or contradictory queries are rejected with an explanation."""
    with pytest.raises(InvalidQueryError, match=message):
        World().query(*types, exclude=exclude)


def test_query_object_decides_membership_from_components() -> None:
    """Query.matches/refresh/discard implement 'all of types, none of exclude'."""
    query = Query((A, B), (C,))
    a, b = A(), B()
    e = EntityId(7)
    assert query.matches({A: a, B: b})
    assert not query.matches({A: a})
    assert not query.matches({A: a, B: b, C: C()})
    query.refresh(e, {A: a, B: b})
    assert e in query
    assert query.rows() == ((e, (a, b)),)
    query.discard(e)
    assert len(query) == 0
    assert repr(query) == "Query(A, B, exclude=(C)) with 0 matches"


# -- model-based check ----------------------------------------------------------------------

TYPES = (A, B, C, D)
QUERY_SHAPES: list[tuple[tuple[type[Any], ...], tuple[type[Any], ...]]] = [
    ((A,), ()),
    ((A, B), ()),
    ((B, A), ()),
    ((C, D), ()),
    ((A, B, C), ()),
    ((A, B, C, D), ()),
    ((A,), (B,)),
    ((B, C), (A,)),
    ((D,), (A, B)),
]

type_index = st.integers(0, len(TYPES) - 1)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("create"), st.sets(type_index)),
        st.tuples(st.just("add"), st.integers(0, 7), type_index),
        st.tuples(st.just("remove"), st.integers(0, 7), type_index),
        st.tuples(st.just("delete"), st.integers(0, 7)),
        st.tuples(st.just("query"), st.integers(0, len(QUERY_SHAPES) - 1)),
    ),
    max_size=60,
)


def expected(
    model: dict[EntityId, dict[type[Any], Any]],
    types: tuple[type[Any], ...],
    exclude: tuple[type[Any], ...],
) -> dict[EntityId, tuple[Any, ...]]:
    return {
        entity: tuple(comps[t] for t in types)
        for entity, comps in model.items()
        if all(t in comps for t in types) and not any(t in comps for t in exclude)
    }


def assert_same(world: World, model: dict[EntityId, dict[type[Any], Any]], shape: int) -> None:
    types, exclude = QUERY_SHAPES[shape]
    got = world.query(*types, exclude=exclude)
    want = expected(model, types, exclude)
    assert len(got) == len(want), "a query yielded an entity twice or missed one"
    assert set(as_dict(got)) == set(want)
    for entity, components in got:
        assert all(x is y for x, y in zip(components, want[entity], strict=True))


@settings(max_examples=200, deadline=None)
@given(ops, st.booleans())
def test_queries_match_a_brute_force_model_under_random_changes(
    steps: list[tuple[Any, ...]], watch_every_step: bool
) -> None:
    """After any sequence of creates/adds/removes/deletes, every cached query equals a rescan.

    With `watch_every_step` every query shape is cached before the first change and compared
    after each step (exercising incremental upkeep); otherwise queries are first built at
    random points in the sequence (exercising population from the store).
    """
    world = World()
    model: dict[EntityId, dict[type[Any], Any]] = {}
    created: list[EntityId] = []
    for counter, step in enumerate(steps, start=1):
        if watch_every_step:
            for shape in range(len(QUERY_SHAPES)):
                assert_same(world, model, shape)
        kind = step[0]
        if kind == "create":
            comps = {TYPES[i]: TYPES[i](counter) for i in sorted(step[1])}
            entity = world.create_entity(*comps.values())
            created.append(entity)
            model[entity] = dict(comps)
        elif kind == "query":
            assert_same(world, model, step[1])
        elif created:
            entity = created[step[1] % len(created)]
            if kind == "delete":
                if entity in model:
                    world.delete_entity(entity)
                    del model[entity]
            elif entity in model:
                ctype = TYPES[step[2]]
                if kind == "add":
                    component = ctype(counter)
                    world.add_component(entity, component)
                    model[entity][ctype] = component
                else:
                    removed = world.try_remove_component(entity, ctype)
                    assert removed is model[entity].pop(ctype, None)
    for shape in range(len(QUERY_SHAPES)):
        assert_same(world, model, shape)
