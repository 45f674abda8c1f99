"""What every vector store checks and computes the same way: rows, vectors, filters, NumPy,
and `CheckedStore`, the public methods the built-in stores share.

Kept in one place so a row refused by one store is refused by all, and a `where` filter
matches the same rows everywhere (the rules are in `pes_agent.retrieval.base`). A stored row
whose metadata cannot be read (damaged by hand or by another program) is left out of every
search with a warning naming the store, the table and the row, and never fails the search.
"""

from __future__ import annotations

import json
import math
import sys
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from types import ModuleType
from typing import TYPE_CHECKING, Any

from pes_agent.errors import ConfigurationError, UsageError
from pes_agent.observing.logs import get_logger
from pes_agent.retrieval.base import (
    DimensionMismatchError,
    Metadata,
    MetadataValue,
    ScoredDocument,
)

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "CheckedStore",
    "Damaged",
    "Rows",
    "Search",
    "check_dimension",
    "check_rows",
    "check_top_k",
    "check_where",
    "found_row",
    "json_number",
    "metadata_matches",
    "query_vector",
    "read_metadata",
    "require_numpy",
    "skip_damaged",
]

_log = get_logger("pes_agent.retrieval")


def require_numpy() -> ModuleType:
    """NumPy, or a `ConfigurationError` saying which extra installs it."""
    try:
        import numpy
    except ImportError as exc:
        raise ConfigurationError(
            "the vector stores need NumPy: pip install 'pes-agent[retrieval]'"
        ) from exc
    return numpy


def check_dimension(dimension: object, what: str) -> int:
    """`dimension` as a positive int, or a `ConfigurationError` naming `what` has it."""
    if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1:
        raise ConfigurationError(f"{what}: dimension must be a positive int, got {dimension!r}")
    return dimension


def check_top_k(top_k: object) -> int:
    """`top_k` as a positive int, or a `UsageError`."""
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise UsageError(f"top_k must be a positive int, got {top_k!r}")
    return top_k


def _check_value(key: object, value: object, what: str) -> MetadataValue:
    if not isinstance(key, str):
        raise UsageError(f"{what} keys must be strings, got {key!r}")
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise UsageError(f"{what}[{key!r}] must be a finite number, got {value!r}")
        return value
    raise UsageError(
        f"{what}[{key!r}] must be a str, int, float, bool or None (a JSON scalar), "
        f"got {type(value).__name__}; store structured values as JSON text"
    )


def check_metadata(metadata: object, what: str = "metadata") -> dict[str, MetadataValue]:
    """A copy of `metadata` with every value checked to be a JSON scalar."""
    if not isinstance(metadata, Mapping):
        raise UsageError(f"{what} must be a mapping of str to scalars, got {metadata!r}")
    return {key: _check_value(key, value, what) for key, value in metadata.items()}


def check_where(where: Metadata | None) -> dict[str, MetadataValue] | None:
    """The `where` filter checked like metadata; `None` or `{}` mean no filter."""
    if where is None:
        return None
    checked = check_metadata(where, "where")
    return checked or None


# Below this every float that is a whole number prints as its exact digits.
_EXACT_FLOATS = 2**53


def json_number(value: int | float) -> Decimal:
    """The number `value` is in JSON text: a float is what its shortest form says (1e23 is
    10**23), as PostgreSQL and SQLite read it back; `where` compares numbers by it."""
    return Decimal(repr(value))


def _same(stored: Any, wanted: MetadataValue) -> bool:
    # A bool is not a number here, although Python says True == 1: JSON keeps them apart.
    if isinstance(wanted, bool) or isinstance(stored, bool):
        return isinstance(stored, bool) and isinstance(wanted, bool) and stored is wanted
    if wanted is None:
        return stored is None
    if isinstance(wanted, str):
        return isinstance(stored, str) and stored == wanted
    if not isinstance(stored, int | float):
        return False
    if type(stored) is type(wanted) or max(abs(stored), abs(wanted)) < _EXACT_FLOATS:
        return stored == wanted  # the same answer as json_number's, without the Decimals
    return json_number(stored) == json_number(wanted)


def metadata_matches(metadata: Mapping[str, Any], where: Mapping[str, MetadataValue]) -> bool:
    """Whether `metadata` has every key of `where` with an equal value (the shared rule)."""
    return all(key in metadata and _same(metadata[key], value) for key, value in where.items())


@dataclass(frozen=True, slots=True)
class Rows:
    """Checked rows for one `add`: ids unique (the last of a repeated id wins), vectors as a
    float32 matrix of the store's dimension, each with a norm > 0."""

    ids: list[str]
    vectors: npt.NDArray[np.float32]
    documents: list[str]
    metadata: list[dict[str, MetadataValue]]

    def metadata_json(self) -> list[str]:
        """Each row's metadata as compact JSON text (keys sorted, so equal dicts are equal)."""
        return [json.dumps(meta, sort_keys=True, separators=(",", ":")) for meta in self.metadata]


def _matrix(vectors: object, dimension: int, what: str) -> npt.NDArray[np.float32]:
    np = require_numpy()
    try:
        matrix = np.asarray(vectors, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{what} must be sequences of numbers of length {dimension}") from exc
    if matrix.ndim != 2:
        if matrix.ndim == 1 and matrix.size == 0:
            return np.zeros((0, dimension), dtype=np.float32)  # type: ignore[no-any-return]
        raise UsageError(f"{what} must be sequences of numbers of length {dimension}")
    if matrix.shape[1] != dimension:
        raise DimensionMismatchError(
            f"{what} have {matrix.shape[1]} numbers but the store holds vectors of dimension "
            f"{dimension}; embed with a provider whose dimension is {dimension}, or build the "
            f"store with dimension={matrix.shape[1]}",
            expected=dimension,
            actual=int(matrix.shape[1]),
        )
    if not np.isfinite(matrix).all():
        raise UsageError(f"{what} must hold finite numbers (no NaN or infinity)")
    norms = np.linalg.norm(matrix, axis=1)
    if (norms == 0).any():
        raise UsageError(
            f"{what} must not be zero vectors: cosine similarity is undefined for them"
        )
    return matrix.astype(np.float32)  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class Search:
    """The checked arguments of one `search`."""

    query: npt.NDArray[np.float32]
    """The query vector, float32, of the store's dimension."""
    top_k: int
    """How many rows at most (>= 1)."""
    filters: dict[str, MetadataValue] | None
    """The `where` filter, or `None` for none."""


@dataclass(frozen=True, slots=True)
class Damaged:
    """A stored row a search found but cannot return: its metadata cannot be read."""

    id: str
    reason: str


def read_metadata(row_id: str, metadata: str) -> dict[str, Any] | Damaged:
    """A stored row's metadata read from its JSON text; `Damaged` when that is not the JSON
    object a store writes."""
    try:
        value = json.loads(metadata)
    except (ValueError, TypeError) as exc:  # TypeError: not text at all (a blob, a number)
        return Damaged(row_id, f"its metadata is not JSON ({type(exc).__name__}: {exc})")
    if not isinstance(value, dict):
        return Damaged(row_id, f"its metadata is a JSON {type(value).__name__}, not an object")
    return value


def found_row(row_id: str, text: str, score: float, metadata: str) -> ScoredDocument | Damaged:
    """The hit for a stored row (`read_metadata`); `Damaged` when the row is not what a store
    writes."""
    value = read_metadata(row_id, metadata)
    if isinstance(value, Damaged):
        return value
    try:
        return ScoredDocument(id=row_id, text=text, score=score, metadata=value)
    except ValueError as exc:  # pydantic's ValidationError: the text is not a string
        return Damaged(row_id, f"it cannot be read ({' '.join(str(exc).split())[:200]})")


def skip_damaged(store: object, table: str, damaged: Damaged) -> None:
    """Warn that `damaged` is left out of `store`'s answers, saying how to repair it."""
    _log.warning(
        "vector_row_skipped",
        store=repr(store),
        table=table,
        row_id=damaged.id,
        reason=damaged.reason,
        fix="add the row again (add() replaces it) or delete it",
    )


def query_vector(vector: Sequence[float], dimension: int) -> npt.NDArray[np.float32]:
    """The query as a float32 vector of `dimension`, checked like stored vectors."""
    np = require_numpy()
    flat = np.asarray(vector, dtype=np.float64)
    if flat.ndim != 1:
        raise UsageError(f"the query vector must be a flat sequence of {dimension} numbers")
    return _matrix(flat.reshape(1, -1), dimension, "the query vector")[0]  # type: ignore[no-any-return]


def check_rows(
    ids: Sequence[str],
    vectors: Sequence[Sequence[float]],
    documents: Sequence[str],
    metadata: Sequence[Metadata] | None,
    dimension: int,
) -> Rows:
    """The arguments of `VectorStore.add`, checked and deduplicated (the last row of an id wins)."""
    if isinstance(ids, str) or isinstance(documents, str):
        raise UsageError("ids and documents must be sequences of strings, not one string")
    count = len(ids)
    metas: Sequence[Metadata] = [{}] * count if metadata is None else metadata
    if not (len(vectors) == len(documents) == len(metas) == count):
        raise UsageError(
            f"add() needs one vector, document and metadata per id: got {count} ids, "
            f"{len(vectors)} vectors, {len(documents)} documents, {len(metas)} metadata"
        )
    for row_id in ids:
        if not isinstance(row_id, str) or not row_id:
            raise UsageError(f"ids must be non-empty strings, got {row_id!r}")
    for document in documents:
        if not isinstance(document, str):
            raise UsageError(f"documents must be strings, got {type(document).__name__}")
    matrix = _matrix(vectors, dimension, "the vectors")
    last: dict[str, int] = {row_id: index for index, row_id in enumerate(ids)}
    keep = sorted(last.values())
    if len(keep) != count:
        matrix = matrix[keep]
    return Rows(
        ids=[ids[index] for index in keep],
        vectors=matrix,
        documents=[documents[index] for index in keep],
        metadata=[check_metadata(metas[index]) for index in keep],
    )


class CheckedStore(ABC):
    """The `VectorStore` methods every built-in store shares: each checks its arguments as the
    contract says (`pes_agent.retrieval.base`), then hands them to the store's own hook.

    A store sets `_dimension` and `_closed`, and fills `_add_rows` (checked, non-empty `Rows`),
    `_search_rows` (a checked `Search`) and `_delete_ids` (a non-empty list of ids); `count`
    and `aclose` are its own.
    """

    _dimension: int
    #: The table holding the rows, named in warnings (a durable store's own).
    _table: str = ""
    _closed: bool = False
    #: The most rows one `_search_rows` call answers.
    _max_top_k: int = sys.maxsize

    @property
    def dimension(self) -> int:
        """The length of every vector the store keeps."""
        return self._dimension

    async def add(
        self,
        ids: Sequence[str],
        vectors: Sequence[Sequence[float]],
        documents: Sequence[str],
        metadata: Sequence[Metadata] | None = None,
    ) -> None:
        """Insert the rows, replacing any row with the same id (see `VectorStore.add`)."""
        self._check_open()
        rows = check_rows(ids, vectors, documents, metadata, self._dimension)
        if rows.ids:
            await self._add_rows(rows)

    async def search(
        self, vector: Sequence[float], top_k: int, where: Metadata | None = None
    ) -> list[ScoredDocument]:
        """The `top_k` rows matching `where` nearest to `vector` (see `VectorStore.search`)."""
        self._check_open()
        top_k = check_top_k(top_k)
        search = Search(query_vector(vector, self._dimension), top_k, check_where(where))
        warned: set[str] = set()
        found = await self._search_rows(search)
        hits = self._hits(found, warned)
        # A damaged row left out must not cost a hit: ask for as many more as were left out,
        # until `top_k` are found or the store has no more (or answers no more per search).
        while len(hits) < top_k and len(found) == search.top_k < self._max_top_k:
            search = replace(search, top_k=min(len(found) + top_k - len(hits), self._max_top_k))
            found = await self._search_rows(search)
            hits = self._hits(found, warned)
        return hits[:top_k]

    def _hits(
        self, found: list[ScoredDocument | Damaged], warned: set[str]
    ) -> list[ScoredDocument]:
        """The hits among `found`, each damaged row warned about once per search."""
        hits = []
        for row in found:
            if isinstance(row, ScoredDocument):
                hits.append(row)
            elif row.id not in warned:
                warned.add(row.id)
                skip_damaged(self, self._table, row)
        return hits

    async def delete(self, ids: Sequence[str]) -> None:
        """Remove the rows with these ids; unknown ids are ignored."""
        self._check_open()
        if isinstance(ids, str):
            raise UsageError("delete() takes a sequence of ids, not one string")
        if ids:
            await self._delete_ids(list(ids))

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError(f"{self!r} is closed; create a new one")

    @abstractmethod
    async def _add_rows(self, rows: Rows) -> None:
        """Insert `rows`, replacing the rows of the same ids."""

    @abstractmethod
    async def _search_rows(self, search: Search) -> list[ScoredDocument | Damaged]:
        """The `search.top_k` rows matching `search.filters` nearest to its query, best first;
        a row whose metadata cannot be read as `Damaged` (it counts toward `top_k`)."""

    @abstractmethod
    async def _delete_ids(self, ids: list[str]) -> None:
        """Remove the rows with these ids, ignoring unknown ones."""
