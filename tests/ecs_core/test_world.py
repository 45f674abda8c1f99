"""World: the façade's entity and component operations, and its bad-input errors."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from abc import ABC
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest

from ecs_core import (
    ComponentNotFoundError,
    ComponentStore,
    EntityId,
    EntityIdGenerator,
    EntityNotFoundError,
    ErrorComponent,
    InvalidComponentError,
    TerminalComponent,
    World,
)


@dataclass(slots=True)
class Pos:
    x: float = 0.0


@dataclass(slots=True)
class Vel:
    dx: float = 0.0


class AbstractThing(ABC):  # noqa: B024 - only its metaclass matters here
    """A class whose metaclass is ABCMeta rather than type."""


def test_create_entity_returns_new_increasing_ids() -> None:
    """Each create_entity gives a fresh id, larger than the last."""
    world = World()
    ids = [world.create_entity() for _ in range(3)]
    assert ids == sorted(ids)
    assert len(set(ids)) == 3


def test_ids_are_never_reused_after_deletion() -> None:
    """A deleted entity's id is not handed out again, so stale ids cannot alias new entities."""
    world = World()
    first = world.create_entity()
    world.delete_entity(first)
    assert world.create_entity() != first


def test_worlds_sharing_an_id_generator_never_collide() -> None:
    """A generator passed to two worlds issues each id once across both."""
    ids = EntityIdGenerator(start=100)
    a, b = World(ids=ids), World(ids=ids)
    assert [a.create_entity(), b.create_entity(), a.create_entity()] == [100, 101, 102]


def test_id_generator_rejects_a_bad_start() -> None:
    """The first id must be a non-negative int."""
    with pytest.raises(ValueError, match="non-negative int"):
        EntityIdGenerator(start=-1)


def test_created_components_are_readable() -> None:
    """Components passed to create_entity come back from get/require/has/components_of."""
    world = World()
    pos = Pos(1)
    e = world.create_entity(pos)
    assert world.get_component(e, Pos) is pos
    assert world.require_component(e, Pos) is pos
    assert world.has_component(e, Pos)
    assert not world.has_component(e, Vel)
    assert dict(world.components_of(e)) == {Pos: pos}
    assert world.entities() == (e,)


def test_get_component_is_none_when_absent_or_entity_gone() -> None:
    """get_component answers None for a missing type and for a deleted entity."""
    world = World()
    e = world.create_entity(Pos())
    assert world.get_component(e, Vel) is None
    world.delete_entity(e)
    assert world.get_component(e, Pos) is None
    assert not world.has_component(e, Pos)
    assert not world.entity_exists(e)


def test_require_component_raises_when_absent() -> None:
    """require_component names the missing type and points to get_component."""
    world = World()
    e = world.create_entity(Pos())
    with pytest.raises(ComponentNotFoundError, match=r"no Vel.*get_component"):
        world.require_component(e, Vel)


def test_require_component_on_a_deleted_entity_raises_entity_not_found() -> None:
    """For a deleted id the problem is the entity, and the error says so."""
    world = World()
    e = world.create_entity(Pos())
    world.delete_entity(e)
    with pytest.raises(EntityNotFoundError, match="not alive"):
        world.require_component(e, Pos)


def test_add_component_attaches_and_replaces() -> None:
    """add_component attaches a new type and replaces an existing one of the same type."""
    world = World()
    e = world.create_entity(Pos(1))
    vel = Vel(2)
    world.add_component(e, vel)
    newer = Pos(3)
    world.add_component(e, newer)
    assert world.get_component(e, Vel) is vel
    assert world.get_component(e, Pos) is newer


def test_add_component_to_a_deleted_entity_raises_with_the_fix() -> None:
    """Adding to a deleted entity says it is not alive and how to avoid the mistake."""
    world = World()
    e = world.create_entity()
    world.delete_entity(e)
    with pytest.raises(
        EntityNotFoundError,
        match=rf"Cannot add Pos: entity {e} is not alive.*deleted or never created.*entity_exists",
    ):
        world.add_component(e, Pos())


def test_add_component_to_a_never_created_entity_raises() -> None:
    """An id this world never issued is rejected the same way."""
    with pytest.raises(EntityNotFoundError, match="entity 12345 is not alive"):
        World().add_component(EntityId(12345), Pos())


@pytest.mark.parametrize("bad", [Pos, None])
def test_add_component_rejects_a_class_or_none(bad: object) -> None:
    """Passing the class instead of an instance (or None) is explained, not stored."""
    world = World()
    e = world.create_entity()
    with pytest.raises(InvalidComponentError, match="components are instances"):
        world.add_component(e, bad)
    assert dict(world.components_of(e)) == {}


def test_remove_component_returns_the_removed_instance() -> None:
    """remove_component detaches the component and hands it back."""
    world = World()
    pos = Pos()
    e = world.create_entity(pos)
    assert world.remove_component(e, Pos) is pos
    assert not world.has_component(e, Pos)


def test_remove_component_that_is_not_there_raises_and_suggests_try() -> None:
    """Removing an absent type raises ComponentNotFoundError mentioning try_remove_component."""
    world = World()
    e = world.create_entity(Pos())
    with pytest.raises(ComponentNotFoundError, match=r"Cannot remove Vel.*try_remove_component"):
        world.remove_component(e, Vel)


def test_remove_component_from_a_deleted_entity_raises_entity_not_found() -> None:
    """For a deleted entity, remove_component blames the entity, not the component."""
    world = World()
    e = world.create_entity(Pos())
    world.delete_entity(e)
    with pytest.raises(EntityNotFoundError):
        world.remove_component(e, Pos)


def test_try_remove_component_returns_none_when_absent_or_entity_gone() -> None:
    """The try_ variant never raises for absence: None for a missing type or a deleted entity."""
    world = World()
    pos = Pos()
    e = world.create_entity(pos)
    assert world.try_remove_component(e, Vel) is None
    assert world.try_remove_component(e, Pos) is pos
    assert world.try_remove_component(e, Pos) is None
    world.delete_entity(e)
    assert world.try_remove_component(e, Pos) is None


def test_delete_entity_twice_raises() -> None:
    """Deleting an entity that is already gone is reported."""
    world = World()
    e = world.create_entity()
    world.delete_entity(e)
    with pytest.raises(EntityNotFoundError, match="Cannot delete the entity"):
        world.delete_entity(e)


def test_components_of_is_read_only() -> None:
    """components_of gives a view that cannot be used to bypass the world's bookkeeping."""
    world = World()
    e = world.create_entity(Pos())
    view: Any = world.components_of(e)
    with pytest.raises(TypeError):
        view[Vel] = Vel()


@pytest.mark.parametrize(
    ("components", "message"),
    [
        ((Pos(), Pos()), r"two Pos components"),
        ((Pos, Vel()), r"the class Pos"),
        ((Vel(), None), r"None"),
        ((Pos(), Vel(), Vel()), r"two Vel components"),
        ((Pos(), AbstractThing), r"the class AbstractThing"),
    ],
)
def test_create_entity_rejects_bad_components_like_the_store_does(
    components: tuple[object, ...], message: str
) -> None:
    """World.create_entity (which inlines ComponentStore.add_entity) agrees with the store."""
    world = World()
    world.query(Pos)
    world.query(Vel)
    with pytest.raises(InvalidComponentError, match=message):
        world.create_entity(*components)
    with pytest.raises(InvalidComponentError, match=message):
        ComponentStore().add_entity(EntityId(1), components)
    assert world.entities() == ()
    assert world.query(Pos) == ()
    assert world.query(Vel) == ()
    assert world.query(type) == ()


def test_create_entity_builds_the_same_indexes_as_the_store() -> None:
    """The inlined creation path leaves the store exactly as ComponentStore.add_entity would."""
    world = World()
    pos, vel = Pos(), Vel()
    e = world.create_entity(pos, vel)
    reference = ComponentStore()
    reference.add_entity(e, (pos, vel))
    assert world._store.by_entity == reference.by_entity
    assert world._store.by_type == reference.by_type


def test_repr_summarises_the_world() -> None:
    """repr(world) counts entities, cached queries, systems and ticks."""
    world = World()
    world.create_entity(Pos())
    world.query(Pos)
    assert repr(world) == "World(1 entities, 1 cached queries, 0 systems, 0 ticks)"


def test_core_components_are_slotted_dataclasses_with_useful_defaults() -> None:
    """TerminalComponent takes a reason; ErrorComponent stamps an aware UTC time by default."""
    terminal = TerminalComponent(reason="done")
    error = ErrorComponent(ValueError("x"), "planner")
    assert terminal.reason == "done"
    assert error.timestamp.tzinfo is UTC
    assert not hasattr(terminal, "__dict__")
    assert not hasattr(error, "__dict__")


# -- static typing of query() -----------------------------------------------------------------

TYPED_SNIPPET = """
from dataclasses import dataclass
from typing import Any, assert_type
from ecs_core import EntityId, World

@dataclass(slots=True)
class A: ...
@dataclass(slots=True)
class B: ...
@dataclass(slots=True)
class C: ...
@dataclass(slots=True)
class D: ...

world = World()
for e1, c1 in world.query(A):
    assert_type(e1, EntityId)
    assert_type(c1, tuple[A])
for _, c2 in world.query(A, B, exclude=(C,)):
    assert_type(c2, tuple[A, B])
for _, c3 in world.query(A, B, C):
    assert_type(c3, tuple[A, B, C])
for _, (a, b, c, d) in world.query(A, B, C, D):
    assert_type(d, D)
extra: tuple[type[Any], ...] = (C,)
for _, many in world.query(A, B, *extra):
    assert_type(many, tuple[Any, ...])
maybe = world.get_component(e1, A)
assert_type(maybe, A | None)
assert_type(world.require_component(e1, B), B)
assert_type(world.remove_component(e1, B), B)
assert_type(world.try_remove_component(e1, B), B | None)
"""


@pytest.mark.slow
def test_query_results_are_precisely_typed_for_one_to_four_types(tmp_path: Path) -> None:
    """mypy --strict infers tuple[A], tuple[A, B], ... from query() and T | None from lookups."""
    snippet = tmp_path / "typed_use.py"
    snippet.write_text(textwrap.dedent(TYPED_SNIPPET))
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(snippet)],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert result.returncode == 0, result.stdout + result.stderr
