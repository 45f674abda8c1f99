"""`SQLiteVectorStore`: the embedded, persistent vector store, on the sqlite-vec extension.

- **Tables.** For `table="pes_vectors"`: `pes_vectors` (id, text, metadata as JSON; its integer
  rowid links the rest), `pes_vectors_vec` (a sqlite-vec `vec0` virtual table of float32
  vectors with `distance_metric=cosine`) and `pes_vectors_meta` (the dimension the table was
  made for). Nothing else in the file is touched, so the store may share the agent's
  `SQLiteStorage` database file; several tables hold several collections.
- **Search is exact.** `vec0` scans every vector (no approximate index), so results equal a
  brute-force cosine ranking. A `where` filter restricts the scan to the matching rowids before
  ranking (`rowid IN (...)`), so it never returns fewer than `top_k` when enough rows match.
- **Never blocks the event loop.** One connection per store, used only by the store's own
  worker thread; calls run there in the order they were made.
- **Dimension.** Fixed when the table is created; opening it again with another `dimension` is
  a `DimensionMismatchError`, as is adding or searching with a vector of another length.
- **Loading the extension.** Python's `sqlite3` is used when it can load extensions; some
  builds cannot (pyenv's default, for one), and then `pysqlite3` (PyPI `pysqlite3-binary`, in
  the `retrieval` extra on Linux x86-64) is used instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import importlib
import json
import os
import re
import weakref
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

from pes_agent.errors import ConfigurationError, StorageError, UsageError
from pes_agent.retrieval._common import (
    CheckedStore,
    Damaged,
    Rows,
    Search,
    check_dimension,
    found_row,
    json_number,
    require_numpy,
)
from pes_agent.retrieval.base import (
    DimensionMismatchError,
    MetadataValue,
    ScoredDocument,
)

__all__ = ["MAX_TOP_K", "SQLiteVectorStore"]

_T = TypeVar("_T")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,50}")
MAX_TOP_K = 4096
"""The largest `top_k` sqlite-vec answers in one query."""
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _sqlite_module() -> ModuleType:
    """A DB-API SQLite module that can load extensions, or a `ConfigurationError` saying how."""
    import sqlite3

    if hasattr(sqlite3.Connection, "enable_load_extension"):
        return sqlite3
    try:
        return importlib.import_module("pysqlite3.dbapi2")
    except ImportError as exc:
        raise ConfigurationError(
            "this Python's sqlite3 cannot load extensions, which sqlite-vec needs: "
            "pip install pysqlite3-binary (or 'pes-agent[retrieval]' on Linux x86-64)"
        ) from exc


def _sqlite_vec() -> ModuleType:
    try:
        return importlib.import_module("sqlite_vec")
    except ImportError as exc:
        raise ConfigurationError(
            "SQLiteVectorStore needs sqlite-vec: pip install 'pes-agent[retrieval]'"
        ) from exc


def _path(path_or_url: str | os.PathLike[str]) -> str:
    text = os.fspath(path_or_url)
    if text.startswith("sqlite:"):
        from pes_agent.storage.factory import _sqlite_path

        return _sqlite_path(text)
    if not text:
        raise UsageError("SQLiteVectorStore needs a file path, sqlite:///PATH or ':memory:'")
    return text


def _type_clause(value: MetadataValue) -> tuple[str, list[Any]]:
    """SQL matching one `json_each(d.metadata)` entry of `value`'s JSON type and value (the
    shared rule)."""
    if value is None:
        return "type = 'null'", []
    if isinstance(value, bool):
        return "type = ?", ["true" if value else "false"]
    if isinstance(value, str):
        return "type = 'text' AND value = ?", [value]
    return _number_clause(value)


def _number_clause(value: int | float) -> tuple[str, list[Any]]:
    """SQL matching the stored integers and reals whose `json_number` is `value`'s.

    `json_each` reads an integer beyond 64 bits as a rounded real, and some reals a bit off
    (1.5e+300 as 1.4999999999999998e+300), so those are compared by their JSON text (`->`),
    which `json.dumps` wrote: an integer's exact digits, a float's shortest form.
    """
    number = json_number(value)
    clauses: list[str] = []
    params: list[Any] = []
    if number == number.to_integral_value():
        whole = int(number)
        if _INT64_MIN <= whole <= _INT64_MAX:
            # typeof: not a stored integer beyond 64 bits that rounds to this one
            clauses.append("type = 'integer' AND typeof(value) = 'integer' AND value = ?")
            params.append(whole)
        else:
            clauses.append("type = 'integer' AND d.metadata -> fullkey = ?")
            params.append(str(whole))
    with contextlib.suppress(OverflowError):  # an int beyond any float is no stored real
        real = float(value)
        if json_number(real) == number:
            texts = ["0.0", "-0.0"] if real == 0 else [json.dumps(real)]
            clauses.append(
                f"type = 'real' AND d.metadata -> fullkey IN ({', '.join('?' * len(texts))})"
            )
            params += texts
    return " OR ".join(f"({clause})" for clause in clauses), params


class SQLiteVectorStore(CheckedStore):
    """A persistent vector store in a SQLite file (sqlite-vec): exact cosine search.

    `path_or_url` is a file path, `"sqlite:///PATH"` or `":memory:"`; it may be the agent's own
    database file. `table` names the collection (letters, digits, underscores). The tables are
    created on first use; see the module docstring for what is stored where.
    """

    _max_top_k = MAX_TOP_K

    def __init__(
        self,
        path_or_url: str | os.PathLike[str],
        *,
        table: str = "pes_vectors",
        dimension: int,
        busy_timeout_s: float = 5.0,
    ) -> None:
        """Keep vectors in the SQLite file at `path_or_url`, opened on first use.

        Args:
            path_or_url: A file path, `"sqlite:///PATH"` or `":memory:"`.
            table: The collection's name: letters, digits and underscores.
            dimension: The length of every vector; the embeddings must make the same.
            busy_timeout_s: How long a call waits for another writer's lock.

        Raises:
            ConfigurationError: `table` or `dimension` is invalid, or sqlite-vec or numpy is
                not installed (`pip install 'pes-agent[retrieval]'`).
            UsageError: `path_or_url` is none of the above, or `busy_timeout_s` is not > 0.
        """
        self._path = _path(path_or_url)
        if not isinstance(table, str) or not _IDENTIFIER.fullmatch(table):
            raise ConfigurationError(
                f"table must be letters, digits and underscores (not starting with a digit, "
                f"at most 51 characters), got {table!r}"
            )
        if busy_timeout_s <= 0:
            raise UsageError("busy_timeout_s must be > 0 seconds")
        self._np = require_numpy()
        self._sqlite = _sqlite_module()
        self._vec = _sqlite_vec()
        self._table = table
        self._dimension = check_dimension(dimension, "SQLiteVectorStore")
        self._busy_timeout_ms = int(busy_timeout_s * 1000)
        self._conn: Any = None
        self._closed = False
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"pes-vec:{table}"
        )
        # A store dropped without aclose() must not leave its thread behind.
        weakref.finalize(self, self._executor.shutdown, wait=False)

    def __repr__(self) -> str:
        return f"SQLiteVectorStore({self._path!r}, table={self._table!r})"

    @property
    def table(self) -> str:
        """The collection's table name (the vectors and the dimension are in `<table>_vec`
        and `<table>_meta`)."""
        return self._table

    async def _add_rows(self, rows: Rows) -> None:
        # One transaction, in the worker thread.
        await self._call(functools.partial(self._add, rows=rows))

    async def _search_rows(self, search: Search) -> list[ScoredDocument | Damaged]:
        if search.top_k > MAX_TOP_K:
            raise UsageError(f"SQLiteVectorStore answers at most top_k={MAX_TOP_K} per search")
        return await self._call(functools.partial(self._search, search=search))

    async def _delete_ids(self, ids: list[str]) -> None:
        await self._call(functools.partial(self._delete, ids=ids))

    async def count(self) -> int:
        """Count the rows, e.g. to see whether an index was built.

        Returns:
            How many rows the store holds.
        """
        self._check_open()
        return await self._call(self._count)

    async def aclose(self) -> None:
        """Close the connection and stop the worker thread; idempotent."""
        if self._closed:
            return
        self._closed = True
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._close_connection)
        self._executor.shutdown(wait=False)

    # -- the worker thread ------------------------------------------------------------------

    async def _call(self, work: Callable[[Any], _T]) -> _T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(self._run, work))

    def _run(self, work: Callable[[Any], _T]) -> _T:
        try:
            conn = self._conn if self._conn is not None else self._open_connection()
            return work(conn)
        except self._sqlite.Error as exc:
            transient = isinstance(exc, self._sqlite.OperationalError) and any(
                word in str(exc) for word in ("locked", "busy")
            )
            raise StorageError(
                f"SQLite error on {self._path!r} (table {self._table!r}): {exc}",
                transient=transient,
            ) from exc

    def _open_connection(self) -> Any:
        conn = self._sqlite.connect(self._path, isolation_level=None, check_same_thread=False)
        try:
            conn.enable_load_extension(True)
            self._vec.load(conn)
            conn.enable_load_extension(False)
            conn.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
            if self._path != ":memory:":
                conn.execute("PRAGMA journal_mode = WAL")
            self._ensure_tables(conn)
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def _ensure_tables(self, conn: Any) -> None:
        t = self._table
        conn.execute("BEGIN IMMEDIATE")
        try:
            found = conn.execute(
                "SELECT name FROM sqlite_master WHERE name IN (?, ?, ?)",
                (t, f"{t}_vec", f"{t}_meta"),
            ).fetchall()
            names = {row[0] for row in found}
            if not names:
                conn.execute(
                    f"CREATE TABLE {t} (rowid INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, "
                    "text TEXT NOT NULL, metadata TEXT NOT NULL)"
                )
                conn.execute(
                    f"CREATE VIRTUAL TABLE {t}_vec USING vec0("
                    f"embedding float[{self._dimension}] distance_metric=cosine)"
                )
                conn.execute(f"CREATE TABLE {t}_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
                conn.execute(
                    f"INSERT INTO {t}_meta (key, value) VALUES ('dimension', ?), "
                    "('metric', 'cosine')",
                    (str(self._dimension),),
                )
            elif names != {t, f"{t}_vec", f"{t}_meta"}:
                raise ConfigurationError(
                    f"{self._path!r} has a table named {t!r} that is not a vector table made "
                    f"by SQLiteVectorStore; pass another table="
                )
            else:
                stored = conn.execute(
                    f"SELECT value FROM {t}_meta WHERE key = 'dimension'"
                ).fetchone()
                dimension = int(stored[0]) if stored else -1
                if dimension != self._dimension:
                    raise DimensionMismatchError(
                        f"table {t!r} in {self._path!r} holds vectors of dimension "
                        f"{dimension}, not {self._dimension}; open it with "
                        f"dimension={dimension}, or use another table for these embeddings",
                        expected=dimension,
                        actual=self._dimension,
                    )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _close_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _add(self, conn: Any, *, rows: Rows) -> None:
        t = self._table
        vectors = rows.vectors
        metadata = rows.metadata_json()
        conn.execute("BEGIN IMMEDIATE")
        try:
            for index, row_id in enumerate(rows.ids):
                found = conn.execute(f"SELECT rowid FROM {t} WHERE id = ?", (row_id,)).fetchone()
                if found is None:
                    cursor = conn.execute(
                        f"INSERT INTO {t} (id, text, metadata) VALUES (?, ?, ?)",
                        (row_id, rows.documents[index], metadata[index]),
                    )
                    rowid = cursor.lastrowid
                else:
                    rowid = found[0]
                    conn.execute(
                        f"UPDATE {t} SET text = ?, metadata = ? WHERE rowid = ?",
                        (rows.documents[index], metadata[index], rowid),
                    )
                    # vec0 has no upsert: replace the vector row.
                    conn.execute(f"DELETE FROM {t}_vec WHERE rowid = ?", (rowid,))
                conn.execute(
                    f"INSERT INTO {t}_vec (rowid, embedding) VALUES (?, ?)",
                    (rowid, vectors[index].tobytes()),
                )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _search(self, conn: Any, *, search: Search) -> list[ScoredDocument | Damaged]:
        try:
            found = self._ranked(conn, search, valid_only=False)
        except self._sqlite.OperationalError as exc:
            if "malformed JSON" not in str(exc):
                raise
            # A row of malformed metadata (damaged by another program) fails json_each for the
            # whole query; leave such rows out. Not always: it costs 2-3x per filtered search.
            found = self._ranked(conn, search, valid_only=True)
        return [
            found_row(row_id, text, 1.0 - distance, meta) for row_id, text, meta, distance in found
        ]

    def _ranked(self, conn: Any, search: Search, *, valid_only: bool) -> list[Any]:
        """(id, text, metadata, distance) of the rows `search` finds, nearest first;
        `valid_only` leaves out the rows whose metadata is not JSON."""
        t = self._table
        params: list[Any] = [search.query.tobytes(), search.top_k]
        restrict = ""
        if filters := search.filters:
            # json_each(NULL) has no rows (a CASE, as SQLite promises no order within an AND).
            metadata = "d.metadata"
            if valid_only:
                metadata = f"CASE WHEN json_valid({metadata}) THEN {metadata} END"
            clauses = []
            for key, value in filters.items():
                condition, values = _type_clause(value)
                clauses.append(
                    f"EXISTS (SELECT 1 FROM json_each({metadata}) WHERE key = ? AND ({condition}))"
                )
                params += [key, *values]
            restrict = f" AND rowid IN (SELECT d.rowid FROM {t} AS d WHERE {' AND '.join(clauses)})"
        return list(
            conn.execute(
                f"SELECT d.id, d.text, d.metadata, v.distance FROM ("
                f"SELECT rowid, distance FROM {t}_vec WHERE embedding MATCH ? AND k = ?{restrict}"
                f") AS v JOIN {t} AS d ON d.rowid = v.rowid ORDER BY v.distance",
                params,
            ).fetchall()
        )

    def _delete(self, conn: Any, *, ids: list[str]) -> None:
        t = self._table
        conn.execute("BEGIN IMMEDIATE")
        try:
            for row_id in ids:
                found = conn.execute(f"SELECT rowid FROM {t} WHERE id = ?", (row_id,)).fetchone()
                if found is not None:
                    conn.execute(f"DELETE FROM {t}_vec WHERE rowid = ?", (found[0],))
                    conn.execute(f"DELETE FROM {t} WHERE rowid = ?", (found[0],))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _count(self, conn: Any) -> int:
        return int(conn.execute(f"SELECT count(*) FROM {self._table}").fetchone()[0])
