"""The PostgreSQL tables, created on first use and migrated step by step.

`migrate` runs under a transaction-scoped advisory lock, so workers starting together migrate
once; a schema written by a newer pes-agent is refused with a `ConfigurationError`.
"""

from __future__ import annotations

from typing import Any

from pes_agent.errors import ConfigurationError
from pes_agent.storage.postgres._locks import lock_key
from pes_agent.storage.postgres._pool import Connector

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "migrate"]

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
    # The turns committed under a trace id, so that committing one again writes nothing.
    2: (
        """CREATE TABLE {s}.turns (
            thread_id text NOT NULL,
            trace_id text NOT NULL,
            state json,
            version bigint,
            PRIMARY KEY (thread_id, trace_id))""",
    ),
    # Runs waiting for a person's approval (`AgentCore.resume`), one row each.
    3: (
        """CREATE TABLE {s}.paused_runs (
            seq bigserial PRIMARY KEY,
            thread_id text NOT NULL,
            trace_id text NOT NULL,
            body json NOT NULL,
            UNIQUE (thread_id, trace_id))""",
    ),
    # Who holds each thread's turn (`claim_turn`: a durable engine's lease), while a run does.
    4: ("CREATE TABLE {s}.turn_leases (thread_id text PRIMARY KEY, owner text NOT NULL)",),
    # Protocol tasks (`TaskRecords`: the A2A server's), `saved` ordering them by last save.
    5: (
        "CREATE SEQUENCE {s}.a2a_tasks_saved",
        """CREATE TABLE {s}.a2a_tasks (
            task_id text PRIMARY KEY,
            thread_id text NOT NULL,
            owner text NOT NULL,
            saved bigint NOT NULL,
            body json NOT NULL)""",
        "CREATE INDEX a2a_tasks_by_thread ON {s}.a2a_tasks (thread_id)",
    ),
}
SCHEMA_VERSION = max(MIGRATIONS)


async def migrate(pool: Any, connector: Connector, schema: str) -> None:
    """Create the schema's tables or upgrade them to `SCHEMA_VERSION`, refusing a newer one."""
    q = f'"{schema}"'
    target = SCHEMA_VERSION
    try:
        async with pool.acquire() as conn:
            if await conn.fetchval("SELECT to_regclass($1)", f"{q}.schema_version"):
                current = await conn.fetchval(f"SELECT max(version) FROM {q}.schema_version")
                if current == target:
                    return
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock($1)", lock_key(schema, "\0schema"))
                await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {q}")
                await conn.execute(
                    f"CREATE TABLE IF NOT EXISTS {q}.schema_version (version integer NOT NULL)"
                )
                current = await conn.fetchval(f"SELECT max(version) FROM {q}.schema_version") or 0
                if current > target:
                    raise ConfigurationError(
                        f"the PostgreSQL schema {schema!r} at {connector.safe_url} has schema "
                        f"version {current}, newer than the {target} this pes-agent "
                        "understands: upgrade pes-agent to use it"
                    )
                for version in range(current + 1, target + 1):
                    for statement in MIGRATIONS[version]:
                        await conn.execute(statement.format(s=q))
                await conn.execute(f"DELETE FROM {q}.schema_version")
                await conn.execute(f"INSERT INTO {q}.schema_version (version) VALUES ($1)", target)
    except connector.asyncpg.InsufficientPrivilegeError as exc:
        raise ConfigurationError(
            f"the PostgreSQL user at {connector.safe_url} may not create the schema "
            f"{schema!r} ({connector.scrub(str(exc))}): grant it CREATE on the database "
            "or create the schema for it"
        ) from None
    except connector.db_errors as exc:
        raise connector.query_error(exc) from None
