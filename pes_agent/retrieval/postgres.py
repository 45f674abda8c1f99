"""`PostgresVectorStore`: vectors in PostgreSQL, for many processes sharing one collection.

Two ways to store and rank, chosen when the table is created and recorded with it:

- **pgvector** (when the server has the `vector` extension, or can create it): a
  `vector(dimension)` column ranked by the server with `<=>` (cosine distance), exact
  (no approximate index), `where` applied in the same query.
- **arrays** (the plain-SQL fallback, for servers without pgvector): a `real[]` column of
  L2-normalised vectors. Ranking in SQL would take close to a second per query at 10,000 rows,
  so the store keeps a snapshot of (id, vector, metadata) in this process, reloaded whenever
  the table's version (bumped by every write, in the write's transaction) has changed, and
  ranks it with NumPy; each search reads the version and the hits' texts in one
  repeatable-read transaction, so it never mixes two versions. Memory use is the collection's
  size; install pgvector for collections that should not fit in each process.

Tables, for `table="pes_vectors"` in `schema` (default `pes_agent`, the one `PostgresStorage`
uses, so the store may share the agent's database): `pes_vectors` (id, text, metadata jsonb,
embedding) and `pes_vectors_meta` (dimension, backend, version). Reopening a table with another
dimension is a `DimensionMismatchError`. Needs asyncpg (`pes-agent[postgres]`) and NumPy
(`pes-agent[retrieval]`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pes_agent.errors import ConfigurationError, UsageError
from pes_agent.observing.logs import get_logger
from pes_agent.retrieval._common import (
    CheckedStore,
    Damaged,
    Rows,
    Search,
    check_dimension,
    found_row,
    json_number,
    metadata_matches,
    read_metadata,
    require_numpy,
    skip_damaged,
)
from pes_agent.retrieval.base import (
    DimensionMismatchError,
    MetadataValue,
    ScoredDocument,
)
from pes_agent.storage.postgres._pool import Connector, redact_url, take_schema

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["PostgresVectorStore", "VectorBackend"]

_log = get_logger("pes_agent.retrieval")

VectorBackend = Literal["pgvector", "arrays"]
"""How a PostgreSQL table keeps its vectors: pgvector's `vector` type, or `real[]` arrays."""

_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,50}")


@dataclass(slots=True)
class _Snapshot:
    """The arrays backend's copy of a table at one version, for ranking in this process."""

    version: int
    ids: list[str]
    matrix: npt.NDArray[np.float32]
    metadata: list[dict[str, Any]]


def _vector_text(values: Sequence[float]) -> str:
    # pgvector's text input; repr() keeps every digit of a float32.
    return "[" + ",".join(repr(float(value)) for value in values) + "]"


class PostgresVectorStore(CheckedStore):
    """A vector store in PostgreSQL: pgvector when the server has it, plain SQL otherwise.

    `url` is a `postgresql://` URL (`?schema=NAME` allowed); `table` a lower-case identifier.
    `pgvector=None` uses pgvector when the extension is installed or can be created, `True`
    requires it (a `ConfigurationError` otherwise), `False` uses the array fallback. A table
    keeps the backend it was created with. See the module docstring for both backends.
    """

    def __init__(
        self,
        url: str,
        *,
        table: str = "pes_vectors",
        dimension: int,
        schema: str | None = None,
        pgvector: bool | None = None,
        min_pool_size: int = 1,
        max_pool_size: int = 4,
        connect_timeout_s: float = 10.0,
    ) -> None:
        """Keep vectors in a PostgreSQL table, connected to on first use.

        Args:
            url: A `postgresql://` URL; `?schema=NAME` picks the schema.
            table: The collection's name: a lower-case SQL identifier.
            dimension: The length of every vector; the embeddings must make the same.
            schema: The schema, when the URL names none (or the same one);
                `pes_agent` when neither does.
            pgvector: None uses pgvector when it is installed or can be created, True
                requires it, False uses the plain-SQL array fallback.
            min_pool_size: The connections kept open.
            max_pool_size: The most connections open at once.
            connect_timeout_s: How long connecting may take.

        Raises:
            ConfigurationError: The schema, table or dimension is invalid, or numpy is not
                installed.
            UsageError: The pool sizes do not satisfy 1 <= min <= max, or the schema is
                given twice, differently.
        """
        url, schema = take_schema(url, schema)
        for what, name in (("schema", schema), ("table", table)):
            if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name):
                raise ConfigurationError(
                    f"{what} must be a lower-case SQL identifier (letters, digits, _; at most "
                    f"51 characters), not {name!r}"
                )
        if not 1 <= min_pool_size <= max_pool_size:
            raise UsageError("pool sizes need 1 <= min_pool_size <= max_pool_size")
        self._np = require_numpy()
        self._dimension = check_dimension(dimension, "PostgresVectorStore")
        self._schema = schema
        self._table = table
        self._want_pgvector = pgvector
        self._backend: VectorBackend | None = None
        self._snapshot: _Snapshot | None = None
        self._label = f"PostgresVectorStore({redact_url(url)!r}, table={schema}.{table})"
        self._db = Connector(
            url,
            label=self._label,
            min_pool_size=min_pool_size,
            max_pool_size=max_pool_size,
            connect_timeout_s=connect_timeout_s,
            prepare=self._prepare,
        )
        self._rows = f'"{schema}"."{table}"'
        self._meta = f'"{schema}"."{table}_meta"'

    def __repr__(self) -> str:
        return self._label

    async def backend(self) -> VectorBackend:
        """Tell how this table keeps its vectors (connects, and creates the table, if needed).

        Returns:
            `"pgvector"` or `"arrays"`, the backend the table was created with.

        Raises:
            ConfigurationError: `pgvector=True` and the server has no pgvector.
            StorageError: The database could not be reached.
        """
        await self._db.pool()
        assert self._backend is not None
        return self._backend

    # -- the contract ---------------------------------------------------------------------

    async def _add_rows(self, rows: Rows) -> None:
        # One transaction, which also bumps the table's version.
        backend = await self.backend()
        records = self._records(rows, backend)
        cast = "vector" if backend == "pgvector" else "real[]"
        pool = await self._db.pool()
        try:
            async with pool.acquire() as conn, conn.transaction():
                await conn.executemany(
                    f"INSERT INTO {self._rows} (id, text, metadata, embedding) "
                    f"VALUES ($1, $2, $3::jsonb, $4::{cast}) ON CONFLICT (id) DO UPDATE SET "
                    "text = excluded.text, metadata = excluded.metadata, "
                    "embedding = excluded.embedding",
                    records,
                )
                await self._bump_version(conn)
        except self._db.db_errors as exc:
            raise self._db.query_error(exc) from exc

    async def _search_rows(self, search: Search) -> list[ScoredDocument | Damaged]:
        backend = await self.backend()
        try:
            if backend == "pgvector":
                return await self._search_pgvector(search)
            return await self._search_arrays(search)
        except self._db.db_errors as exc:
            raise self._db.query_error(exc) from exc

    async def _delete_ids(self, ids: list[str]) -> None:
        pool = await self._db.pool()
        try:
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute(f"DELETE FROM {self._rows} WHERE id = ANY($1::text[])", ids)
                await self._bump_version(conn)
        except self._db.db_errors as exc:
            raise self._db.query_error(exc) from exc

    async def count(self) -> int:
        """Count the rows, e.g. to see whether an index was built.

        Returns:
            How many rows the store holds.
        """
        rows = await self._db.fetch(f"SELECT count(*) FROM {self._rows}")
        return int(rows[0][0])

    async def aclose(self) -> None:
        """Close the pool and drop the snapshot; later calls raise a `UsageError`."""
        self._closed = True
        self._snapshot = None
        await self._db.aclose()

    # -- creating and opening the table ---------------------------------------------------

    async def _prepare(self, pool: Any) -> None:
        async with pool.acquire() as conn:
            try:
                self._backend = await self._create_or_open(conn)
            except self._db.db_errors as exc:
                raise self._db.query_error(exc) from exc

    async def _create_or_open(self, conn: Any) -> VectorBackend:
        async with conn.transaction():
            # Two processes creating the same table at once: one creates, the other opens.
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext($1))",
                f"pes_vectors:{self._schema}.{self._table}",
            )
            await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self._schema}"')
            exists = await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", self._meta)
            if exists:
                return await self._open(conn)
            backend = await self._choose_backend(conn)
            column = f"vector({self._dimension})" if backend == "pgvector" else "real[]"
            check = (
                ""
                if backend == "pgvector"
                else f", CHECK (cardinality(embedding) = {self._dimension})"
            )
            await conn.execute(
                f"CREATE TABLE {self._rows} (id text PRIMARY KEY, text text NOT NULL, "
                f"metadata jsonb NOT NULL, embedding {column} NOT NULL{check})"
            )
            await conn.execute(
                f"CREATE TABLE {self._meta} (key text PRIMARY KEY, value text NOT NULL)"
            )
            await conn.executemany(
                f"INSERT INTO {self._meta} (key, value) VALUES ($1, $2)",
                [("dimension", str(self._dimension)), ("backend", backend), ("version", "0")],
            )
            _log.info(
                "retrieval.table_created",
                table=f"{self._schema}.{self._table}",
                backend=backend,
                dimension=self._dimension,
            )
            return backend

    async def _open(self, conn: Any) -> VectorBackend:
        stored = dict(await conn.fetch(f"SELECT key, value FROM {self._meta}"))
        dimension = int(stored.get("dimension", -1))
        if dimension != self._dimension:
            raise DimensionMismatchError(
                f"table {self._schema}.{self._table} holds vectors of dimension {dimension}, "
                f"not {self._dimension}; open it with dimension={dimension}, or use another "
                "table for these embeddings",
                expected=dimension,
                actual=self._dimension,
            )
        backend = stored.get("backend")
        if backend not in ("pgvector", "arrays"):
            raise ConfigurationError(
                f"table {self._schema}.{self._table}_meta names no known backend ({backend!r})"
            )
        if self._want_pgvector is True and backend != "pgvector":
            raise ConfigurationError(
                f"table {self._schema}.{self._table} was created without pgvector (arrays); "
                "pass pgvector=None to use it, or another table"
            )
        return "pgvector" if backend == "pgvector" else "arrays"

    async def _choose_backend(self, conn: Any) -> VectorBackend:
        if self._want_pgvector is False:
            return "arrays"
        if await conn.fetchval("SELECT 1 FROM pg_extension WHERE extname = 'vector'"):
            return "pgvector"
        available = await conn.fetchval(
            "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
        )
        if available:
            try:
                async with conn.transaction():  # a savepoint: a refusal must not end ours
                    await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            except self._db.asyncpg.PostgresError as exc:
                if self._want_pgvector:
                    raise ConfigurationError(
                        f"pgvector is available but could not be created: {exc}; run "
                        "CREATE EXTENSION vector as a superuser, or pass pgvector=None"
                    ) from None
                _log.warning("retrieval.pgvector_refused", reason=str(exc))
                return "arrays"
            return "pgvector"
        if self._want_pgvector:
            raise ConfigurationError(
                "PostgreSQL has no pgvector extension (install the server package, e.g. "
                "postgresql-16-pgvector), or pass pgvector=None to use the plain-SQL fallback"
            )
        return "arrays"

    # -- writing ----------------------------------------------------------------------------

    def _records(self, rows: Rows, backend: VectorBackend) -> list[tuple[Any, ...]]:
        np = self._np
        metadata = [_jsonb_text(meta) for meta in rows.metadata]
        if backend == "pgvector":
            vectors: list[Any] = [_vector_text(v) for v in rows.vectors.tolist()]
        else:
            normalised = rows.vectors / np.linalg.norm(rows.vectors, axis=1, keepdims=True)
            vectors = normalised.tolist()
        return list(zip(rows.ids, rows.documents, metadata, vectors, strict=True))

    async def _bump_version(self, conn: Any) -> None:
        await conn.execute(
            f"UPDATE {self._meta} SET value = (value::bigint + 1)::text WHERE key = 'version'"
        )

    # -- searching --------------------------------------------------------------------------

    async def _search_pgvector(self, search: Search) -> list[ScoredDocument | Damaged]:
        condition = ""
        args: list[Any] = [_vector_text(search.query.tolist()), search.top_k]
        if filters := search.filters:
            clauses = []
            for key, value in filters.items():
                args += [key, json.dumps(value)]
                key_arg, value_arg = len(args) - 1, len(args)
                clauses.append(_jsonb_match(f"${key_arg}", f"${value_arg}", value))
            condition = "WHERE " + " AND ".join(clauses)
        found = await self._db.fetch(
            f"SELECT id, text, metadata, 1 - (embedding <=> $1::vector) AS score "
            f"FROM {self._rows} {condition} ORDER BY embedding <=> $1::vector LIMIT $2",
            *args,
        )
        return [
            found_row(row["id"], row["text"], float(row["score"]), row["metadata"]) for row in found
        ]

    async def _search_arrays(self, search: Search) -> list[ScoredDocument | Damaged]:
        np = self._np
        query, top_k, filters = search.query, search.top_k, search.filters
        pool = await self._db.pool()
        async with (
            pool.acquire() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            version = int(
                await conn.fetchval(f"SELECT value FROM {self._meta} WHERE key = 'version'")
            )
            snapshot = self._snapshot
            if snapshot is None or snapshot.version != version:
                snapshot = self._snapshot = await self._load(conn, version)
            if filters:
                candidates = np.fromiter(
                    (
                        i
                        for i, meta in enumerate(snapshot.metadata)
                        if metadata_matches(meta, filters)
                    ),
                    dtype=np.intp,
                )
            else:
                candidates = np.arange(len(snapshot.ids))
            if candidates.size == 0:
                return []
            unit = query / np.linalg.norm(query)
            # einsum, not `@`: see InMemoryVectorStore.search (BLAS threads on a busy machine).
            if filters:
                scores = np.einsum("ij,j->i", snapshot.matrix[candidates], unit)
            else:
                scores = np.einsum("ij,j->i", snapshot.matrix, unit)
            if candidates.size > top_k:
                part = np.argpartition(-scores, top_k - 1)[:top_k]
                candidates, scores = candidates[part], scores[part]
            order = np.argsort(-scores, kind="stable")
            hit_ids = [snapshot.ids[int(candidates[i])] for i in order]
            found = await conn.fetch(
                f"SELECT id, text FROM {self._rows} WHERE id = ANY($1::text[])", hit_ids
            )
        texts = {row["id"]: row["text"] for row in found}
        return [
            ScoredDocument(
                id=snapshot.ids[int(candidates[i])],
                text=texts[snapshot.ids[int(candidates[i])]],
                score=float(scores[i]),
                metadata=dict(snapshot.metadata[int(candidates[i])]),
            )
            for i in order
        ]

    async def _load(self, conn: Any, version: int) -> _Snapshot:
        np = self._np
        ids, metadata, vectors = [], [], []
        for row in await conn.fetch(f"SELECT id, metadata, embedding FROM {self._rows}"):
            read = read_metadata(row["id"], row["metadata"])
            if isinstance(read, Damaged):
                skip_damaged(self, self._table, read)  # once per snapshot, not per search
                continue
            ids.append(row["id"])
            metadata.append(read)
            vectors.append(row["embedding"])
        matrix = np.zeros((len(ids), self._dimension), dtype=np.float32)
        for index, vector in enumerate(vectors):
            matrix[index] = vector
        return _Snapshot(version=version, ids=ids, matrix=matrix, metadata=metadata)


def _jsonb_text(metadata: dict[str, MetadataValue]) -> str:
    """`metadata` as JSON text for a jsonb column, each float written with a fraction digit.

    jsonb keeps numbers as decimals: `1e+16` comes back as `10000000000000000`, which reads
    as an int, while `10000000000000000.0` comes back as written and reads as the float.
    """
    return "{" + ",".join(f"{json.dumps(k)}:{_json_scalar(v)}" for k, v in metadata.items()) + "}"


def _json_scalar(value: MetadataValue) -> str:
    if isinstance(value, float):
        digits = format(json_number(value), "f")
        return digits if "." in digits else f"{digits}.0"
    return json.dumps(value)


def _jsonb_match(key: str, value: str, wanted: MetadataValue) -> str:
    """SQL for one `where` entry on jsonb, by the shared rule (numbers by value, bool apart)."""
    entry = f"(metadata -> {key}::text)"
    if isinstance(wanted, bool) or wanted is None or isinstance(wanted, str):
        # jsonb equality keeps true, 1, "1" and null apart.
        return f"{entry} = {value}::jsonb"
    return f"(jsonb_typeof({entry}) = 'number' AND {entry} = {value}::jsonb)"
