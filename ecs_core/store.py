"""Component storage: O(1) add, get, remove and has by (entity, component type)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NoReturn, TypeVar

from ecs_core.entity import EntityId
from ecs_core.exceptions import (
    ComponentNotFoundError,
    EntityNotFoundError,
    InvalidComponentError,
)

__all__ = ["ComponentStore"]

C = TypeVar("C")


def _not_alive(entity: EntityId, action: str) -> EntityNotFoundError:
    return EntityNotFoundError(
        f"Cannot {action}: entity {entity!r} is not alive in this world — it was deleted or "
        "never created here. Create entities with world.create_entity(...) and check "
        "world.entity_exists(entity) before using an id that may have been deleted."
    )


def _check_instance(component: object, action: str) -> None:
    if component is None or isinstance(component, type):
        shown = "None" if component is None else f"the class {component.__name__}"
        raise InvalidComponentError(
            f"Cannot {action} {shown}: components are instances, e.g. Position(0, 0), "
            "not classes or None."
        )


class ComponentStore:
    """Components indexed both by type and by entity.

    A component's type key is exactly `type(component)`: subclasses are separate types.
    Two indexes are kept in step: `by_type` = `{type: {entity: component}}` (what queries
    scan) and `by_entity` = `{entity: {type: component}}` (what membership checks and entity
    deletion read). Treat them as read-only: only the store's methods — and `World`'s inlined
    copy of `add_entity` — write to them.
    """

    __slots__ = ("by_entity", "by_type")

    def __init__(self) -> None:
        self.by_type: dict[type[Any], dict[EntityId, Any]] = {}
        self.by_entity: dict[EntityId, dict[type[Any], Any]] = {}

    def __contains__(self, entity: object) -> bool:
        return entity in self.by_entity

    def __len__(self) -> int:
        return len(self.by_entity)

    def entities(self) -> Iterable[EntityId]:
        """Iterate the ids of all live entities, oldest first."""
        return self.by_entity.keys()

    def add_entity(self, entity: EntityId, components: tuple[object, ...]) -> dict[type[Any], Any]:
        """Store a new entity with its components and return its live `{type: component}` map.

        Nothing is stored if a component is invalid, so a failed call leaves no half-entity.
        This is the hottest path of the store (`World.create_entity` inlines it), hence one
        loop whose checks cost nothing when the input is valid; a failure undoes what the
        loop had stored.
        """
        if entity in self.by_entity:
            raise ValueError(f"Entity {entity!r} already exists; ids must be unique per world.")
        comps: dict[type[Any], Any] = {}
        by_type = self.by_type
        for component in components:
            ctype = type(component)
            if ctype in comps:
                self.abort_add_entity(entity, components, comps)
            comps[ctype] = component
            try:
                by_type[ctype][entity] = component
            except KeyError:
                # First component of this type ever: the one place a class or None can
                # show up, since they are never given a type dict. Free on the hot path.
                if component is None or isinstance(component, type):
                    self.abort_add_entity(entity, components, comps)
                by_type[ctype] = {entity: component}
        self.by_entity[entity] = comps
        return comps

    def abort_add_entity(
        self, entity: EntityId, components: tuple[object, ...], comps: dict[type[Any], Any]
    ) -> NoReturn:
        """Undo a half-done `add_entity` (`comps`: what it stored so far); raise why it failed."""
        by_type = self.by_type
        for ctype in comps:
            entities = by_type.get(ctype)
            if entities is not None:
                entities.pop(entity, None)
                if not entities:
                    del by_type[ctype]
        for component in components:
            _check_instance(component, "create an entity with")
        seen: set[type[Any]] = set()
        for component in components:
            ctype = type(component)
            if ctype in seen:
                raise InvalidComponentError(
                    f"Cannot create an entity with two {ctype.__name__} components: an entity "
                    f"holds at most one component per type. Pass a single {ctype.__name__}."
                )
            seen.add(ctype)
        raise AssertionError("unreachable: add_entity found a problem abort_add_entity did not")

    def remove_entity(self, entity: EntityId) -> dict[type[Any], Any]:
        """Forget the entity and return the `{type: component}` map it had."""
        comps = self.by_entity.pop(entity, None)
        if comps is None:
            raise _not_alive(entity, "delete the entity")
        by_type = self.by_type
        for ctype in comps:
            del by_type[ctype][entity]
        return comps

    def add(self, entity: EntityId, component: object) -> dict[type[Any], Any]:
        """Attach `component` (replacing one of the same type) and return the entity's map."""
        comps = self.by_entity.get(entity)
        if comps is None:
            raise _not_alive(entity, f"add {type(component).__name__}")
        if component is None or isinstance(component, type):
            _check_instance(component, "add")
        ctype = type(component)
        comps[ctype] = component
        try:
            self.by_type[ctype][entity] = component
        except KeyError:
            self.by_type[ctype] = {entity: component}
        return comps

    def get(self, entity: EntityId, component_type: type[C]) -> C | None:
        """The entity's component of that type, or None if it has none or is not alive."""
        comps = self.by_entity.get(entity)
        if comps is None:
            return None
        component: C | None = comps.get(component_type)
        return component

    def has(self, entity: EntityId, component_type: type[Any]) -> bool:
        """Whether the entity is alive and carries a component of exactly that type."""
        comps = self.by_entity.get(entity)
        return comps is not None and component_type in comps

    def remove(self, entity: EntityId, component_type: type[C]) -> tuple[C, dict[type[Any], Any]]:
        """Detach and return the component, with the entity's map after removal; raise if absent."""
        comps = self.by_entity.get(entity)
        if comps is None:
            raise _not_alive(entity, f"remove {component_type.__name__}")
        try:
            component: C = comps.pop(component_type)
        except KeyError:
            raise ComponentNotFoundError(
                f"Cannot remove {component_type.__name__} from entity {entity!r}: it has none "
                f"(it has {', '.join(t.__name__ for t in comps) or 'no components'}). "
                "Use world.try_remove_component(...) when absence is expected."
            ) from None
        del self.by_type[component_type][entity]
        return component, comps

    def components_of(self, entity: EntityId) -> dict[type[Any], Any]:
        """The entity's live `{type: component}` map (read-only by contract); raise if not alive."""
        comps = self.by_entity.get(entity)
        if comps is None:
            raise _not_alive(entity, "read its components")
        return comps

    def entities_with(self, component_type: type[Any]) -> Mapping[EntityId, Any]:
        """The live `{entity: component}` map for one type (empty if nobody has it)."""
        return self.by_type.get(component_type, {})
