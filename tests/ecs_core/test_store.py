"""ComponentStore: O(1) add/get/remove/has by (entity, type), with both indexes kept in step."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from ecs_core import (
    ComponentNotFoundError,
    ComponentStore,
    EntityId,
    EntityNotFoundError,
    InvalidComponentError,
)


@dataclass(slots=True)
class Pos:
    x: float = 0.0


@dataclass(slots=True)
class Vel:
    dx: float = 0.0


E1 = EntityId(1)
E2 = EntityId(2)


def test_add_entity_indexes_components_by_type_and_by_entity() -> None:
    """A new entity's components are reachable from both the type index and the entity index."""
    store = ComponentStore()
    pos, vel = Pos(), Vel()
    store.add_entity(E1, (pos, vel))
    assert store.by_entity[E1] == {Pos: pos, Vel: vel}
    assert store.by_type[Pos] == {E1: pos}
    assert store.by_type[Vel] == {E1: vel}
    assert E1 in store
    assert len(store) == 1


def test_get_returns_the_component_or_none() -> None:
    """get() gives the stored instance, and None for a missing type or an unknown entity."""
    store = ComponentStore()
    pos = Pos()
    store.add_entity(E1, (pos,))
    assert store.get(E1, Pos) is pos
    assert store.get(E1, Vel) is None
    assert store.get(E2, Pos) is None


def test_has_is_false_for_missing_type_and_unknown_entity() -> None:
    """has() is True only for a live entity carrying exactly that type."""
    store = ComponentStore()
    store.add_entity(E1, (Pos(),))
    assert store.has(E1, Pos)
    assert not store.has(E1, Vel)
    assert not store.has(E2, Pos)


def test_add_replaces_a_component_of_the_same_type_in_both_indexes() -> None:
    """Adding a second Pos replaces the first everywhere."""
    store = ComponentStore()
    store.add_entity(E1, (Pos(1),))
    newer = Pos(2)
    store.add(E1, newer)
    assert store.get(E1, Pos) is newer
    assert store.by_type[Pos][E1] is newer


def test_add_to_unknown_entity_raises_with_the_fix() -> None:
    """Adding to an id the store does not hold says the entity is not alive and how to check."""
    store = ComponentStore()
    with pytest.raises(EntityNotFoundError, match=r"entity 2 is not alive.*entity_exists"):
        store.add(E2, Pos())


def test_remove_returns_the_component_and_clears_both_indexes() -> None:
    """remove() hands back the instance and leaves no trace of it."""
    store = ComponentStore()
    pos = Pos()
    store.add_entity(E1, (pos, Vel()))
    removed, remaining = store.remove(E1, Pos)
    assert removed is pos
    assert Pos not in remaining
    assert E1 not in store.by_type[Pos]
    assert not store.has(E1, Pos)


def test_remove_of_a_missing_component_names_it_and_suggests_try_remove() -> None:
    """Removing a type the entity lacks raises ComponentNotFoundError naming what it does have."""
    store = ComponentStore()
    store.add_entity(E1, (Vel(),))
    with pytest.raises(ComponentNotFoundError, match=r"Pos.*it has Vel.*try_remove_component"):
        store.remove(E1, Pos)


def test_remove_entity_returns_its_components_and_unindexes_them() -> None:
    """Deleting an entity returns what it had and removes it from every type's dict."""
    store = ComponentStore()
    pos = Pos()
    store.add_entity(E1, (pos,))
    store.add_entity(E2, (Pos(),))
    assert store.remove_entity(E1) == {Pos: pos}
    assert E1 not in store
    assert list(store.entities_with(Pos)) == [E2]


def test_remove_entity_twice_raises() -> None:
    """A deleted entity cannot be deleted again."""
    store = ComponentStore()
    store.add_entity(E1, ())
    store.remove_entity(E1)
    with pytest.raises(EntityNotFoundError):
        store.remove_entity(E1)


@pytest.mark.parametrize(
    ("components", "message"),
    [
        ((Pos(), Pos()), r"two Pos components"),
        ((Pos, Vel()), r"the class Pos.*instances"),
        ((Vel(), None), r"None"),
    ],
)
def test_add_entity_with_bad_components_raises_and_stores_nothing(
    components: tuple[object, ...], message: str
) -> None:
    """A repeated type, a class or None is rejected and leaves no half-stored entity behind."""
    store = ComponentStore()
    with pytest.raises(InvalidComponentError, match=message):
        store.add_entity(E1, components)
    assert E1 not in store
    assert all(E1 not in by_entity for by_entity in store.by_type.values())


@pytest.mark.parametrize("bad", [Pos, None])
def test_add_of_a_class_or_none_is_rejected(bad: object) -> None:
    """add() refuses things that are not component instances."""
    store = ComponentStore()
    store.add_entity(E1, ())
    with pytest.raises(InvalidComponentError, match="components are instances"):
        store.add(E1, bad)


def test_add_entity_refuses_an_existing_id() -> None:
    """Ids are unique: storing an id twice is an error, not a silent overwrite."""
    store = ComponentStore()
    store.add_entity(E1, ())
    with pytest.raises(ValueError, match="already exists"):
        store.add_entity(E1, ())


def test_components_of_unknown_entity_raises() -> None:
    """components_of() on an id that is not alive raises EntityNotFoundError."""
    with pytest.raises(EntityNotFoundError):
        ComponentStore().components_of(E1)


def test_entities_with_unknown_type_is_empty() -> None:
    """Asking for a type nobody has gives an empty mapping, not an error."""
    assert dict(ComponentStore().entities_with(Pos)) == {}
