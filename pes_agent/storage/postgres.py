"""`PostgresStorage`: one PostgreSQL database shared by many worker processes.

`storage="postgresql://user:password@host:5432/db"` (needs `pip install 'pes-agent[postgres]'`);
add `?schema=NAME` to keep the tables in a schema other than `pes_agent`.

- **Pooled and async** (asyncpg). The schema (default `pes_agent`, configurable) is created on
  first use and recorded in `schema_version`; older schemas are migrated step by step
  (`MIGRATIONS`, under a transaction-scoped advisory lock so concurrent workers migrate once);
  a schema written by a newer pes-agent is refused with a `ConfigurationError`.
- **Runs on one thread are serialised across processes** by `lock_thread`: an in-process
  `asyncio.Lock` per thread, then a session-level advisory lock keyed by a 64-bit hash of
  (schema, thread id). All of a process's thread locks live on one dedicated connection
  (advisory locks are per session, so one connection can hold any number of them; a run does
  not tie up a pooled connection). Acquiring polls `pg_try_advisory_lock` with exponential
  backoff. The server drops the locks when the holding process dies or its connection breaks,
  so a crashed worker never blocks a thread; if the lock connection breaks while a run holds
  its thread, that run's `commit_turn` refuses to write (`StorageError`) rather than risk an
  interleaved turn. Waiting is not FIFO across processes. Runs on different threads never
  wait for each other. Needs session-level connections: not for a transaction-mode pooler
  (PgBouncer `pool_mode=transaction`) in front of the server.
- **Atomic turns.** `commit_turn` writes messages and state in one statement (one round trip,
  one transaction), and only while the run still holds its thread's lock.
- **Durability.** Turns, states and configs are committed with the server's
  `synchronous_commit` (fsync by default). Observations are committed one by one as they are
  recorded, so a crashed or killed worker loses none, but with `synchronous_commit=off` for
  that transaction only: they are visible and safe at once, and only a crash of the database
  server itself could drop the last fraction of a second of them (never a turn).
- **Cross-process observations.** Every observation is followed by a `NOTIFY` (delivered when
  its insert commits); `subscribe_observations` LISTENs on a dedicated connection and hands
  subscribers the observations written by any process, filtered by type and thread.
- **Secrets.** The URL's password never appears in an error, a log line or `repr`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any, Self
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit
from uuid import uuid4

from pes_agent._closing import ClosedOnExit
from pes_agent.config import AgentState, ThreadConfig
from pes_agent.errors import ConfigurationError, PESAgentError, StorageError, UsageError
from pes_agent.observing._fanout import Fanout
from pes_agent.observing.logs import get_logger
from pes_agent.observing.types import Observation, ObservationType
from pes_agent.storage import _codec
from pes_agent.storage._locks import ThreadLockTable
from pes_agent.threads.messages import ConversationMessage

__all__ = ["DEFAULT_SCHEMA", "MIGRATIONS", "SCHEMA_VERSION", "PostgresStorage", "redact_url"]

_log = get_logger("pes_agent.storage")

# Each entry upgrades the schema from version (key - 1) to version key; `{s}` is the quoted
# schema name. Append, never edit.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        "CREATE TABLE {s}.thread_configs (thread_id text PRIMARY KEY, config json NOT NULL)",
        """CREATE TABLE {s}.agent_states (
            thread_id text PRIMARY KEY, data json NOT NULL, version bigint NOT NULL)""",
        """CREATE TABLE {s}.messages (
            seq bigserial PRIMARY KEY,
            thread_id text NOT NULL,
            message_id text NOT NULL,
            body json NOT NULL,
            UNIQUE (thread_id, message_id))""",
        "CREATE INDEX messages_by_thread ON {s}.messages (thread_id, seq)",
        """CREATE TABLE {s}.observations (
            seq bigserial PRIMARY KEY,
            id text NOT NULL,
            thread_id text NOT NULL,
            trace_id text NOT NULL,
            type text NOT NULL,
            body json NOT NULL)""",
        "CREATE INDEX observations_by_thread ON {s}.observations (thread_id, seq)",
        "CREATE INDEX observations_by_trace ON {s}.observations (thread_id, trace_id, seq)",
    ),
}
SCHEMA_VERSION = max(MIGRATIONS)
DEFAULT_SCHEMA = "pes_agent"

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
# A NOTIFY payload must stay under 8000 bytes; bigger observations are sent by reference.
_MAX_PAYLOAD = 7900

ObservationCallback = Callable[[Observation], Awaitable[None] | None]


@dataclass(frozen=True, slots=True)
class _Held:
    """A thread lock this process holds: the session holding it and its key."""

    conn: Any
    pid: int
    key: int


# A whole turn in one statement (so one round trip, and atomic without BEGIN/COMMIT): it
# writes only if the caller's advisory lock is still held by its session ($4-$6; NULL when the
# caller holds no lock), inserts the messages in order and bumps the state ($7; NULL for none).
_COMMIT_TURN = """
WITH held AS (
    SELECT $4::int IS NULL OR EXISTS (
        SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = $4::int
        AND classid = $5::oid AND objid = $6::oid AND objsubid = 1 AND granted
    ) AS ok
), added AS (
    INSERT INTO {s}.messages (thread_id, message_id, body)
    SELECT $1, m.message_id, m.body
    FROM unnest($2::text[], $3::json[]) WITH ORDINALITY AS m (message_id, body, n)
    WHERE (SELECT ok FROM held)
    ORDER BY m.n
    RETURNING 1
), saved AS (
    INSERT INTO {s}.agent_states AS s (thread_id, data, version)
    SELECT $1, $7::text::json, 1 WHERE $7::text IS NOT NULL AND (SELECT ok FROM held)
    ON CONFLICT (thread_id) DO UPDATE SET data = excluded.data, version = s.version + 1
    RETURNING version
)
SELECT (SELECT ok FROM held), (SELECT version FROM saved), (SELECT count(*) FROM added)
"""


@dataclass(frozen=True, slots=True)
class _FeedItem:
    origin: str
    observation: Observation


class PostgresStorage(ClosedOnExit):
    """Threads, history, state and observations in PostgreSQL, for many worker processes.

    `PostgresStorage("postgresql://app@db/agents", schema="pes_agent")` connects on first use
    (the schema may also be given as `?schema=NAME` in the URL; default `pes_agent`).
    Close it with `await storage.aclose()` or `async with PostgresStorage(...)`.
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        min_pool_size: int = 1,
        max_pool_size: int = 10,
        connect_timeout_s: float = 10.0,
        lock_poll_max_s: float = 0.05,
    ) -> None:
        self._asyncpg = _import_asyncpg()
        if urlsplit(url).scheme not in ("postgresql", "postgres"):
            raise UsageError(
                "PostgresStorage needs a postgresql://user:password@host:port/db URL, "
                f"not {redact_url(url)!r}"
            )
        url, schema = _take_schema(url, schema)
        if not _SCHEMA_NAME.fullmatch(schema):
            raise UsageError(
                f"schema must be a lower-case SQL identifier (letters, digits, _), not {schema!r}"
            )
        if not 1 <= min_pool_size <= max_pool_size:
            raise UsageError("pool sizes need 1 <= min_pool_size <= max_pool_size")
        if connect_timeout_s <= 0:
            raise UsageError("connect_timeout_s must be > 0 seconds")
        self._url = url
        self._safe_url = redact_url(url)
        self._secrets = _secrets_of(url)
        self._schema = schema
        self._q = f'"{schema}"'
        channel = f"pes_obs_{schema}"
        self._channel = channel if len(channel) <= 63 else "pes_obs_" + _digest(schema, 12)
        self._commit_sql = _COMMIT_TURN.format(s=self._q)
        self._min_pool = min_pool_size
        self._max_pool = max_pool_size
        self._connect_timeout_s = connect_timeout_s
        self._lock_poll_max_s = lock_poll_max_s
        self._origin = uuid4().hex
        self._pool: Any = None
        self._init_lock = asyncio.Lock()
        self._locks = ThreadLockTable()
        self._lock_conn: Any = None
        self._lock_conn_mutex = asyncio.Lock()
        self._held: dict[str, _Held] = {}
        self._feed: Fanout[_FeedItem] = Fanout("postgres-observations")
        self._listen_conn: Any = None
        self._listen_mutex = asyncio.Lock()
        self._queue: asyncio.Queue[str] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._pending_observations: list[tuple[str, str, str, str, str, str | None]] = []
        self._observation_writer: asyncio.Task[None] | None = None
        self._dispatcher: asyncio.Task[None] | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"PostgresStorage({self._safe_url!r}, schema={self._schema!r})"

    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding the tables."""
        return self._schema

    @property
    def url(self) -> str:
        """The database URL with its password masked."""
        return self._safe_url

    async def __aenter__(self) -> Self:
        await self.initialize()
        return self

    async def initialize(self) -> None:
        """Connect and create or migrate the schema now rather than on first use."""
        await self._ready()

    # -- connections ------------------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def _connection_error(self, exc: BaseException) -> PESAgentError:
        pg = self._asyncpg
        detail = self._scrub(str(exc) or type(exc).__name__)
        if isinstance(
            exc,
            pg.InvalidAuthorizationSpecificationError
            | pg.InvalidCatalogNameError
            | pg.InvalidPasswordError,
        ):
            return ConfigurationError(
                f"cannot log in to PostgreSQL at {self._safe_url}: {detail}; check the user, "
                "password and database name in the storage URL"
            )
        if isinstance(exc, pg.ClientConfigurationError | ValueError):
            return ConfigurationError(f"bad PostgreSQL URL {self._safe_url}: {detail}")
        if isinstance(exc, OSError | TimeoutError | pg.CannotConnectNowError):
            return StorageError(
                f"cannot reach PostgreSQL at {self._safe_url}: {detail}; is the server "
                "running, and are the host and port right?"
            )
        return StorageError(f"cannot connect to PostgreSQL at {self._safe_url}: {detail}")

    def _query_error(self, exc: BaseException, thread_id: str | None = None) -> StorageError:
        detail = self._scrub(str(exc) or type(exc).__name__)
        return StorageError(f"PostgreSQL error at {self._safe_url}: {detail}", thread_id=thread_id)

    def _db_errors(self) -> tuple[type[BaseException], ...]:
        return (self._asyncpg.PostgresError, self._asyncpg.InterfaceError, OSError)

    async def _connect(self) -> Any:
        if self._closed:
            raise UsageError(f"{self!r} is closed: open a new storage object")
        try:
            return await self._asyncpg.connect(self._url, timeout=self._connect_timeout_s)
        except Exception as exc:
            raise self._connection_error(exc) from None

    async def _ready(self) -> Any:
        if self._pool is not None:
            return self._pool
        if self._closed:
            raise UsageError(f"{self!r} is closed: open a new storage object")
        async with self._init_lock:
            if self._pool is None:
                try:
                    pool = await self._asyncpg.create_pool(
                        self._url,
                        min_size=self._min_pool,
                        max_size=self._max_pool,
                        timeout=self._connect_timeout_s,
                        reset=_keep_session,
                    )
                except Exception as exc:
                    # `from None`: the driver's own exception may carry the full DSN.
                    raise self._connection_error(exc) from None
                try:
                    await self._migrate(pool)
                except BaseException:
                    await pool.close()
                    raise
                self._pool = pool
        return self._pool

    async def _migrate(self, pool: Any) -> None:
        q = self._q
        try:
            async with pool.acquire() as conn:
                if await conn.fetchval("SELECT to_regclass($1)", f"{q}.schema_version"):
                    current = await conn.fetchval(f"SELECT max(version) FROM {q}.schema_version")
                    if current == SCHEMA_VERSION:
                        return
                async with conn.transaction():
                    await conn.execute(
                        "SELECT pg_advisory_xact_lock($1)", _lock_key(self._schema, "\0schema")
                    )
                    await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {q}")
                    await conn.execute(
                        f"CREATE TABLE IF NOT EXISTS {q}.schema_version (version integer NOT NULL)"
                    )
                    current = (
                        await conn.fetchval(f"SELECT max(version) FROM {q}.schema_version") or 0
                    )
                    if current > SCHEMA_VERSION:
                        raise ConfigurationError(
                            f"the PostgreSQL schema {self._schema!r} at {self._safe_url} has "
                            f"schema version {current}, newer than the {SCHEMA_VERSION} this "
                            "pes-agent understands: upgrade pes-agent to use it"
                        )
                    for version in range(current + 1, SCHEMA_VERSION + 1):
                        for statement in MIGRATIONS[version]:
                            await conn.execute(statement.format(s=q))
                    await conn.execute(f"DELETE FROM {q}.schema_version")
                    await conn.execute(
                        f"INSERT INTO {q}.schema_version (version) VALUES ($1)", SCHEMA_VERSION
                    )
        except self._asyncpg.InsufficientPrivilegeError as exc:
            raise ConfigurationError(
                f"the PostgreSQL user at {self._safe_url} may not create the schema "
                f"{self._schema!r} ({self._scrub(str(exc))}): grant it CREATE on the database "
                "or create the schema for it"
            ) from None
        except self._db_errors() as exc:
            raise self._query_error(exc) from None

    async def _fetch(self, sql: str, *args: Any) -> list[Any]:
        pool = await self._ready()
        try:
            return list(await pool.fetch(sql, *args))
        except self._db_errors() as exc:
            raise self._query_error(exc) from exc

    async def _execute(self, sql: str, *args: Any) -> None:
        pool = await self._ready()
        try:
            await pool.execute(sql, *args)
        except self._db_errors() as exc:
            raise self._query_error(exc) from exc

    # -- threads ----------------------------------------------------------------------------

    async def get_thread_config(self, thread_id: str) -> ThreadConfig | None:
        """The thread's saved config, or None if it was never configured."""
        rows = await self._fetch(
            f"SELECT config FROM {self._q}.thread_configs WHERE thread_id = $1", thread_id
        )
        return _codec.load_config(rows[0][0]) if rows else None

    async def set_thread_config(self, thread_id: str, config: ThreadConfig) -> None:
        """Replace the thread's config."""
        text = _codec.dump_config(config, thread_id)
        await self._execute(
            f"INSERT INTO {self._q}.thread_configs (thread_id, config) VALUES ($1, $2) "
            "ON CONFLICT (thread_id) DO UPDATE SET config = excluded.config",
            thread_id,
            text,
        )

    async def get_agent_state(self, thread_id: str) -> AgentState | None:
        """The thread's saved state, or None if none was saved."""
        rows = await self._fetch(
            f"SELECT data, version FROM {self._q}.agent_states WHERE thread_id = $1", thread_id
        )
        return _codec.load_state(rows[0][0], int(rows[0][1])) if rows else None

    def _upsert_state_sql(self) -> str:
        return (
            f"INSERT INTO {self._q}.agent_states AS s (thread_id, data, version) "
            "VALUES ($1, $2, 1) ON CONFLICT (thread_id) DO UPDATE "
            "SET data = excluded.data, version = s.version + 1 RETURNING version"
        )

    async def set_agent_state(self, thread_id: str, state: AgentState) -> AgentState:
        """Save `state` as the next version (stored version + 1) and return what was saved."""
        data = _codec.dump_state_data(state, thread_id)
        rows = await self._fetch(self._upsert_state_sql(), thread_id, data)
        return _codec.load_state(data, int(rows[0][0]))

    # -- messages ---------------------------------------------------------------------------

    async def add_messages(self, thread_id: str, messages: Sequence[ConversationMessage]) -> None:
        """Append messages to the thread's history, all or none."""
        await self.commit_turn(thread_id, messages, None)

    async def get_messages(
        self, thread_id: str, *, limit: int | None = None
    ) -> list[ConversationMessage]:
        """The newest `limit` messages (all when None), oldest first."""
        limit = _codec.check_limit(limit)
        rows = await self._fetch(
            f"SELECT body FROM (SELECT seq, body FROM {self._q}.messages WHERE thread_id = $1 "
            "ORDER BY seq DESC LIMIT $2) AS newest ORDER BY seq",
            thread_id,
            limit,
        )
        return [_codec.load_message(row[0]) for row in rows]

    async def commit_turn(
        self,
        thread_id: str,
        messages: Sequence[ConversationMessage],
        state: AgentState | None,
    ) -> AgentState | None:
        """Save a run's messages and (if given) its state in one transaction."""
        rows = [(thread_id, m.message_id, _codec.dump_message(m, thread_id)) for m in messages]
        data = _codec.dump_state_data(state, thread_id) if state is not None else None
        if not rows and data is None:
            return None
        held = self._held.get(thread_id)
        if held is not None and held.conn.is_closed():
            raise self._lock_lost(thread_id)
        pid, classid, objid = (
            (None, None, None) if held is None else (held.pid, *_lock_key_halves(held.key))
        )
        pool = await self._ready()
        try:
            row = await pool.fetchrow(
                self._commit_sql,
                thread_id,
                [message_id for _, message_id, _ in rows],
                [body for _, _, body in rows],
                pid,
                classid,
                objid,
                data,
            )
        except self._asyncpg.UniqueViolationError as exc:
            raise StorageError(
                f"a message of this turn is already saved in thread {thread_id!r}: each "
                "message needs its own message_id; nothing was saved",
                thread_id=thread_id,
            ) from exc
        except self._db_errors() as exc:
            raise self._query_error(exc, thread_id) from exc
        if not row[0]:
            # The server dropped the lock with its session (network loss, a DBA's
            # pg_terminate_backend): another process may be running this thread.
            raise self._lock_lost(thread_id)
        return None if data is None else _codec.load_state(data, int(row[1]))

    def _lock_lost(self, thread_id: str) -> StorageError:
        return StorageError(
            f"the cross-process lock on thread {thread_id!r} was lost (its connection to "
            f"{self._safe_url} closed); nothing of this turn was saved",
            thread_id=thread_id,
        )

    # -- observations -----------------------------------------------------------------------

    async def add_observation(self, observation: Observation) -> None:
        """Append an observation to its thread's log and NOTIFY listening processes.

        It is queued for this store's observation writer, which inserts what was recorded
        meanwhile in one statement (a run records a dozen or more; a round trip each would
        cost more than the rest of the run). Reads of observations and `aclose` wait for the
        writer first; a write that fails is logged.
        """
        if self._closed:
            raise UsageError(f"{self!r} is closed: open a new storage object")
        body = _codec.dump_observation(observation)
        inline = f'{{"origin":"{self._origin}","observation":{body}}}'
        # Too big for NOTIFY: listeners get the row's seq and fetch it instead.
        payload = inline if len(inline.encode()) <= _MAX_PAYLOAD else None
        self._pending_observations.append(
            (
                observation.id,
                observation.thread_id,
                observation.trace_id,
                observation.type.value,
                body,
                payload,
            )
        )
        writer = self._observation_writer
        if writer is None or writer.done():
            self._observation_writer = asyncio.create_task(self._write_observations())

    async def _write_observations(self) -> None:
        while self._pending_observations:
            rows, self._pending_observations = self._pending_observations, []
            try:
                await self._insert_observations(rows)
            except Exception:
                if len(rows) == 1:
                    _log.exception("postgres_observation_write_failed", count=1)
                    continue
                # One bad row (a NUL in an id, say) must not take the others down with it.
                for row in rows:
                    try:
                        await self._insert_observations([row])
                    except Exception:
                        _log.exception(
                            "postgres_observation_write_failed",
                            count=1,
                            observation_id=row[0],
                            thread_id=row[1],
                        )

    async def _insert_observations(
        self, rows: list[tuple[str, str, str, str, str, str | None]]
    ) -> None:
        columns = [list(column) for column in zip(*rows, strict=True)]
        await self._execute(
            f"WITH batch AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], "
            "$4::text[], $5::text[], $6::text[]) WITH ORDINALITY "
            "AS b(id, thread_id, trace_id, type, body, payload, n)), "
            f"ins AS (INSERT INTO {self._q}.observations "
            "(id, thread_id, trace_id, type, body) "
            "SELECT id, thread_id, trace_id, type, body::json FROM batch ORDER BY n "
            "RETURNING seq), "
            "numbered AS (SELECT seq, row_number() OVER (ORDER BY seq) AS n FROM ins) "
            "SELECT pg_notify($7, coalesce(batch.payload, json_build_object("
            "'origin', $8::text, 'seq', numbered.seq)::text)), "
            # The log need not wait for its own fsync: see "Durability" in the module docstring.
            "set_config('synchronous_commit', 'off', true) "
            "FROM numbered JOIN batch ON batch.n = numbered.n ORDER BY numbered.seq",
            *columns,
            self._channel,
            self._origin,
        )

    async def _flush_observations(self) -> None:
        writer = self._observation_writer
        if writer is not None and not writer.done():
            await asyncio.shield(writer)

    async def get_observations(
        self,
        thread_id: str,
        *,
        types: Sequence[ObservationType] | None = None,
        trace_id: str | None = None,
    ) -> list[Observation]:
        """The thread's observations in recording order, optionally of some types or one trace."""
        await self._flush_observations()
        kinds = None if types is None else sorted({ObservationType(t).value for t in types})
        rows = await self._fetch(
            f"SELECT body FROM {self._q}.observations WHERE thread_id = $1 "
            "AND ($2::text IS NULL OR trace_id = $2) "
            "AND ($3::text[] IS NULL OR type = ANY($3)) ORDER BY seq",
            thread_id,
            trace_id,
            kinds,
        )
        return [_codec.load_observation(row[0]) for row in rows]

    async def subscribe_observations(
        self,
        callback: ObservationCallback,
        *,
        types: Iterable[ObservationType] | None = None,
        thread_id: str | None = None,
        include_own: bool = True,
    ) -> Callable[[], None]:
        """Call `callback` with every observation written to this database by any process,
        optionally only of `types` and/or one thread; returns the function that unsubscribes.

        Observations arrive in commit order once their insert commits. `include_own=False`
        skips those recorded through this storage object (an in-process observation manager
        already has them). A callback that raises is logged and the others still run; an async
        callback is awaited before the next observation is delivered.
        """
        wanted = None if types is None else frozenset(ObservationType(t) for t in types)
        origin = self._origin

        def wants(item: _FeedItem) -> bool:
            observation = item.observation
            return (
                (include_own or item.origin != origin)
                and (wanted is None or observation.type in wanted)
                and (thread_id is None or observation.thread_id == thread_id)
            )

        def deliver(item: _FeedItem) -> Awaitable[None] | None:
            return callback(item.observation)

        unsubscribe = self._feed.add(deliver, wants)
        try:
            await self._listen()
        except BaseException:
            unsubscribe()
            raise
        return unsubscribe

    async def _listen(self) -> None:
        async with self._listen_mutex:
            if self._listen_conn is not None and not self._listen_conn.is_closed():
                return
            await self._ready()
            if self._queue is None:
                self._queue = asyncio.Queue()
                self._dispatcher = asyncio.create_task(self._dispatch(self._queue))
            conn = await self._connect()
            try:
                await conn.add_listener(self._channel, self._on_notify)
            except BaseException:
                await conn.close()
                raise
            conn.add_termination_listener(self._on_listen_lost)
            self._listen_conn = conn

    def _on_notify(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        if self._queue is not None:
            self._queue.put_nowait(payload)

    def _on_listen_lost(self, conn: Any) -> None:
        if self._closed or conn is not self._listen_conn:
            return
        _log.warning("observation_feed_disconnected", url=self._safe_url)
        self._spawn(self._relisten())

    async def _relisten(self) -> None:
        delay = 0.1
        while not self._closed and self._feed:
            try:
                await self._listen()
            except Exception as exc:
                _log.warning(
                    "observation_feed_reconnect_failed", url=self._safe_url, error=str(exc)
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
            else:
                _log.warning(
                    "observation_feed_reconnected",
                    url=self._safe_url,
                    note="observations committed while disconnected were not delivered",
                )
                return

    async def _dispatch(self, queue: asyncio.Queue[str]) -> None:
        while True:
            payload = await queue.get()
            try:
                item = await self._decode(payload)
            except Exception:
                _log.exception("observation_feed_bad_payload", url=self._safe_url)
                continue
            if item is not None:
                await self._feed.deliver(item)

    async def _decode(self, payload: str) -> _FeedItem | None:
        message = json.loads(payload)
        origin = str(message["origin"])
        if "observation" in message:
            return _FeedItem(origin, Observation.model_validate(message["observation"]))
        rows = await self._fetch(
            f"SELECT body FROM {self._q}.observations WHERE seq = $1", int(message["seq"])
        )
        if not rows:
            return None  # deleted before we could read it
        return _FeedItem(origin, _codec.load_observation(rows[0][0]))

    def _spawn(self, coro: Awaitable[None]) -> None:
        async def run() -> None:
            await coro

        task = asyncio.get_running_loop().create_task(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- whole threads ----------------------------------------------------------------------

    async def list_threads(self) -> list[str]:
        """Every thread with a config, state, message or observation, sorted by id."""
        await self._flush_observations()
        q = self._q
        rows = await self._fetch(
            f"SELECT thread_id FROM {q}.thread_configs UNION SELECT thread_id FROM "
            f"{q}.agent_states UNION SELECT thread_id FROM {q}.messages UNION SELECT thread_id "
            f"FROM {q}.observations ORDER BY thread_id"
        )
        return [str(row[0]) for row in rows]

    async def delete_thread(self, thread_id: str) -> None:
        """Delete the thread's config, state, messages and observations in one transaction."""
        await self._flush_observations()
        pool = await self._ready()
        try:
            async with pool.acquire() as conn, conn.transaction():
                for table in ("thread_configs", "agent_states", "messages", "observations"):
                    await conn.execute(
                        f"DELETE FROM {self._q}.{table} WHERE thread_id = $1", thread_id
                    )
        except self._db_errors() as exc:
            raise self._query_error(exc, thread_id) from exc

    # -- locks ------------------------------------------------------------------------------

    def lock_thread(self, thread_id: str) -> AbstractAsyncContextManager[None]:
        """Serialise runs on `thread_id` across every process using this database.

        Not reentrant. Other threads are never blocked. Released when the block exits, or by
        the server if the process dies.
        """
        return self._hold(thread_id)

    @asynccontextmanager
    async def _hold(self, thread_id: str) -> AsyncIterator[None]:
        async with self._locks.hold(thread_id):
            await self._ready()
            key = _lock_key(self._schema, thread_id)
            conn = await self._acquire_advisory(key, thread_id)
            self._held[thread_id] = _Held(conn, conn.get_server_pid(), key)
            try:
                yield
            finally:
                del self._held[thread_id]
                await asyncio.shield(self._release_advisory(conn, key, thread_id))

    async def _try_advisory(self, key: int, thread_id: str) -> Any:
        async with self._lock_conn_mutex:
            conn = self._lock_conn
            if conn is None or conn.is_closed():
                conn = self._lock_conn = await self._connect()
            try:
                got = await conn.fetchval("SELECT pg_try_advisory_lock($1)", key)
            except self._db_errors() as exc:
                # The session (and any lock it held) is gone or unusable: start afresh.
                self._lock_conn = None
                conn.terminate()
                raise self._query_error(exc, thread_id) from exc
            return conn if got else None

    async def _acquire_advisory(self, key: int, thread_id: str) -> Any:
        delay = 0.0005
        while True:
            # Shielded: if we are cancelled after the server granted the lock, it must still
            # be released, or the thread would stay locked for every process.
            attempt = asyncio.ensure_future(self._try_advisory(key, thread_id))
            try:
                conn = await asyncio.shield(attempt)
            except asyncio.CancelledError:
                attempt.add_done_callback(lambda done: self._release_abandoned(done, key))
                raise
            if conn is not None:
                return conn
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._lock_poll_max_s)

    def _release_abandoned(self, done: asyncio.Future[Any], key: int) -> None:
        if done.cancelled() or done.exception() is not None or done.result() is None:
            return
        self._spawn(self._release_advisory(done.result(), key, None))

    async def _release_advisory(self, conn: Any, key: int, thread_id: str | None) -> None:
        if conn.is_closed():
            return  # the server released it with the session
        async with self._lock_conn_mutex:
            try:
                released = await conn.fetchval("SELECT pg_advisory_unlock($1)", key)
            except self._db_errors() as exc:
                _log.warning(
                    "thread_unlock_failed",
                    thread_id=thread_id,
                    error=self._scrub(str(exc)),
                    note="the server releases the lock when the connection closes",
                )
                if conn is self._lock_conn:
                    self._lock_conn = None
                conn.terminate()
                return
        if not released:
            _log.warning("thread_lock_was_not_held", thread_id=thread_id)

    # -- closing ----------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the pool and the lock and listen connections; safe to call twice."""
        if self._closed:
            return
        await self._flush_observations()
        self._closed = True
        tasks = [*self._background]
        if self._dispatcher is not None:
            tasks.append(self._dispatcher)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for conn in (self._listen_conn, self._lock_conn):
            if conn is not None and not conn.is_closed():
                await conn.close()
        self._listen_conn = self._lock_conn = None
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()


async def _keep_session(conn: Any) -> None:
    """Skip asyncpg's reset query on every release (a round trip per query): pooled
    connections never change session state here (no LISTEN, session locks or SET)."""


def _import_asyncpg() -> Any:
    try:
        import asyncpg  # type: ignore[import-untyped]
    except ImportError:
        raise ConfigurationError(
            "PostgresStorage needs asyncpg: pip install 'pes-agent[postgres]'"
        ) from None
    return asyncpg


def _digest(text: str, size: int) -> str:
    return hashlib.blake2b(text.encode(), digest_size=size).hexdigest()


def _lock_key(schema: str, thread_id: str) -> int:
    """A signed 64-bit advisory-lock key for a thread (64 bits: collisions, which would make
    two threads wait for each other, are practically impossible)."""
    digest = hashlib.blake2b(f"{schema}\0{thread_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _take_schema(url: str, schema: str | None) -> tuple[str, str]:
    """Split a `schema=` query parameter off the URL (the driver would send it to the server
    as a setting); the `schema` argument, if given, must agree with it."""
    parts = urlsplit(url)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    in_url = [value for key, value in pairs if key == "schema"]
    if not in_url:
        return url, schema or DEFAULT_SCHEMA
    if len(set(in_url)) > 1 or (schema is not None and schema != in_url[0]):
        raise UsageError(
            "the schema is given twice, differently: pass it either as ?schema=NAME in the URL "
            "or as PostgresStorage(..., schema=NAME)"
        )
    query = urlencode([(key, value) for key, value in pairs if key != "schema"])
    return urlunsplit(parts._replace(query=query)), in_url[0]


def _lock_key_halves(key: int) -> tuple[int, int]:
    """How `pg_locks` shows a bigint advisory key: (classid, objid), its high and low halves."""
    unsigned = key & 0xFFFFFFFFFFFFFFFF
    return unsigned >> 32, unsigned & 0xFFFFFFFF


# The password of a URL's user info is everything between "scheme://user:" and the LAST "@":
# it may itself hold "/", "?", "#" or "@", which end urlsplit()'s netloc early.
_USERINFO_PASSWORD = re.compile(
    r"^(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/@?#]*:)(?P<password>.*)@(?P<rest>[^@]*)$", re.S
)


def redact_url(url: str) -> str:
    """`url` with its password (in the user info or a `password=` parameter) masked."""
    match = _USERINFO_PASSWORD.match(url)
    if match is not None:
        url = f"{match['head']}***@{match['rest']}"
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, "***" if k.lower() == "password" else v) for k, v in pairs])
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))


def _secrets_of(url: str) -> tuple[str, ...]:
    """The password of `url`, raw and decoded, for scrubbing error text."""
    found: list[str] = []
    match = _USERINFO_PASSWORD.match(url)
    if match is not None:
        found.append(match["password"])
    with suppress(ValueError):
        found += [v for k, v in parse_qsl(urlsplit(url).query) if k.lower() == "password"]
    return tuple({variant for secret in found if secret for variant in (secret, unquote(secret))})
