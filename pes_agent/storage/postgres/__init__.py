"""`PostgresStorage`: one PostgreSQL database shared by many worker processes.

`storage="postgresql://user:password@host:5432/db"` (needs `pip install 'pes-agent[postgres]'`);
add `?schema=NAME` to keep the tables in a schema other than `pes_agent`.

- **Pooled and async** (asyncpg; `_pool`). The schema (default `pes_agent`, configurable) is
  created on first use and recorded in `schema_version`; older schemas are migrated step by step
  (`MIGRATIONS` in `_schema`, under a transaction-scoped advisory lock so concurrent workers
  migrate once); a schema written by a newer pes-agent is refused with a `ConfigurationError`.
- **Runs on one thread are serialised across processes** by `lock_thread`: an in-process
  `asyncio.Lock` per thread, then a session-level advisory lock keyed by a 64-bit hash of
  (schema, thread id), all on one dedicated connection (`_locks`). The server drops the locks
  when the holding process dies or its connection breaks, so a crashed worker never blocks a
  thread; if the lock connection breaks while a run holds its thread, that run's `commit_turn`
  refuses to write (`StorageError`) rather than risk an interleaved turn. A query error on a
  live lock connection fails only the lock it was for. Waiting is not FIFO across processes.
  Needs session-level connections: not for a transaction-mode pooler (PgBouncer
  `pool_mode=transaction`) in front of the server.
- **Atomic, idempotent turns.** `commit_turn` writes messages, state and (with a trace id) the
  `turns` row in one statement (one round trip, one transaction), and only while the run still
  holds its thread's lock; a trace committed before is not written again. A state save with
  `expected_version` is a compare-and-set on the newest row.
- **Durability.** Turns, states and configs are committed with the server's
  `synchronous_commit` (fsync by default). Observations are written in batches as they are
  recorded, so a crashed or killed worker loses at most the batch in flight, with
  `synchronous_commit=off` for that transaction only: they are visible and safe at once, and
  only a crash of the database server itself could drop the last fraction of a second of them
  (never a turn).
- **Cross-process observations.** Every observation is followed by a `NOTIFY` (delivered when
  its insert commits); `subscribe_observations` LISTENs on a dedicated connection, open while
  anyone subscribes, and hands each subscriber, through its own bounded queue, the
  observations written by any process, filtered by type and thread (`_listen`).
- **Secrets.** The URL's password never appears in an error, a log line or `repr`.
"""

from __future__ import annotations

from pes_agent.storage.postgres._pool import DEFAULT_SCHEMA, redact_url
from pes_agent.storage.postgres._schema import MIGRATIONS, SCHEMA_VERSION
from pes_agent.storage.postgres._storage import PostgresStorage

__all__ = ["DEFAULT_SCHEMA", "MIGRATIONS", "SCHEMA_VERSION", "PostgresStorage", "redact_url"]
