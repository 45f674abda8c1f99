"""`PostgresStorage`: the queries; connecting, the schema, locks and the feed are its siblings."""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any
from urllib.parse import urlsplit
from uuid import uuid4

from pes_agent._closing import close_all
from pes_agent.errors import StorageError, UsageError
from pes_agent.observing.logs import get_logger
from pes_agent.observing.streams import StreamEvent
from pes_agent.observing.types import Observation, ObservationType
from pes_agent.storage._common import (
    THREAD_TABLES,
    LimitOf,
    ObservationRow,
    PendingObservations,
    SavedState,
    SnapshotRows,
    StorageBase,
    TaskRow,
    Turn,
)
from pes_agent.storage._streams import StreamCallback, StreamDelivery
from pes_agent.storage.postgres._listen import FeedItem, ObservationListener
from pes_agent.storage.postgres._locks import AdvisoryLocks
from pes_agent.storage.postgres._pool import Connector, redact_url, take_schema
from pes_agent.storage.postgres._schema import migrate
from pes_agent.storage.postgres._streams import StreamNotifier

__all__ = ["PostgresStorage"]

_log = get_logger("pes_agent.storage")

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
# A NOTIFY payload must stay under 8000 bytes; bigger observations are sent by reference.
_MAX_PAYLOAD = 7900

ObservationCallback = Callable[[Observation], Awaitable[None] | None]

# A state save, as a compare-and-set when $3 (the expected version; 0: no state) is given. With
# a stored row, the insert turns into the update, which checks the version of the newest row
# (so a save that committed meanwhile makes it miss); nothing is returned when it misses.
_SAVE_STATE = """
INSERT INTO {s}.agent_states AS s (thread_id, data, version)
SELECT $1, $2::text::json, 1
WHERE $3::bigint IS NULL OR $3 = 0
    OR EXISTS (SELECT 1 FROM {s}.agent_states WHERE thread_id = $1)
ON CONFLICT (thread_id) DO UPDATE SET data = excluded.data, version = s.version + 1
WHERE $3::bigint IS NULL OR s.version = $3
RETURNING version
"""

# What a run reads of its thread, in one statement (one round trip, one snapshot): the config,
# the state, the paused runs and the newest $2 messages (NULL: all).
_SNAPSHOT = """
SELECT
    (SELECT config FROM {s}.thread_configs WHERE thread_id = $1),
    (SELECT data FROM {s}.agent_states WHERE thread_id = $1),
    (SELECT version FROM {s}.agent_states WHERE thread_id = $1),
    ARRAY(SELECT body::text FROM {s}.paused_runs WHERE thread_id = $1 ORDER BY seq),
    ARRAY(SELECT body FROM (SELECT seq, body::text FROM {s}.messages WHERE thread_id = $1
        ORDER BY seq DESC LIMIT $2) AS newest ORDER BY seq)
"""

# A whole turn in one statement (so one round trip, and atomic without BEGIN/COMMIT). It writes
# only if the caller's advisory lock is still held by its session ($4-$6; NULL when the caller
# holds no lock) and, with a state ($7), only if that state was saved (the compare-and-set on
# $8): then the messages go in, in order, and with a trace id ($9) the `turns` row, whose
# primary key makes a second commit of the same trace fail whole.
_COMMIT_TURN = """
WITH held AS (
    SELECT $4::int IS NULL OR EXISTS (
        SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = $4::int
        AND classid = $5::oid AND objid = $6::oid AND objsubid = 1 AND granted
    ) AS ok
), saved AS (
    INSERT INTO {s}.agent_states AS s (thread_id, data, version)
    SELECT $1, $7::text::json, 1
    WHERE $7::text IS NOT NULL AND (SELECT ok FROM held) AND ($8::bigint IS NULL OR $8 = 0
        OR EXISTS (SELECT 1 FROM {s}.agent_states WHERE thread_id = $1))
    ON CONFLICT (thread_id) DO UPDATE SET data = excluded.data, version = s.version + 1
    WHERE $8::bigint IS NULL OR s.version = $8
    RETURNING version
), go AS (
    SELECT (SELECT ok FROM held) AND ($7::text IS NULL OR EXISTS (SELECT 1 FROM saved)) AS ok
), added AS (
    INSERT INTO {s}.messages (thread_id, message_id, body)
    SELECT $1, m.message_id, m.body
    FROM unnest($2::text[], $3::json[]) WITH ORDINALITY AS m (message_id, body, n)
    WHERE (SELECT ok FROM go)
    ORDER BY m.n
    RETURNING 1
), recorded AS (
    INSERT INTO {s}.turns (thread_id, trace_id, state, version)
    SELECT $1, $9, $7::text::json, (SELECT version FROM saved)
    WHERE $9::text IS NOT NULL AND (SELECT ok FROM go)
    RETURNING 1
)
SELECT (SELECT ok FROM held), (SELECT ok FROM go), (SELECT version FROM saved),
    (SELECT count(*) FROM added), (SELECT count(*) FROM recorded)
"""

# A batch of observations in one statement, each followed by its NOTIFY (sent on commit).
_INSERT_OBSERVATIONS = """
WITH batch AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[])
    WITH ORDINALITY AS b(id, thread_id, trace_id, type, body, payload, n)
), ins AS (
    INSERT INTO {s}.observations (id, thread_id, trace_id, type, body)
    SELECT id, thread_id, trace_id, type, body::json FROM batch ORDER BY n
    RETURNING seq
), numbered AS (
    SELECT seq, row_number() OVER (ORDER BY seq) AS n FROM ins
)
SELECT pg_notify($7, coalesce(batch.payload,
        json_build_object('origin', $8::text, 'seq', numbered.seq)::text)),
    -- The log need not wait for its own fsync: see "Durability" in the package docstring.
    set_config('synchronous_commit', 'off', true)
FROM numbered JOIN batch ON batch.n = numbered.n ORDER BY numbered.seq
"""


class PostgresStorage(StorageBase):
    """Threads, history, state and observations in PostgreSQL, for many worker processes.

    `PostgresStorage("postgresql://app@db/agents", schema="pes_agent")` connects on first use
    (the schema may also be given as `?schema=NAME` in the URL; default `pes_agent`).
    `feed_queue_size` bounds what waits for each `subscribe_observations` subscriber.
    Close it with `await storage.aclose()` or `async with PostgresStorage(...)`.
    Its reads and writes are the `Storage` protocol's, documented there.
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
        feed_queue_size: int = 1000,
    ) -> None:
        """Name the database; nothing is connected until first use.

        Args:
            url: `postgresql://user:password@host:5432/db` (or `postgres://...`), optionally
                with `?schema=NAME`.
            schema: The PostgreSQL schema the tables live in (created on first use); None
                for the URL's `?schema=`, else `pes_agent`.
            min_pool_size: Connections the pool keeps open.
            max_pool_size: Connections the pool opens at the most.
            connect_timeout_s: How long connecting may take before it fails with a transient
                `StorageError`.
            lock_poll_max_s: The longest pause between two tries at a thread's advisory lock
                held by another process (`lock_thread`).
            feed_queue_size: How many observations wait for each `subscribe_observations`
                subscriber; past that the oldest are dropped.

        Raises:
            UsageError: The URL is not a PostgreSQL one, the schema is given twice
                differently or is not a lower-case SQL identifier, the pool sizes break
                `1 <= min_pool_size <= max_pool_size`, `connect_timeout_s` is not > 0, or
                `feed_queue_size` is not an int >= 1.
            ConfigurationError: asyncpg is not installed (`pip install 'pes-agent[postgres]'`).
        """
        if urlsplit(url).scheme not in ("postgresql", "postgres"):
            raise UsageError(
                "PostgresStorage needs a postgresql://user:password@host:port/db URL, "
                f"not {redact_url(url)!r}"
            )
        url, schema = take_schema(url, schema)
        if not _SCHEMA_NAME.fullmatch(schema):
            raise UsageError(
                f"schema must be a lower-case SQL identifier (letters, digits, _), not {schema!r}"
            )
        if not 1 <= min_pool_size <= max_pool_size:
            raise UsageError("pool sizes need 1 <= min_pool_size <= max_pool_size")
        if connect_timeout_s <= 0:
            raise UsageError("connect_timeout_s must be > 0 seconds")
        if isinstance(feed_queue_size, bool) or not isinstance(feed_queue_size, int):
            raise UsageError(f"feed_queue_size must be an int >= 1, not {feed_queue_size!r}")
        if feed_queue_size < 1:
            raise UsageError(f"feed_queue_size must be >= 1, not {feed_queue_size}")
        self._schema = schema
        self._q = q = f'"{schema}"'
        self._db = Connector(
            url,
            label=f"PostgresStorage({redact_url(url)!r}, schema={schema!r})",
            min_pool_size=min_pool_size,
            max_pool_size=max_pool_size,
            connect_timeout_s=connect_timeout_s,
            prepare=lambda pool: migrate(pool, self._db, schema),
        )
        self._save_state_sql = _SAVE_STATE.format(s=q)
        self._commit_sql = _COMMIT_TURN.format(s=q)
        self._snapshot_sql = _SNAPSHOT.format(s=q)
        self._insert_observations_sql = _INSERT_OBSERVATIONS.format(s=q)
        channel = f"pes_obs_{schema}"
        if len(channel) > 63:
            channel = "pes_obs_" + hashlib.blake2b(schema.encode(), digest_size=12).hexdigest()
        self._channel = channel
        self._origin = uuid4().hex
        self._background: set[asyncio.Task[None]] = set()
        self._locks = AdvisoryLocks(self._db, schema, poll_max_s=lock_poll_max_s, spawn=self._spawn)
        self._feed = ObservationListener(
            self._db,
            channel,
            queue_size=feed_queue_size,
            fetch_body=self._observation_body,
            spawn=self._spawn,
        )
        self._pending = PendingObservations()
        self._observation_writer: asyncio.Task[None] | None = None
        stream_channel = f"pes_tok_{schema}"
        if len(stream_channel) > 63:
            digest = hashlib.blake2b(schema.encode(), digest_size=12).hexdigest()
            stream_channel = "pes_tok_" + digest
        self._streams = StreamNotifier(self._db, stream_channel, spawn=self._spawn)

    def __repr__(self) -> str:
        return f"PostgresStorage({self._db.safe_url!r}, schema={self._schema!r})"

    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding the tables."""
        return self._schema

    @property
    def url(self) -> str:
        """The database URL with its password masked."""
        return self._db.safe_url

    async def _open(self) -> None:
        await self._db.pool()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run `coro` in the background; `aclose` cancels what is still running."""
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- threads ----------------------------------------------------------------------------

    async def _read_config(self, thread_id: str) -> str | None:
        rows = await self._db.fetch(
            f"SELECT config FROM {self._q}.thread_configs WHERE thread_id = $1", thread_id
        )
        return str(rows[0][0]) if rows else None

    async def _write_config(self, thread_id: str, text: str) -> None:
        await self._db.execute(
            f"INSERT INTO {self._q}.thread_configs (thread_id, config) VALUES ($1, $2) "
            "ON CONFLICT (thread_id) DO UPDATE SET config = excluded.config",
            thread_id,
            text,
            thread_id=thread_id,
        )

    async def _read_state(self, thread_id: str) -> SavedState | None:
        rows = await self._db.fetch(
            f"SELECT data, version FROM {self._q}.agent_states WHERE thread_id = $1", thread_id
        )
        return SavedState(str(rows[0][0]), int(rows[0][1])) if rows else None

    async def _write_state(self, thread_id: str, data: str, expected_version: int | None) -> int:
        rows = await self._db.fetch(
            self._save_state_sql, thread_id, data, expected_version, thread_id=thread_id
        )
        if not rows:
            raise self._conflict(thread_id, expected_version)
        return int(rows[0][0])

    # -- messages ---------------------------------------------------------------------------

    async def _read_messages(self, thread_id: str, limit: int | None) -> list[str]:
        rows = await self._db.fetch(
            f"SELECT body FROM (SELECT seq, body FROM {self._q}.messages WHERE thread_id = $1 "
            "ORDER BY seq DESC LIMIT $2) AS newest ORDER BY seq",
            thread_id,
            limit,
        )
        return [str(row[0]) for row in rows]

    async def _read_snapshot(self, thread_id: str, limit_of: LimitOf) -> SnapshotRows:
        """One statement, reading as many messages as a thread without a config gets; only a
        config that sets another number costs a second query (for the messages alone)."""
        guess = limit_of(None)
        rows = await self._db.fetch(self._snapshot_sql, thread_id, guess, thread_id=thread_id)
        config, data, version, paused, messages = rows[0]
        if paused:
            return SnapshotRows.waiting([(thread_id, str(body)) for body in paused])
        config = None if config is None else str(config)
        limit = guess if config is None else limit_of(config)
        if limit != guess:
            messages = [] if limit == 0 else await self._read_messages(thread_id, limit)
        state = None if data is None else SavedState(str(data), int(version))
        return SnapshotRows([], config, state, [str(body) for body in messages], limit)

    async def _write_turn(self, turn: Turn) -> SavedState | None:
        """One statement, and only while the run still holds its thread's lock."""
        thread_id = turn.thread_id
        pid, classid, objid = self._locks.guard(thread_id)
        pool = await self._db.pool()
        try:
            row = await pool.fetchrow(
                self._commit_sql,
                thread_id,
                turn.message_ids,
                turn.bodies,
                pid,
                classid,
                objid,
                turn.state,
                turn.expected_version,
                turn.trace_id,
            )
        except self._db.asyncpg.UniqueViolationError as exc:
            # The turn's trace landed before (its `turns` row), or a message id is taken.
            landed, saved = await self._landed(turn)
            if landed:
                return saved
            raise StorageError(
                f"a message of this turn is already saved in thread {thread_id!r}: each "
                "message needs its own message_id; nothing was saved",
                thread_id=thread_id,
            ) from exc
        except self._db.db_errors as exc:
            raise self._db.query_error(exc, thread_id) from exc
        held, written, version = row[0], row[1], row[2]
        if not written:
            landed, saved = await self._landed(turn)
            if landed:
                return saved
            if not held:
                # The server dropped the lock with its session (network loss, a DBA's
                # pg_terminate_backend): another process may be running this thread.
                raise self._locks.lost(thread_id)
            raise self._conflict(thread_id, turn.expected_version)
        return None if turn.state is None else SavedState(turn.state, int(version))

    async def _landed(self, turn: Turn) -> tuple[bool, SavedState | None]:
        """Whether a commit of `turn.trace_id` landed before, and the state it saved."""
        if turn.trace_id is None:
            return False, None
        rows = await self._db.fetch(
            f"SELECT state, version FROM {self._q}.turns WHERE thread_id = $1 AND trace_id = $2",
            turn.thread_id,
            turn.trace_id,
            thread_id=turn.thread_id,
        )
        if not rows:
            return False, None
        state, version = rows[0]
        return True, None if state is None else SavedState(str(state), int(version))

    # -- observations -----------------------------------------------------------------------

    async def _write_observation(self, row: ObservationRow) -> None:
        """Queue the row for this store's observation writer, which inserts the rows queued
        meanwhile in one statement, each followed by a NOTIFY. Reads of observations and
        `aclose` wait for the writer first; a write that fails is logged."""
        if self._pending.add(row):
            self._observation_writer = asyncio.create_task(self._write_observations())

    async def _write_observations(self) -> None:
        while rows := self._pending.take():
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
                            observation_id=row.id,
                            thread_id=row.thread_id,
                        )

    async def _insert_observations(self, rows: list[ObservationRow]) -> None:
        payloads: list[str | None] = []
        for row in rows:
            inline = f'{{"origin":"{self._origin}","observation":{row.body}}}'
            # Too big for NOTIFY: listeners get the row's seq and fetch it instead.
            payloads.append(inline if len(inline.encode()) <= _MAX_PAYLOAD else None)
        columns = [list(column) for column in zip(*rows, strict=True)]
        await self._db.execute(
            self._insert_observations_sql, *columns, payloads, self._channel, self._origin
        )

    async def _flush_observations(self) -> None:
        writer = self._observation_writer
        if writer is not None and not writer.done():
            await asyncio.shield(writer)

    async def _read_observations(
        self, thread_id: str, kinds: list[str] | None, trace_id: str | None
    ) -> list[str]:
        await self._flush_observations()
        rows = await self._db.fetch(
            f"SELECT body FROM {self._q}.observations WHERE thread_id = $1 "
            "AND ($2::text IS NULL OR trace_id = $2) "
            "AND ($3::text[] IS NULL OR type = ANY($3)) ORDER BY seq",
            thread_id,
            trace_id,
            kinds,
        )
        return [str(row[0]) for row in rows]

    async def _observation_body(self, seq: int) -> str | None:
        rows = await self._db.fetch(f"SELECT body FROM {self._q}.observations WHERE seq = $1", seq)
        return str(rows[0][0]) if rows else None

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
        skips those recorded through this storage object. A callback that raises is logged
        and the next observation still comes; an async callback is awaited before the next
        observation is delivered to it. Each subscriber has its own queue of at most
        `feed_queue_size` observations: one that cannot keep up loses the oldest waiting ones
        (a warning counts them) and never slows the others. The LISTEN connection is open only
        while someone subscribes.
        """
        self._check_open()
        wanted = None if types is None else frozenset(ObservationType(t) for t in types)
        origin = self._origin

        def wants(item: FeedItem) -> bool:
            observation = item.observation
            return (
                (include_own or item.origin != origin)
                and (wanted is None or observation.type in wanted)
                and (thread_id is None or observation.thread_id == thread_id)
            )

        return await self._feed.subscribe(callback, wants)

    # -- model stream events (`StreamFeed`) -------------------------------------------------

    async def publish_stream(self, origin: str, events: Sequence[StreamEvent]) -> None:
        """NOTIFY `events` to the stream subscribers of every process (`StreamFeed`; nothing
        is stored): in payloads under PostgreSQL's 8000 bytes, a long token split over
        several, delivered in order.

        Args:
            origin: The publishing `StreamSocket`'s origin, handed to the subscribers.
            events: The events, in the order the subscribers get them.

        Raises:
            StorageError: The database could not be reached.
        """
        self._check_open()
        await self._streams.publish(origin, events)

    async def subscribe_stream(self, callback: StreamCallback) -> StreamDelivery:
        """Call `callback(origin, event)` with each event any process publishes from now on
        (`StreamFeed`); a LISTEN connection is open while anyone subscribes.

        Args:
            callback: Awaited with `(origin, event)` for each event, one at a time.

        Returns:
            The subscription: `caught_up()` waits for what was published before it, `close()`
            ends it.

        Raises:
            StorageError: The LISTEN connection could not be opened.
        """
        self._check_open()
        return await self._streams.subscribe(callback)

    # -- whole threads ----------------------------------------------------------------------

    async def _list_threads(self) -> list[str]:
        await self._flush_observations()
        q = self._q
        rows = await self._db.fetch(
            f"SELECT thread_id FROM {q}.thread_configs UNION SELECT thread_id FROM "
            f"{q}.agent_states UNION SELECT thread_id FROM {q}.messages UNION SELECT thread_id "
            f"FROM {q}.observations ORDER BY thread_id"
        )
        return [str(row[0]) for row in rows]

    async def _delete_thread(self, thread_id: str) -> None:
        await self._flush_observations()
        pool = await self._db.pool()
        try:
            async with pool.acquire() as conn, conn.transaction():
                for table in THREAD_TABLES:
                    await conn.execute(
                        f"DELETE FROM {self._q}.{table} WHERE thread_id = $1", thread_id
                    )
        except self._db.db_errors as exc:
            raise self._db.query_error(exc, thread_id) from exc

    def _hold(self, thread_id: str) -> AbstractAsyncContextManager[None]:
        return self._hold_and_flush(thread_id)

    @asynccontextmanager
    async def _hold_and_flush(self, thread_id: str) -> AsyncIterator[None]:
        """The thread's advisory lock, released only once the observations recorded under it
        are stored. Otherwise the next run on the thread (in any process) inserts its own while
        the last batch of this one is still being written, and the order of `seq` (listings,
        Last-Event-ID) and the order of commits (the live feed) disagree.

        While this process has feed subscribers, the holder first waits for the feed to catch
        up (`ObservationListener.caught_up`): what the previous holder, in another process,
        committed reaches them before this run's own observations, which they get at once."""
        async with self._locks.hold(thread_id):
            if self._feed.listening:
                try:
                    await self._feed.caught_up()
                except Exception as exc:  # the feed's order is not worth failing a run for
                    _log.warning(
                        "observation_feed_catch_up_failed",
                        url=self._db.safe_url,
                        thread_id=thread_id,
                        error=str(exc),
                    )
            try:
                yield
            finally:
                await self._flush_observations()

    # -- runs waiting for approval ---------------------------------------------------------

    async def _write_paused(self, thread_id: str, trace_id: str, body: str) -> None:
        await self._db.execute(
            f"INSERT INTO {self._q}.paused_runs (thread_id, trace_id, body) VALUES ($1, $2, $3) "
            "ON CONFLICT (thread_id, trace_id) DO UPDATE SET body = excluded.body",
            thread_id,
            trace_id,
            body,
            thread_id=thread_id,
        )

    async def _read_paused(self, thread_id: str | None) -> list[tuple[str, str]]:
        sql = f"SELECT thread_id, body FROM {self._q}.paused_runs"
        if thread_id is None:
            rows = await self._db.fetch(sql + " ORDER BY seq")
        else:
            rows = await self._db.fetch(
                sql + " WHERE thread_id = $1 ORDER BY seq", thread_id, thread_id=thread_id
            )
        return [(str(row[0]), str(row[1])) for row in rows]

    async def _take_paused(self, thread_id: str, trace_id: str) -> str | None:
        # DELETE ... RETURNING: the row lock makes a racing second delete find nothing.
        rows = await self._db.fetch(
            f"DELETE FROM {self._q}.paused_runs WHERE thread_id = $1 AND trace_id = $2 "
            "RETURNING body",
            thread_id,
            trace_id,
            thread_id=thread_id,
        )
        return str(rows[0][0]) if rows else None

    # -- protocol tasks ---------------------------------------------------------------------

    async def _write_task(self, row: TaskRow) -> None:
        await self._db.execute(
            f"INSERT INTO {self._q}.a2a_tasks (task_id, thread_id, owner, saved, body) "
            f"VALUES ($1, $2, $3, nextval('{self._q}.a2a_tasks_saved'), $4::text::json) "
            "ON CONFLICT (task_id) DO UPDATE SET thread_id = excluded.thread_id, "
            "saved = excluded.saved, body = excluded.body",
            row.task_id,
            row.thread_id,
            row.owner,
            row.body,
            thread_id=row.thread_id,
        )

    async def _read_task(self, task_id: str) -> TaskRow | None:
        rows = await self._db.fetch(
            f"SELECT task_id, thread_id, owner, body::text FROM {self._q}.a2a_tasks "
            "WHERE task_id = $1",
            task_id,
        )
        return TaskRow(*map(str, rows[0])) if rows else None

    async def _read_tasks(self, owner: str | None, thread_id: str | None) -> list[TaskRow]:
        rows = await self._db.fetch(
            f"SELECT task_id, thread_id, owner, body::text FROM {self._q}.a2a_tasks "
            "WHERE ($1::text IS NULL OR owner = $1) AND ($2::text IS NULL OR thread_id = $2) "
            "ORDER BY saved DESC",
            owner,
            thread_id,
            thread_id=thread_id,
        )
        return [TaskRow(*map(str, found)) for found in rows]

    async def _delete_task(self, task_id: str) -> None:
        await self._db.execute(f"DELETE FROM {self._q}.a2a_tasks WHERE task_id = $1", task_id)

    # -- a thread's turn, lent by name --------------------------------------------------------

    async def _claim_turn(self, thread_id: str, owner: str, breaking: str) -> str | None:
        # One statement: the upsert waits for a racing claim's row; the read after it sees the
        # snapshot the statement started with, so a lease committed meanwhile reads as none
        # (None: the caller claims again).
        rows = await self._db.fetch(
            f"WITH claimed AS (INSERT INTO {self._q}.turn_leases AS t (thread_id, owner) "
            "VALUES ($1, $2) ON CONFLICT (thread_id) DO UPDATE SET owner = excluded.owner "
            "WHERE t.owner IN (excluded.owner, $3) RETURNING owner) "
            "SELECT owner FROM claimed UNION ALL "
            f"SELECT owner FROM {self._q}.turn_leases WHERE thread_id = $1 LIMIT 1",
            thread_id,
            owner,
            breaking,
            thread_id=thread_id,
        )
        return str(rows[0][0]) if rows else None

    async def _release_turn(self, thread_id: str, owner: str) -> None:
        await self._db.execute(
            f"DELETE FROM {self._q}.turn_leases WHERE thread_id = $1 AND owner = $2",
            thread_id,
            owner,
            thread_id=thread_id,
        )

    # -- closing ----------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Write the observations still queued, then close the pool and the lock and listen
        connections; safe to call twice."""
        if self._closed:
            return
        await self._flush_observations()
        self._closed = True
        tasks = [*self._background]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await close_all((self._streams, self._feed, self._locks, self._db))
