"""The `World`: one façade over entities, components, cached queries, systems and events.

Choices a user should know:

* Entity deletion is immediate and ids are never reused, so a stale id never aliases a new
  entity. Using a deleted id raises `EntityNotFoundError` where it must (`add_component`,
  `remove_component`, `delete_entity`, `require_component`) and reads as "absent" where absence
  is an expected answer (`get_component` → None, `has_component` → False,
  `try_remove_component` → None), mirroring esper's `component_for_entity`/`try_component`.
* `query()` returns an immutable snapshot of the matches, taken when it is called; see
  `ecs_core.query` for what that means while you add, remove or delete during iteration.
* A component's type key is exactly `type(component)`; an entity has at most one per type and
  `add_component` replaces an existing one. Passing a class, None, or (to `create_entity`) two
  components of one type raises `InvalidComponentError`, and nothing is stored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, TypeVar, overload

from ecs_core.entity import EntityId, EntityIdGenerator
from ecs_core.events import EventBus
from ecs_core.exceptions import ComponentNotFoundError
from ecs_core.query import Query, QueryCache
from ecs_core.store import ComponentStore
from ecs_core.system import System, SystemExecutor

__all__ = ["World"]

C = TypeVar("C")
C1 = TypeVar("C1")
C2 = TypeVar("C2")
C3 = TypeVar("C3")
C4 = TypeVar("C4")


class World:
    """Entities, their components, the queries over them, the systems, and an event bus.

    ```python
    world = World()
    ship = world.create_entity(Position(0, 0), Velocity(1, 0))
    for entity, (pos, vel) in world.query(Position, Velocity, exclude=(Frozen,)):
        pos.x += vel.dx
    world.register_system(MovementSystem(), priority=0)
    await world.process()  # one tick
    ```
    """

    __slots__ = (
        "_by_entity",
        "_by_first",
        "_by_type",
        "_created",
        "_executor",
        "_ids",
        "_query_cache",
        "_snapshots",
        "_store",
        "events",
        "ticks",
    )

    def __init__(
        self, *, events: EventBus | None = None, ids: EntityIdGenerator | None = None
    ) -> None:
        self.events: EventBus = events if events is not None else EventBus()
        """The world's event bus; systems' failures are published here."""
        self.ticks = 0
        """How many ticks (`process()` calls) have completed."""
        self._ids = iter(ids if ids is not None else EntityIdGenerator())
        self._store = ComponentStore()
        self._by_type = self._store.by_type
        self._by_entity = self._store.by_entity
        self._query_cache = QueryCache()
        # Bound once: the warm query path and entity creation read these on every call.
        self._snapshots = self._query_cache.snapshots
        # Entities created since the last query or other structural change, whose query
        # upkeep is still to do. Flushed before anything that could observe or reorder it.
        self._created: list[EntityId] = []
        self._by_first = self._query_cache.by_first
        self._executor = SystemExecutor(self.events)

    def __repr__(self) -> str:
        return (
            f"World({len(self._store)} entities, {len(self._query_cache)} cached queries, "
            f"{len(self._executor)} systems, {self.ticks} ticks)"
        )

    # -- entities -----------------------------------------------------------------------

    def create_entity(self, *components: object) -> EntityId:
        """Create an entity carrying `components` (at most one per type) and return its id."""
        # This is ComponentStore.add_entity inlined: creation is the hottest structural path,
        # and a second Python frame per entity costs ~15% of it. A test checks the two agree.
        entity = next(self._ids)
        comps: dict[type[Any], Any] = {}
        by_type = self._by_type
        for component in components:
            ctype = type(component)
            comps[ctype] = component
            try:
                by_type[ctype][entity] = component
            except KeyError:
                # First component of this type ever: the one place a class or None can
                # show up, since they are never given a type dict. Free on the hot path.
                if component is None or isinstance(component, type):
                    self._store.abort_add_entity(entity, components, comps)
                by_type[ctype] = {entity: component}
        if len(comps) != len(components):
            # Two components of one type: the later one overwrote the earlier; undo it all.
            self._store.abort_add_entity(entity, components, comps)
        self._by_entity[entity] = comps
        if self._by_first:  # some query may want it: upkeep is batched, see _flush_created
            created = self._created
            if not created:
                # Unpublish every snapshot (the results themselves stay cached), so the
                # warm query path can trust a published snapshot without checking for
                # pending creations. Once per batch, not per entity.
                self._snapshots.clear()
            created.append(entity)
        return entity

    def delete_entity(self, entity: EntityId) -> None:
        """Delete the entity and all its components now; raise if it is not alive."""
        if self._created:
            self._flush_created()
        comps = self._store.remove_entity(entity)
        self._query_cache.entity_deleted(entity, comps)

    def entity_exists(self, entity: EntityId) -> bool:
        """Whether the id belongs to a live entity of this world."""
        return entity in self._store

    def entities(self) -> tuple[EntityId, ...]:
        """The ids of all live entities, oldest first."""
        return tuple(self._store.entities())

    def components_of(self, entity: EntityId) -> Mapping[type[Any], Any]:
        """A read-only live view of the entity's `{type: component}`; raise if not alive."""
        return MappingProxyType(self._store.components_of(entity))

    # -- components ---------------------------------------------------------------------

    def add_component(self, entity: EntityId, component: object) -> None:
        """Attach `component` to a live entity, replacing any component of the same type."""
        if self._created:
            self._flush_created()
        comps = self._store.add(entity, component)
        self._query_cache.component_added(entity, type(component), comps)

    def get_component(self, entity: EntityId, component_type: type[C]) -> C | None:
        """The entity's component of that type, or None if it has none or is not alive."""
        return self._store.get(entity, component_type)

    def require_component(self, entity: EntityId, component_type: type[C]) -> C:
        """The entity's component of that type; raise if it has none or is not alive."""
        component = self._store.get(entity, component_type)
        if component is None:
            if entity not in self._store:
                self._store.components_of(entity)  # raises EntityNotFoundError with the fix
            raise ComponentNotFoundError(
                f"Entity {entity!r} has no {component_type.__name__}; use "
                "world.get_component(...) (None when absent) if absence is expected."
            )
        return component

    def has_component(self, entity: EntityId, component_type: type[Any]) -> bool:
        """Whether the entity is alive and carries a component of exactly that type."""
        return self._store.has(entity, component_type)

    def remove_component(self, entity: EntityId, component_type: type[C]) -> C:
        """Detach and return the entity's component of that type; raise if it has none."""
        if self._created:
            self._flush_created()
        component, comps = self._store.remove(entity, component_type)
        self._query_cache.component_removed(entity, component_type, comps)
        return component

    def try_remove_component(self, entity: EntityId, component_type: type[C]) -> C | None:
        """Detach and return the component, or return None if the entity lacks it or is gone."""
        if not self._store.has(entity, component_type):
            return None
        return self.remove_component(entity, component_type)

    # -- queries ------------------------------------------------------------------------

    @overload
    def query(
        self, c1: type[C1], /, *, exclude: Iterable[type[Any]] = ()
    ) -> Sequence[tuple[EntityId, tuple[C1]]]: ...

    @overload
    def query(
        self, c1: type[C1], c2: type[C2], /, *, exclude: Iterable[type[Any]] = ()
    ) -> Sequence[tuple[EntityId, tuple[C1, C2]]]: ...

    @overload
    def query(
        self, c1: type[C1], c2: type[C2], c3: type[C3], /, *, exclude: Iterable[type[Any]] = ()
    ) -> Sequence[tuple[EntityId, tuple[C1, C2, C3]]]: ...

    @overload
    def query(
        self,
        c1: type[C1],
        c2: type[C2],
        c3: type[C3],
        c4: type[C4],
        /,
        *,
        exclude: Iterable[type[Any]] = (),
    ) -> Sequence[tuple[EntityId, tuple[C1, C2, C3, C4]]]: ...

    @overload
    def query(
        self, *types: type[Any], exclude: Iterable[type[Any]] = ()
    ) -> Sequence[tuple[EntityId, tuple[Any, ...]]]: ...

    def query(
        self, *types: type[Any], exclude: Iterable[type[Any]] = ()
    ) -> Sequence[tuple[EntityId, tuple[Any, ...]]]:
        """Entities having every type in `types` and none in `exclude`, with those components.

        Yields `(entity, (c1, c2, ...))` in the order of `types`. The result is an immutable
        snapshot taken now (cached until the matches change), so adding, removing or deleting
        while you iterate it is safe; the changes show in the next `query()` call. `exclude`
        may be any iterable of classes; a tuple takes the fastest path.
        """
        # A published snapshot is current: creation unpublishes all of them until its
        # upkeep is flushed, and any other change unpublishes the queries it touches.
        try:
            snapshot = self._snapshots.get((types, exclude) if exclude else types)
        except TypeError:  # an unhashable exclude such as a list: take the normalizing path
            snapshot = None
        if snapshot is None:
            if self._created:
                self._flush_created()
            snapshot = self._query(types, exclude).publish()
        return snapshot

    def _flush_created(self) -> None:
        """Do the query upkeep of the entities created since the last flush, as one batch.

        Creating thousands of entities while queries are live then costs one tight loop
        instead of a call per entity, and their rows end up next to each other in memory.
        Every query and every other structural change flushes first, so what callers can
        observe (matches and their order) is exactly what per-entity upkeep would give.
        """
        created = self._created
        self._created = []
        self._query_cache.entities_created(created, self._by_entity)

    def _query(self, types: tuple[type[Any], ...], exclude: Iterable[type[Any]]) -> Query:
        """The cached query for these arguments, built (and populated) on first use."""
        cache = self._query_cache
        try:
            query = cache.queries.get((types, exclude) if exclude else types)
        except TypeError:
            query = None
        if query is None:
            store = self._store
            query = cache.build(types, exclude, store.by_type, store.by_entity)
        return query

    # -- systems ------------------------------------------------------------------------

    def register_system(self, system: System, priority: int = 0) -> None:
        """Run `system` every tick at `priority`: lower first, equal ones concurrently."""
        self._executor.add(system, priority)

    def copy_systems_from(self, other: World) -> None:
        """Register every system of `other` here, at the same priorities and in the same
        order, as if `register_system` had been called for each; this world must have none
        (`InvalidSystemError` otherwise). Cheaper than registering them one by one: a pool
        of like worlds shares their registrations. Later changes to either world's systems
        do not reach the other."""
        if not isinstance(other, World):
            raise TypeError(f"copy_systems_from() takes a World, got {type(other).__name__}")
        self._executor.copy_from(other._executor)

    def remove_system(self, system: System) -> None:
        """Stop running `system`; raise `SystemNotFoundError` if it is not registered."""
        self._executor.remove(system)

    @property
    def systems(self) -> tuple[System, ...]:
        """The registered systems in the order a tick runs them."""
        return self._executor.systems

    async def process(self) -> None:
        """Run one tick of every registered system; a failing system is reported, not raised."""
        await self._executor.run(self)
        self.ticks += 1
