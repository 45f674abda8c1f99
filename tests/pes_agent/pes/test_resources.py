"""ResourceTable: each run entity's services, found by its world and entity, never another's."""

from __future__ import annotations

import gc
from typing import Any, cast

import pytest

from ecs_core import EntityId, World
from pes_agent.pes.resources import ResourceTable, RunResources


def _resources() -> RunResources:
    # The table only stores and hands back what it is given: stand-ins will do.
    return RunResources(llm=cast(Any, object()), recorder=cast(Any, object()))


def test_runs_of_separate_worlds_with_the_same_entity_id_keep_their_own_resources() -> None:
    """Two worlds each with entity 1 get back their own resources, and detaching one run
    leaves the other's."""
    table, first, second = ResourceTable(), World(), World()
    one, two = _resources(), _resources()
    table.attach(first, EntityId(1), one)
    table.attach(second, EntityId(1), two)
    assert table.get(first, EntityId(1)) is one
    assert table.of(second, EntityId(1)) is two
    assert len(table) == 2
    table.detach(first, EntityId(1))
    assert table.get(first, EntityId(1)) is None
    assert table.entities_in(first) == ()
    assert table.get(second, EntityId(1)) is two
    assert len(table) == 1


def test_entities_of_a_world_are_listed_in_attach_order_until_detached() -> None:
    """A world's run entities come back oldest first, with their resources, and a detached
    one drops out while the others stay in order."""
    table, world = ResourceTable(), World()
    attached = {EntityId(n): _resources() for n in (3, 1, 2)}
    for entity, resources in attached.items():
        table.attach(world, entity, resources)
    assert table.entities_in(world) == (3, 1, 2)
    assert table.runs_in(world) == list(attached.items())
    table.detach(world, EntityId(1))
    assert table.entities_in(world) == (3, 2)
    assert table.runs_in(world) == [(3, attached[EntityId(3)]), (2, attached[EntityId(2)])]


def test_attaching_again_replaces_the_resources_without_listing_the_entity_twice() -> None:
    """A second attach of the same run entity replaces its resources."""
    table, world = ResourceTable(), World()
    table.attach(world, EntityId(1), _resources())
    replacement = _resources()
    table.attach(world, EntityId(1), replacement)
    assert table.entities_in(world) == (1,)
    assert table.get(world, EntityId(1)) is replacement


def test_a_run_without_resources_is_absent_and_detaching_it_does_nothing() -> None:
    """`get` gives None, `of` a LookupError naming the entity, and `detach` is a no-op for a
    run entity that has no resources attached."""
    table, world = ResourceTable(), World()
    table.detach(world, EntityId(7))
    assert table.get(world, EntityId(7)) is None
    assert table.entities_in(world) == ()
    assert table.runs_in(world) == []
    with pytest.raises(LookupError, match="run entity 7"):
        table.of(world, EntityId(7))


def test_a_world_whose_runs_are_detached_is_no_longer_held() -> None:
    """Once its last run entity is detached, the table keeps no reference to the world."""
    table, world = ResourceTable(), World()
    table.attach(world, EntityId(1), _resources())
    table.detach(world, EntityId(1))
    gc.collect()
    assert not any(referrer is table._entities for referrer in gc.get_referrers(world))
