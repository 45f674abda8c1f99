"""Cached queries, maintained incrementally as components are added and removed.

A `Query` is "entities that have all of `types` and none of `exclude`". Its matches live in a
dict `{entity: (entity, (c1, c2, ...))}` that is updated for one entity at a time when that
entity gains or loses a component of a type the query mentions — O(1) per affected query, with
no wholesale cache flush. (`World` hands over newly created entities in batches, just before
its next query or other structural change, which is observably the same.) `QueryCache` owns the
queries and a per-type index of the queries each component type touches, so a structural
change visits only the queries that care.

Iteration semantics: `Query.rows()` returns an immutable snapshot (a tuple) of the matches,
taken when it is called and reused until the matches change. Structural changes made while
iterating a snapshot are therefore safe: they never raise, never skip or repeat an entity, and
are visible to the next `rows()` call. The snapshot holds the component objects the entity had
when it was taken, so mutating a component's fields is seen immediately, but an entity deleted
(or changed) later in the same loop is still yielded with its old components — check
`world.entity_exists(entity)` in loops that delete *other* entities.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from operator import itemgetter
from typing import Any

from ecs_core.entity import EntityId
from ecs_core.exceptions import InvalidQueryError

__all__ = ["Query", "QueryCache", "Row"]

Row = tuple[EntityId, tuple[Any, ...]]
"""One query result: the entity and its components in the order the query asked for them."""


class Query:
    """The cached set of entities having every type in `types` and none in `exclude`."""

    __slots__ = (
        "_check",
        "_excluded",
        "_fetch",
        "_keys",
        "_published",
        "_required",
        "_rows",
        "_single",
        "_snapshot",
        "exclude",
        "types",
    )

    def __init__(
        self,
        types: tuple[type[Any], ...],
        exclude: tuple[type[Any], ...] = (),
        *,
        published: dict[Hashable, tuple[Row, ...]] | None = None,
    ) -> None:
        _validate(types, exclude)
        self.types = types
        self.exclude = exclude
        self._required = frozenset(types)
        self._excluded = exclude
        # Required types still to check when the caller knows the entity has `present`
        # (None: nothing known). Upkeep always knows one, so it checks one type fewer.
        self._check: dict[type[Any] | None, tuple[type[Any], ...]] = {None: types}
        for present in types:
            self._check[present] = tuple(t for t in types if t is not present)
        self._single: type[Any] | None = types[0] if len(types) == 1 else None
        # itemgetter over several keys builds the component tuple in C.
        self._fetch: Callable[[Mapping[type[Any], Any]], tuple[Any, ...]] = itemgetter(*types)
        self._rows: dict[EntityId, Row] = {}
        # The current snapshot, or None once the matches changed since it was taken.
        # `publish()` also stores it in `_published` under each of `_keys` — the dict the
        # world's warm query path reads, so a warm `world.query()` is one dict lookup — and
        # `_stale()` takes it out again, so a published snapshot is always current. (World
        # may also clear `_published` wholesale; the next slow-path query republishes.)
        self._snapshot: tuple[Row, ...] | None = None
        self._published: dict[Hashable, tuple[Row, ...]] = (
            published if published is not None else {}
        )
        self._keys: list[Hashable] = []

    def __repr__(self) -> str:
        names = ", ".join(t.__name__ for t in self.types)
        if self.exclude:
            names += ", exclude=(" + ", ".join(t.__name__ for t in self.exclude) + ")"
        return f"Query({names}) with {len(self._rows)} matches"

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, entity: object) -> bool:
        return entity in self._rows

    def rows(self) -> tuple[Row, ...]:
        """The current matches as an immutable snapshot, oldest match first."""
        snapshot = self._snapshot
        if snapshot is None:
            snapshot = self._snapshot = tuple(self._rows.values())
        return snapshot

    def publish(self) -> tuple[Row, ...]:
        """The current snapshot, also stored in the published dict under each of its keys."""
        snapshot = self.rows()
        published = self._published
        for key in self._keys:
            published[key] = snapshot
        return snapshot

    def publish_as(self, key: Hashable) -> None:
        """Also keep this query's snapshot in the published dict under `key`."""
        if key not in self._keys:
            self._keys.append(key)
            if self._snapshot is not None:
                self._published[key] = self._snapshot

    def _stale(self) -> None:
        # Only the first change after a snapshot was taken pays for unpublishing it.
        self._snapshot = None
        published = self._published
        for key in self._keys:
            published.pop(key, None)  # World may have unpublished it already

    def matches(self, components: Mapping[type[Any], Any]) -> bool:
        """Whether an entity with these components belongs to this query."""
        return components.keys() >= self._required and not any(
            t in components for t in self._excluded
        )

    def refresh(
        self,
        entity: EntityId,
        components: Mapping[type[Any], Any],
        present: type[Any] | None = None,
    ) -> None:
        """Re-decide one entity's membership (and its row) from its current components.

        `present`, if given, is a required type the caller knows the entity has (the type it
        just gained, or the one that put this query in the index it came from).
        """
        # Plain loops beat set operations here: no view object, no exception on a miss.
        for ctype in self._check[present]:
            if ctype not in components:
                break
        else:
            for ctype in self._excluded:
                if ctype in components:
                    break
            else:
                single = self._single
                if single is not None:
                    self._rows[entity] = (entity, (components[single],))
                else:
                    self._rows[entity] = (entity, self._fetch(components))
                if self._snapshot is not None:
                    self._stale()
                return
        if entity in self._rows:
            del self._rows[entity]
            if self._snapshot is not None:
                self._stale()

    def discard(self, entity: EntityId) -> None:
        """Drop the entity from the matches if it is there."""
        if self._rows.pop(entity, None) is not None and self._snapshot is not None:
            self._stale()

    def populate(
        self,
        candidates: Iterable[EntityId],
        components_of: Mapping[EntityId, Mapping[type[Any], Any]],
    ) -> None:
        """Fill the matches from scratch by testing every candidate entity once."""
        # `refresh` inlined: one loop over many entities (see QueryCache.entities_created).
        rows = self._rows
        check = self._check[None]
        excluded = self._excluded
        single = self._single
        fetch = self._fetch
        for entity in candidates:
            components = components_of[entity]
            for ctype in check:
                if ctype not in components:
                    break
            else:
                for ctype in excluded:
                    if ctype in components:
                        break
                else:
                    if single is not None:
                        rows[entity] = (entity, (components[single],))
                    else:
                        rows[entity] = (entity, fetch(components))
        if self._snapshot is not None:
            self._stale()


def _validate(types: tuple[type[Any], ...], exclude: tuple[type[Any], ...]) -> None:
    if not types:
        raise InvalidQueryError(
            "A query needs at least one component type to require, e.g. world.query(Position)."
        )
    for ctype in (*types, *exclude):
        if not isinstance(ctype, type):
            raise InvalidQueryError(
                f"Query arguments must be component classes, got {ctype!r}; "
                "write world.query(Position), not world.query(Position())."
            )
    for group, label in ((types, "types"), (exclude, "exclude")):
        if len(set(group)) != len(group):
            raise InvalidQueryError(
                f"Query {label} repeat a component type ({', '.join(t.__name__ for t in group)}); "
                "list each type once."
            )
    both = set(types) & set(exclude)
    if both:
        raise InvalidQueryError(
            f"Query requires and excludes {', '.join(sorted(t.__name__ for t in both))}, "
            "so it could never match; drop the type from one of the two."
        )


class QueryCache:
    """All queries of one world, keyed by (types, exclude), with per-type indexes for upkeep.

    `by_type[T]`: queries requiring T. `by_exclude[T]`: queries excluding T. `by_first[T]`:
    queries whose first required type is T — an entity can only match a query if it has that
    type, so entity creation and deletion visit each candidate query exactly once.
    """

    __slots__ = ("_by_canonical", "by_exclude", "by_first", "by_type", "queries", "snapshots")

    def __init__(self) -> None:
        self.queries: dict[Hashable, Query] = {}
        # key -> current snapshot, for every query whose matches have not changed since its
        # snapshot was taken: the whole warm path of `World.query`.
        self.snapshots: dict[Hashable, tuple[Row, ...]] = {}
        self._by_canonical: dict[tuple[tuple[type[Any], ...], frozenset[type[Any]]], Query] = {}
        self.by_type: dict[type[Any], list[Query]] = {}
        self.by_exclude: dict[type[Any], list[Query]] = {}
        self.by_first: dict[type[Any], list[Query]] = {}

    def __len__(self) -> int:
        return len(self._by_canonical)

    @staticmethod
    def key(types: tuple[type[Any], ...], exclude: Iterable[type[Any]]) -> Hashable:
        """The lookup key of a query as the caller spelled it (the cheap, warm-path key)."""
        return (types, exclude if type(exclude) is tuple else tuple(exclude)) if exclude else types

    def build(
        self,
        types: tuple[type[Any], ...],
        exclude: Iterable[type[Any]],
        by_type: Mapping[type[Any], Mapping[EntityId, Any]],
        by_entity: Mapping[EntityId, Mapping[type[Any], Any]],
    ) -> Query:
        """Find or create, populate and index the query; the slow path of `World.query`."""
        exclude_tuple = tuple(exclude)
        _validate(types, exclude_tuple)  # before hashing: a bad argument may be unhashable
        spelled = self.key(types, exclude_tuple)
        canonical = (types, frozenset(exclude_tuple))
        query = self._by_canonical.get(canonical)
        if query is None:
            query = Query(types, exclude_tuple, published=self.snapshots)
            # Walk the smallest candidate set: the rarest required type bounds the matches.
            smallest = min((by_type.get(t, {}) for t in types), key=len)
            query.populate(smallest, by_entity)
            self._by_canonical[canonical] = query
            for ctype in types:
                self.by_type.setdefault(ctype, []).append(query)
            for ctype in exclude_tuple:
                self.by_exclude.setdefault(ctype, []).append(query)
            self.by_first.setdefault(types[0], []).append(query)
        self.queries[spelled] = query
        query.publish_as(spelled)
        return query

    def entities_created(
        self,
        entities: Iterable[EntityId],
        components_of: Mapping[EntityId, Mapping[type[Any], Any]],
    ) -> None:
        """Add a batch of new entities to every query each one matches, in creation order.

        `World` calls this with the entities created since its last query or other
        structural change, so one loop builds all their rows: no Python call per entity,
        and rows allocated together stay together in memory, which keeps later iteration
        as cache-friendly as a freshly rebuilt list. Entities deleted meanwhile are skipped.
        """
        # Query.refresh inlined; keep the two in step. The entities are new, so there is
        # no old row to drop.
        by_first = self.by_first
        for entity in entities:
            components = components_of.get(entity)
            if components is None:
                continue
            for present in components:
                queries = by_first.get(present)
                if queries is None:
                    continue
                for query in queries:
                    for ctype in query._check[present]:
                        if ctype not in components:
                            break
                    else:
                        for ctype in query._excluded:
                            if ctype in components:
                                break
                        else:
                            single = query._single
                            if single is not None:
                                query._rows[entity] = (entity, (components[single],))
                            else:
                                query._rows[entity] = (entity, query._fetch(components))
                            if query._snapshot is not None:
                                query._stale()

    def entity_deleted(self, entity: EntityId, components: Mapping[type[Any], Any]) -> None:
        """Remove a deleted entity (which had `components`) from every query holding it."""
        by_first = self.by_first
        for ctype in components:
            queries = by_first.get(ctype)
            if queries is not None:
                for query in queries:
                    query.discard(entity)

    def component_added(
        self, entity: EntityId, ctype: type[Any], components: Mapping[type[Any], Any]
    ) -> None:
        """Update the queries that mention `ctype` after the entity gained (or replaced) one."""
        queries = self.by_type.get(ctype)
        if queries is not None:
            for query in queries:
                query.refresh(entity, components, ctype)
        queries = self.by_exclude.get(ctype)
        if queries is not None:
            for query in queries:
                query.discard(entity)

    def component_removed(
        self, entity: EntityId, ctype: type[Any], components: Mapping[type[Any], Any]
    ) -> None:
        """Update the queries that mention `ctype` after the entity lost its one."""
        queries = self.by_type.get(ctype)
        if queries is not None:
            for query in queries:
                query.discard(entity)
        queries = self.by_exclude.get(ctype)
        if queries is not None:
            for query in queries:
                query.refresh(entity, components)
