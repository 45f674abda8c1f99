"""PostgresStorage specifics: connection errors, schema versions, lock loss, the NOTIFY feed."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable

import asyncpg  # type: ignore[import-untyped]
import pytest
from structlog.testing import capture_logs

from pes_agent import ConversationManager, ObservationManager, StateManager
from pes_agent.config import AgentState, ThreadConfig
from pes_agent.errors import ConfigurationError, StorageError, UsageError
from pes_agent.observing.types import Observation, ObservationType
from pes_agent.storage import ObservationFeed, PostgresStorage
from pes_agent.storage.postgres import _schema as schema_module
from pes_agent.storage.postgres import redact_url
from pes_agent.threads.messages import ConversationMessage, MessageRole

from .conftest import POSTGRES_URL, listening_sessions, require_postgres, wait_until

SECRET = "hunter2-s3cret"


def observation(
    thread_id: str, kind: ObservationType, title: str, **content: object
) -> Observation:
    return Observation(
        thread_id=thread_id, trace_id="trace", type=kind, title=title, content=dict(content)
    )


# -- URLs and connection errors (no server needed) ------------------------------------------------


@pytest.mark.parametrize(
    ("url", "safe"),
    [
        ("postgresql://app:pw@db:5432/x", "postgresql://app:***@db:5432/x"),
        ("postgresql://app@db/x", "postgresql://app@db/x"),
        ("postgres://app:p%40ss@db/x?sslmode=require", "postgres://app:***@db/x?sslmode=require"),
        ("postgresql://db/x?user=app&password=pw", "postgresql://db/x?user=app&password=%2A%2A%2A"),
        ("postgresql://app:pa/ss#w0rd@db:5432/x", "postgresql://app:***@db:5432/x"),
        ("postgresql://app:hunter2?x@db:1/x", "postgresql://app:***@db:1/x"),
        ("postgresql://app:a@b@db/x", "postgresql://app:***@db/x"),
    ],
)
def test_redact_url_masks_the_password(url: str, safe: str) -> None:
    """Passwords in the user info or a password= parameter are masked; the rest stays readable."""
    assert redact_url(url) == safe


@pytest.mark.parametrize("password", ["pa/ss#w0rd", "hunter2?x"])
async def test_password_with_url_delimiters_never_shows(password: str) -> None:
    """A password holding '/', '#' or '?' stays out of repr and connection errors."""
    storage = PostgresStorage(f"postgresql://postgres:{password}@127.0.0.1:1/test")
    assert password not in repr(storage)
    with pytest.raises((StorageError, ConfigurationError)) as caught:
        await storage.get_messages("t")
    assert password not in str(caught.value)
    await storage.aclose()


async def test_unreachable_server_is_a_clear_error_without_the_password() -> None:
    """Nothing listening on the port: a StorageError naming the URL, with the password masked."""
    storage = PostgresStorage(f"postgresql://postgres:{SECRET}@127.0.0.1:1/test")
    with pytest.raises(
        StorageError,
        match=r"cannot reach PostgreSQL at postgresql://postgres:\*\*\*@127\.0\.0\.1:1/test",
    ) as caught:
        await storage.get_messages("t")
    assert SECRET not in str(caught.value)
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__
    await storage.aclose()


def test_schema_can_be_given_in_the_url() -> None:
    """?schema=NAME picks the schema and is not passed on to the server; the default is
    pes_agent."""
    storage = PostgresStorage("postgresql://app:pw@db/x?sslmode=disable&schema=tenant_1")
    assert storage.schema == "tenant_1"
    assert storage.url == "postgresql://app:***@db/x?sslmode=disable"
    assert PostgresStorage("postgresql://db/x").schema == "pes_agent"
    with pytest.raises(UsageError, match="schema is given twice"):
        PostgresStorage("postgresql://db/x?schema=a", schema="b")


def test_invalid_schema_name_is_a_usage_error() -> None:
    """The schema must be a plain lower-case identifier (it is spliced into SQL)."""
    with pytest.raises(UsageError, match="identifier"):
        PostgresStorage(POSTGRES_URL, schema='x"; DROP TABLE y; --')


def test_missing_asyncpg_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without asyncpg, creating a PostgresStorage says to install the postgres extra."""
    monkeypatch.setitem(sys.modules, "asyncpg", None)
    with pytest.raises(ConfigurationError, match=r"pip install 'pes-agent\[postgres\]'"):
        PostgresStorage(POSTGRES_URL)


def test_postgres_storage_is_an_observation_feed() -> None:
    """PostgresStorage satisfies the optional ObservationFeed protocol."""
    assert isinstance(PostgresStorage(POSTGRES_URL), ObservationFeed)


# -- against the server ---------------------------------------------------------------------------


@pytest.mark.postgres
async def test_unknown_user_is_a_configuration_error_without_the_password() -> None:
    """Wrong credentials: a ConfigurationError saying to check them, with the password masked."""
    require_postgres()
    storage = PostgresStorage(f"postgresql://no_such_user:{SECRET}@127.0.0.1:5432/test")
    with pytest.raises(ConfigurationError, match="check the user, password") as caught:
        await storage.list_threads()
    assert SECRET not in str(caught.value)
    assert "no_such_user:***@" in str(caught.value)
    await storage.aclose()


@pytest.mark.postgres
async def test_unknown_database_is_a_configuration_error() -> None:
    """A database that does not exist is named in a ConfigurationError."""
    require_postgres()
    storage = PostgresStorage(f"postgresql://postgres:{SECRET}@127.0.0.1:5432/no_such_db")
    with pytest.raises(ConfigurationError, match="no_such_db") as caught:
        await storage.list_threads()
    assert SECRET not in str(caught.value)
    await storage.aclose()


@pytest.mark.postgres
async def test_newer_schema_version_is_a_clear_error(pg_schema: str) -> None:
    """A schema written by a newer pes-agent is refused, naming both versions."""
    async with PostgresStorage(POSTGRES_URL, schema=pg_schema) as storage:
        await storage.list_threads()
    conn = await asyncpg.connect(POSTGRES_URL)
    await conn.execute(f'UPDATE "{pg_schema}".schema_version SET version = 42')
    await conn.close()

    storage = PostgresStorage(POSTGRES_URL, schema=pg_schema)
    newer = rf"schema version 42, newer than the {schema_module.SCHEMA_VERSION}"
    with pytest.raises(ConfigurationError, match=newer):
        await storage.get_messages("t")
    await storage.aclose()


@pytest.mark.postgres
async def test_older_schema_is_migrated_step_by_step(
    pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A schema at the current version is upgraded by a later migration step and keeps its
    data."""
    async with PostgresStorage(POSTGRES_URL, schema=pg_schema) as storage:
        await storage.set_agent_state("t", AgentState(data={"kept": True}))
    current = schema_module.SCHEMA_VERSION
    monkeypatch.setattr(
        schema_module,
        "MIGRATIONS",
        {**schema_module.MIGRATIONS, current + 1: ("CREATE TABLE {s}.extra_next (x integer)",)},
    )
    monkeypatch.setattr(schema_module, "SCHEMA_VERSION", current + 1)
    async with PostgresStorage(POSTGRES_URL, schema=pg_schema) as storage:
        assert await storage.get_agent_state("t") == AgentState(data={"kept": True}, version=1)
    conn = await asyncpg.connect(POSTGRES_URL)
    try:
        version = await conn.fetchval(f'SELECT version FROM "{pg_schema}".schema_version')
        assert version == current + 1
        assert await conn.fetchval("SELECT to_regclass($1)", f"{pg_schema}.extra_next")
    finally:
        await conn.close()


@pytest.mark.postgres
async def test_a_version_1_schema_is_migrated_and_its_turns_become_idempotent(
    pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A schema written before turns were recorded by trace id is migrated on first use, keeps
    its state, and then commits a trace once."""

    def user(content: str) -> ConversationMessage:
        return ConversationMessage(thread_id="t", role=MessageRole.USER, content=content)

    with monkeypatch.context() as old:
        old.setattr(schema_module, "MIGRATIONS", {1: schema_module.MIGRATIONS[1]})
        old.setattr(schema_module, "SCHEMA_VERSION", 1)
        async with PostgresStorage(POSTGRES_URL, schema=pg_schema) as storage:
            await storage.set_agent_state("t", AgentState(data={"n": 1}))
    async with PostgresStorage(POSTGRES_URL, schema=pg_schema) as storage:
        assert await storage.get_agent_state("t") == AgentState(data={"n": 1}, version=1)
        for _ in range(2):
            saved = await storage.commit_turn(
                "t", [user("once")], AgentState(data={"n": 2}), trace_id="r"
            )
            assert saved == AgentState(data={"n": 2}, version=2)
        assert [m.content for m in await storage.get_messages("t")] == ["once"]


@pytest.mark.postgres
async def test_concurrent_first_use_creates_the_schema_once(pg_schema: str) -> None:
    """Several stores starting at once on an empty schema all come up working."""
    stores = [PostgresStorage(POSTGRES_URL, schema=pg_schema) for _ in range(4)]
    try:
        await asyncio.gather(
            *(s.set_agent_state(f"t{i}", AgentState()) for i, s in enumerate(stores))
        )
        assert await stores[0].list_threads() == ["t0", "t1", "t2", "t3"]
    finally:
        for store in stores:
            await store.aclose()


@pytest.mark.postgres
async def test_commit_refuses_to_write_after_the_thread_lock_was_lost(pg_schema: str) -> None:
    """If the server drops the lock's session mid-run, the run's commit_turn saves nothing."""
    async with PostgresStorage(POSTGRES_URL, schema=pg_schema) as storage:
        admin = await asyncpg.connect(POSTGRES_URL)
        try:
            async with storage.lock_thread("t"):
                pid = storage._locks.connection.get_server_pid()
                await admin.execute("SELECT pg_terminate_backend($1)", pid)
                with pytest.raises(StorageError, match="lock on thread 't' was lost"):
                    await storage.commit_turn(
                        "t",
                        [ConversationMessage(thread_id="t", role=MessageRole.USER, content="x")],
                        AgentState(),
                    )
        finally:
            await admin.close()
        assert await storage.get_messages("t") == []
        # The next run reconnects and works.
        async with asyncio.timeout(30), storage.lock_thread("t"):
            await storage.commit_turn("t", [], AgentState())
        assert (await storage.get_agent_state("t")) == AgentState(version=1)


@pytest.mark.postgres
async def test_feed_delivers_observations_with_type_and_thread_filters(pg_schema: str) -> None:
    """Subscribers get every committed observation that passes their type and thread filters,
    large ones included, in order, until they unsubscribe."""
    writer = PostgresStorage(POSTGRES_URL, schema=pg_schema)
    reader = PostgresStorage(POSTGRES_URL, schema=pg_schema)
    everything: list[str] = []
    plans_of_a: list[str] = []
    other_origin: list[str] = []
    try:
        stop_all = await reader.subscribe_observations(lambda o: everything.append(o.title))

        async def collect(item: Observation) -> None:
            plans_of_a.append(item.title)

        await reader.subscribe_observations(collect, types=[ObservationType.PLAN], thread_id="a")
        await writer.subscribe_observations(
            lambda o: other_origin.append(o.title), include_own=False
        )
        await writer.add_observation(observation("a", ObservationType.PLAN, "a-plan"))
        await writer.add_observation(observation("a", ObservationType.INTENT, "a-intent"))
        await writer.add_observation(observation("b", ObservationType.PLAN, "b-plan"))
        big = observation("a", ObservationType.PLAN, "a-big", blob="x" * 20_000)
        await writer.add_observation(big)
        # Each store writes its observations in the background; reading waits for the writer,
        # so the reader's observation below is committed after the writer's.
        await writer.get_observations("a")
        await reader.add_observation(observation("b", ObservationType.ERROR, "from-reader"))

        await wait_until(lambda: len(everything) == 5, "five observations on the feed")
        assert everything == ["a-plan", "a-intent", "b-plan", "a-big", "from-reader"]
        await wait_until(lambda: len(plans_of_a) == 2, "two plans of thread a")
        assert plans_of_a == ["a-plan", "a-big"]
        await wait_until(lambda: other_origin == ["from-reader"], "the other store's observation")

        stop_all()
        await writer.add_observation(observation("a", ObservationType.PLAN, "after-stop"))
        await wait_until(lambda: len(plans_of_a) == 3, "the plan after unsubscribing")
        assert everything == ["a-plan", "a-intent", "b-plan", "a-big", "from-reader"]
    finally:
        await writer.aclose()
        await reader.aclose()


@pytest.mark.postgres
async def test_a_failing_subscriber_does_not_stop_the_feed(pg_schema: str) -> None:
    """A subscriber that raises is logged; the others, and later observations, still arrive."""
    async with PostgresStorage(POSTGRES_URL, schema=pg_schema) as storage:
        seen: list[str] = []

        def broken(item: Observation) -> None:
            raise RuntimeError("subscriber bug")

        await storage.subscribe_observations(broken)
        await storage.subscribe_observations(lambda o: seen.append(o.title))
        await storage.add_observation(observation("t", ObservationType.PLAN, "one"))
        await storage.add_observation(observation("t", ObservationType.PLAN, "two"))
        await wait_until(lambda: seen == ["one", "two"], "both observations")


@pytest.mark.postgres
async def test_damaged_rows_are_storage_errors_naming_store_thread_and_table(
    pg_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A config or state another program damaged reads as a StorageError naming the store, the
    thread and the table, never a raw pydantic error; a listing leaves a damaged row out with
    a warning that names them."""
    async with PostgresStorage(POSTGRES_URL, schema=pg_schema) as storage:
        state = StateManager(storage)
        conversation = ConversationManager(storage)
        observations = ObservationManager(storage)
        await state.set_thread_config("t", ThreadConfig(history_limit=2))
        await state.set_agent_state("t", AgentState(data={"n": 1}))
        await conversation.add_messages(
            "t", [ConversationMessage(thread_id="t", role=MessageRole.USER, content="hi")]
        )
        await observations.record(observation("t", ObservationType.PLAN, "p"))
        await observations.get_observations("t")  # written before the rows are tampered with
        admin = await asyncpg.connect(POSTGRES_URL)
        try:
            for table, column, value in [
                ("thread_configs", "config", '"just a string"'),
                ("agent_states", "data", "[1, 2]"),
                ("messages", "body", '{"role": "nobody"}'),
                ("observations", "body", "{}"),
            ]:
                await admin.execute(f'UPDATE "{pg_schema}".{table} SET {column} = $1', value)
        finally:
            await admin.close()

        reads = {
            "thread_configs": lambda: state.get_thread_config("t"),
            "agent_states": lambda: state.get_agent_state("t"),
        }
        for table, read in reads.items():
            with pytest.raises(StorageError) as caught:
                await read()
            text = str(caught.value)
            assert repr(storage) in text
            assert f"table {table!r}" in text
            assert "thread 't'" in text
            assert caught.value.thread_id == "t"
        assert await conversation.get_messages("t") == []
        assert await observations.get_observations("t") == []
        for table in ("messages", "observations"):
            [warning] = [
                r.getMessage() for r in caplog.records if f"table {table!r}" in r.getMessage()
            ]
            assert "storage_row_skipped" in warning
            assert repr(storage) in warning
            assert "thread 't'" in warning


@pytest.mark.postgres
async def test_a_slow_subscriber_keeps_only_the_newest_observations(pg_schema: str) -> None:
    """A subscriber that cannot keep up has a bounded queue: the oldest waiting observations
    are dropped, counted and logged, and it then gets the newest ones."""
    from structlog.testing import capture_logs

    async with PostgresStorage(POSTGRES_URL, schema=pg_schema, feed_queue_size=4) as storage:
        release = asyncio.Event()
        slow: list[str] = []
        fast: list[str] = []

        async def stuck(item: Observation) -> None:
            await release.wait()
            slow.append(item.title)

        await storage.subscribe_observations(stuck)
        await storage.subscribe_observations(lambda o: fast.append(o.title))
        with capture_logs() as logs:
            for i in range(20):
                await storage.add_observation(observation("t", ObservationType.PLAN, f"o{i}"))
            await wait_until(lambda: len(fast) == 20, "the fast subscriber's 20 observations")
            release.set()
            await wait_until(lambda: slow[-1:] == ["o19"], "the slow subscriber's newest")
        assert fast == [f"o{i}" for i in range(20)]
        # The one it was holding when its queue filled up, then the four newest.
        assert slow == ["o0", "o16", "o17", "o18", "o19"]
        drops = [e for e in logs if e["event"] == "observation_feed_dropped"]
        assert [(e["dropped"], e["dropped_total"]) for e in drops] == [(15, 15)]


@pytest.mark.postgres
async def test_the_listen_connection_is_released_when_nobody_listens(pg_schema: str) -> None:
    """After the last subscriber leaves, the LISTEN connection closes; a new subscriber opens
    one again and gets observations."""
    async with PostgresStorage(POSTGRES_URL, schema=pg_schema) as storage:
        first = await storage.subscribe_observations(lambda o: None)
        second = await storage.subscribe_observations(lambda o: None)
        assert await listening_sessions(pg_schema) == 1
        first()
        await asyncio.sleep(0.1)
        assert await listening_sessions(pg_schema) == 1
        second()
        second()  # twice is harmless
        await wait_until(
            lambda: _is_zero(listening_sessions(pg_schema)), "the LISTEN connection to close"
        )
        seen: list[str] = []
        await storage.subscribe_observations(lambda o: seen.append(o.title))
        await storage.add_observation(observation("t", ObservationType.PLAN, "again"))
        await wait_until(lambda: seen == ["again"], "the observation after resubscribing")


async def _is_zero(count: Awaitable[int]) -> bool:
    return await count == 0


@pytest.mark.postgres
async def test_listen_of_one_agent_gets_the_runs_of_another_on_the_same_storage(
    pg_schema: str,
) -> None:
    """Two agents sharing one PostgresStorage object: listen() on one delivers what the other
    records, and its own observations exactly once."""
    async with PostgresStorage(POSTGRES_URL, schema=pg_schema) as storage:
        watcher = ObservationManager(storage)
        worker = ObservationManager(storage)
        seen: list[str] = []
        await watcher.listen(lambda o: seen.append(o.title), types=[ObservationType.PLAN])
        await worker.record(observation("t", ObservationType.PLAN, "by-the-other-agent"))
        await watcher.record(observation("t", ObservationType.PLAN, "by-itself"))
        await wait_until(lambda: len(seen) >= 2, "both observations")
        await asyncio.sleep(0.2)  # a duplicate of its own would arrive by now
        assert sorted(seen) == ["by-itself", "by-the-other-agent"]


@pytest.mark.postgres
async def test_a_thread_moving_between_processes_keeps_its_order_on_the_feed(
    pg_schema: str,
) -> None:
    """A process listening to a thread gets its own observations at once and another
    process's when their NOTIFY comes: a run that takes the thread after a run elsewhere
    waits until the feed has delivered that run's observations, so a slow subscriber still
    gets the thread's observations in the order they were stored."""
    here = PostgresStorage(POSTGRES_URL, schema=pg_schema)
    elsewhere = PostgresStorage(POSTGRES_URL, schema=pg_schema)
    try:
        manager = ObservationManager(here)
        seen: list[str] = []

        async def slow(item: Observation) -> None:
            seen.append(item.title)
            await asyncio.sleep(0.03)  # a UI feed that takes its time

        await manager.listen(slow, thread_id="t")
        for round_ in range(3):
            async with elsewhere.lock_thread("t"):
                for step in range(4):
                    title = f"elsewhere {round_}.{step}"
                    await elsewhere.add_observation(observation("t", ObservationType.PLAN, title))
            async with here.lock_thread("t"):
                await manager.record(observation("t", ObservationType.PLAN, f"here {round_}"))
        await wait_until(lambda: len(seen) == 15, "every observation on the feed")
        stored = [o.title for o in await here.get_observations("t")]
        assert stored == [
            title
            for round_ in range(3)
            for title in [*(f"elsewhere {round_}.{step}" for step in range(4)), f"here {round_}"]
        ]
        assert seen == stored
    finally:
        await here.aclose()
        await elsewhere.aclose()


@pytest.mark.postgres
async def test_a_feed_that_cannot_catch_up_does_not_hold_the_thread(
    pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A subscriber stuck in its callback holds up a run taking a thread only for a bounded
    wait, with a warning; the run goes on and its observation is stored."""
    from pes_agent.storage.postgres import _listen

    monkeypatch.setattr(_listen, "_CATCH_UP_S", 0.2)
    async with PostgresStorage(POSTGRES_URL, schema=pg_schema) as storage:
        other = PostgresStorage(POSTGRES_URL, schema=pg_schema)
        stuck = asyncio.Event()
        try:

            async def never_returns(item: Observation) -> None:
                await stuck.wait()

            await storage.subscribe_observations(never_returns)
            await other.add_observation(observation("t", ObservationType.PLAN, "first"))
            await other.get_observations("t")  # written
            with capture_logs() as logs:
                async with storage.lock_thread("t"):
                    await storage.add_observation(observation("t", ObservationType.PLAN, "next"))
            assert [o.title for o in await storage.get_observations("t")] == ["first", "next"]
            assert any(entry["event"] == "observation_feed_behind" for entry in logs)
        finally:
            stuck.set()
            await other.aclose()


@pytest.mark.postgres
async def test_an_error_on_the_lock_connection_keeps_the_other_locks(
    pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A query error while taking one thread's lock fails that run only: the lock another run
    holds stays held, and its turn is saved."""
    async with PostgresStorage(POSTGRES_URL, schema=pg_schema) as storage:
        other = PostgresStorage(POSTGRES_URL, schema=pg_schema)
        try:
            async with storage.lock_thread("held"):
                conn = storage._locks.connection
                real_fetchval = asyncpg.Connection.fetchval

                async def fails_once(self: object, query: str, *args: object) -> object:
                    if self is conn and "pg_try_advisory_lock" in query:
                        monkeypatch.setattr(asyncpg.Connection, "fetchval", real_fetchval)
                        raise asyncpg.QueryCanceledError("canceling statement due to user request")
                    return await real_fetchval(self, query, *args)

                monkeypatch.setattr(asyncpg.Connection, "fetchval", fails_once)
                with pytest.raises(StorageError):
                    async with storage.lock_thread("unlucky"):
                        pass
                # Still ours: another process cannot take it, and the turn is saved.
                with pytest.raises(TimeoutError):
                    async with asyncio.timeout(0.3), other.lock_thread("held"):
                        pass
                await storage.commit_turn(
                    "held",
                    [ConversationMessage(thread_id="held", role=MessageRole.USER, content="x")],
                    AgentState(),
                )
            async with asyncio.timeout(30), storage.lock_thread("unlucky"):
                pass
        finally:
            await other.aclose()
        assert [m.content for m in await storage.get_messages("held")] == ["x"]


@pytest.mark.postgres
async def test_a_damaged_row_announced_to_the_feed_is_left_out_with_one_warning(
    pg_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An observation row the feed fetches (too big for its NOTIFY) that cannot be read is left
    out with one warning naming the table and the row; later observations still arrive."""
    async with PostgresStorage(POSTGRES_URL, schema=pg_schema) as storage:
        seen: list[str] = []
        await storage.subscribe_observations(lambda o: seen.append(o.title))
        conn = await asyncpg.connect(POSTGRES_URL)
        try:
            seq = await conn.fetchval(
                f'INSERT INTO "{pg_schema}".observations (id, thread_id, trace_id, type, body) '
                "VALUES ('bad', 't', 'r', 'PLAN', '{\"title\": 5}') RETURNING seq"
            )
            channel = storage._channel
            await conn.execute(
                "SELECT pg_notify($1, $2)", channel, f'{{"origin": "other", "seq": {seq}}}'
            )
        finally:
            await conn.close()
        await storage.add_observation(observation("t", ObservationType.PLAN, "after"))
        await wait_until(lambda: seen == ["after"], "the observation after the damaged one")
    records = [r for r in caplog.records if "observation" in r.getMessage()]
    assert [r.levelname for r in records] == ["WARNING"]
    assert "storage_row_skipped" in records[0].getMessage()
    assert f"seq={seq}" in records[0].getMessage()
    assert "table=observations" in records[0].getMessage()
