"""The Storage contract, run against every backend (memory, SQLite, PostgreSQL)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Awaitable, Callable
from contextlib import closing
from datetime import UTC, datetime
from typing import Any

import pytest

from pes_agent import AgentProps, PausedRun, PendingApproval
from pes_agent.config import AgentState, ProviderConfig, ThreadConfig
from pes_agent.errors import (
    ConfigurationError,
    StateConflictError,
    StorageError,
    UsageError,
)
from pes_agent.observing.types import Observation, ObservationType
from pes_agent.planning.plan import ParsedToolCall, PlanningOutput
from pes_agent.storage import (
    InMemoryStorage,
    PostgresStorage,
    SQLiteStorage,
    Storage,
    TaskRecord,
    TaskRecords,
    TurnLeases,
)
from pes_agent.storage._common import ObservationRow, TaskRow, Turn
from pes_agent.threads.messages import ConversationMessage, MessageRole
from pes_agent.tools.base import ToolResult

from .conftest import DURABLE_BACKENDS, POSTGRES_URL, StorageFactory


def user(thread_id: str, content: str, **metadata: object) -> ConversationMessage:
    return ConversationMessage(
        thread_id=thread_id, role=MessageRole.USER, content=content, metadata=metadata
    )


def ai(thread_id: str, content: str) -> ConversationMessage:
    return ConversationMessage(thread_id=thread_id, role=MessageRole.AI, content=content)


def observation(
    thread_id: str, kind: ObservationType, title: str, *, trace_id: str = "trace-1"
) -> Observation:
    return Observation(
        thread_id=thread_id, trace_id=trace_id, type=kind, title=title, content={"title": title}
    )


# -- shape -------------------------------------------------------------------------------------


async def test_backend_satisfies_the_protocol(storage: Storage) -> None:
    """Every backend is a runtime-checkable Storage."""
    assert isinstance(storage, Storage)


async def test_unknown_thread_reads_as_empty(storage: Storage) -> None:
    """A thread never written has no config, no state, no messages and no observations."""
    assert await storage.get_thread_config("nobody") is None
    assert await storage.get_agent_state("nobody") is None
    assert await storage.get_messages("nobody") == []
    assert await storage.get_observations("nobody") == []
    assert await storage.list_threads() == []


async def test_aclose_twice_is_harmless(storage: Storage) -> None:
    """Closing a store a second time does nothing."""
    await storage.list_threads()
    await storage.aclose()
    await storage.aclose()


# -- thread config and state --------------------------------------------------------------------


async def test_thread_config_round_trips(storage: Storage) -> None:
    """A saved ThreadConfig, provider config included, reads back equal and replaces the last."""
    first = ThreadConfig(enabled_tools=["a"], history_limit=3)
    await storage.set_thread_config("t", first)
    assert await storage.get_thread_config("t") == first
    second = ThreadConfig(
        provider_config=ProviderConfig("openai", "gpt-4o-mini", timeout_s=5, options={"x": 1}),
        enabled_tools=[],
        system_prompt="be brief",
    )
    await storage.set_thread_config("t", second)
    assert await storage.get_thread_config("t") == second


async def test_thread_config_with_an_api_key_is_refused(storage: Storage) -> None:
    """Storage never saves a secret: a thread config carrying an API key is a ConfigurationError."""
    config = ThreadConfig(provider_config=ProviderConfig("openai", "m", api_key="sk-secret"))
    with pytest.raises(ConfigurationError, match="api_key") as caught:
        await storage.set_thread_config("t", config)
    assert "sk-secret" not in str(caught.value)
    assert await storage.get_thread_config("t") is None


async def test_set_agent_state_bumps_the_stored_version(storage: Storage) -> None:
    """Each save is the next version, counted from what is stored, whatever the caller passed."""
    assert await storage.set_agent_state("t", AgentState(data={"n": 1})) == AgentState(
        data={"n": 1}, version=1
    )
    saved = await storage.set_agent_state("t", AgentState(data={"n": 2}, version=1))
    assert saved.version == 2
    stale = await storage.set_agent_state("t", AgentState(data={"n": 3}, version=0))
    assert stale.version == 3
    assert await storage.get_agent_state("t") == AgentState(data={"n": 3}, version=3)


async def test_agent_state_that_is_not_json_is_refused(storage: Storage) -> None:
    """State data must be JSON: anything else is a StorageError and the old state stays."""
    await storage.set_agent_state("t", AgentState(data={"ok": True}))
    with pytest.raises(StorageError, match="JSON"):
        await storage.set_agent_state("t", AgentState(data={"bad": object()}))
    assert await storage.get_agent_state("t") == AgentState(data={"ok": True}, version=1)


# -- messages -------------------------------------------------------------------------------------


async def test_messages_round_trip_every_field(storage: Storage) -> None:
    """A message reads back with its id, role, content, timestamp and metadata intact."""
    sent = ConversationMessage(
        thread_id="t",
        role=MessageRole.TOOL,
        content="ünïcode ✓",
        timestamp=datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC),
        metadata={"nested": {"list": [1, 2.5, None, "x"]}},
    )
    await storage.add_messages("t", [sent])
    assert await storage.get_messages("t") == [sent]


async def test_get_messages_returns_the_newest_n_oldest_first(storage: Storage) -> None:
    """limit=N gives the last N messages in the order they were added."""
    await storage.add_messages("t", [user("t", str(i)) for i in range(5)])
    await storage.add_messages("t", [user("t", str(i)) for i in range(5, 8)])
    assert [m.content for m in await storage.get_messages("t")] == [str(i) for i in range(8)]
    assert [m.content for m in await storage.get_messages("t", limit=3)] == ["5", "6", "7"]
    assert [m.content for m in await storage.get_messages("t", limit=50)] == [
        str(i) for i in range(8)
    ]
    assert await storage.get_messages("t", limit=0) == []
    assert len(await storage.get_messages("t", limit=10**20)) == 8


async def test_negative_message_limit_is_a_usage_error(storage: Storage) -> None:
    """limit=-1 is refused with a message saying what is accepted."""
    with pytest.raises(UsageError, match=">= 0"):
        await storage.get_messages("t", limit=-1)


async def test_message_of_another_thread_is_a_usage_error(storage: Storage) -> None:
    """Saving a message under a thread other than its own is refused, and nothing is saved."""
    with pytest.raises(UsageError, match="thread_id='t'"):
        await storage.add_messages("t", [user("t", "ok"), user("other", "wrong")])
    assert await storage.get_messages("t") == []


async def test_commit_turn_saves_messages_and_state_together(storage: Storage) -> None:
    """commit_turn appends the turn's messages and saves its state as the next version."""
    saved = await storage.commit_turn(
        "t", [user("t", "hi"), ai("t", "hello")], AgentState(data={"turns": 1})
    )
    assert saved == AgentState(data={"turns": 1}, version=1)
    assert [m.content for m in await storage.get_messages("t")] == ["hi", "hello"]
    assert await storage.get_agent_state("t") == saved
    assert await storage.commit_turn("t", [user("t", "again")], None) is None
    assert (await storage.get_agent_state("t")) == saved


async def test_commit_turn_with_an_unserialisable_message_saves_nothing(storage: Storage) -> None:
    """A message that cannot be saved fails the whole turn: no message, no state change."""
    await storage.commit_turn("t", [user("t", "before")], AgentState(data={"n": 0}))
    with pytest.raises(StorageError, match="JSON"):
        await storage.commit_turn(
            "t",
            [user("t", "fine"), user("t", "broken", handle=object())],
            AgentState(data={"n": 1}),
        )
    assert [m.content for m in await storage.get_messages("t")] == ["before"]
    assert await storage.get_agent_state("t") == AgentState(data={"n": 0}, version=1)


async def test_commit_turn_failing_in_the_database_saves_nothing(storage: Storage) -> None:
    """A turn whose second message clashes with a saved one rolls back its first message and
    its state too."""
    first = user("t", "first")
    await storage.commit_turn("t", [first], AgentState(data={"n": 0}))
    with pytest.raises(StorageError, match="already saved"):
        await storage.commit_turn("t", [user("t", "new"), first], AgentState(data={"n": 1}))
    assert [m.content for m in await storage.get_messages("t")] == ["first"]
    assert await storage.get_agent_state("t") == AgentState(data={"n": 0}, version=1)


async def test_commit_turn_with_unserialisable_state_saves_nothing(storage: Storage) -> None:
    """State that cannot be saved fails the turn before any message is written."""
    with pytest.raises(StorageError):
        await storage.commit_turn("t", [user("t", "x")], AgentState(data={"f": object()}))
    assert await storage.get_messages("t") == []
    assert await storage.get_agent_state("t") is None


# -- observations --------------------------------------------------------------------------------


async def test_observations_keep_their_order_and_filter_by_type_and_trace(
    storage: Storage,
) -> None:
    """Observations come back in recording order, filtered by types and/or trace id."""
    kinds = [ObservationType.INTENT, ObservationType.PLAN, ObservationType.TOOL_CALL]
    recorded = [
        observation("t", kinds[i % 3], f"o{i}", trace_id=f"trace-{i % 2}") for i in range(9)
    ]
    for item in recorded:
        await storage.add_observation(item)
    await storage.add_observation(observation("other", ObservationType.PLAN, "elsewhere"))

    assert await storage.get_observations("t") == recorded
    plans = await storage.get_observations("t", types=[ObservationType.PLAN])
    assert [o.title for o in plans] == ["o1", "o4", "o7"]
    trace0 = await storage.get_observations("t", trace_id="trace-0")
    assert [o.title for o in trace0] == ["o0", "o2", "o4", "o6", "o8"]
    both = await storage.get_observations(
        "t", types=[ObservationType.PLAN, ObservationType.INTENT], trace_id="trace-1"
    )
    assert [o.title for o in both] == ["o1", "o3", "o7"]
    assert await storage.get_observations("t", types=[]) == []


async def test_an_observation_the_store_refuses_loses_no_other_observation(
    storage: Storage,
) -> None:
    """A thread id PostgreSQL cannot store (a NUL) costs at most that one observation."""
    for i in range(3):
        await storage.add_observation(observation("good", ObservationType.PLAN, f"o{i}"))
    await storage.add_observation(observation("bad\x00id", ObservationType.PLAN, "bad"))
    for i in range(3, 6):
        await storage.add_observation(observation("good", ObservationType.PLAN, f"o{i}"))
    kept = await storage.get_observations("good")
    assert [o.title for o in kept] == [f"o{i}" for i in range(6)]


async def test_observation_with_non_json_content_is_kept_readable(storage: Storage) -> None:
    """An observation whose content JSON cannot hold is saved with that value as its repr."""

    class Opaque:
        def __repr__(self) -> str:
            return "<Opaque 42>"

    item = Observation(
        thread_id="t",
        trace_id="x",
        type=ObservationType.TOOL_EXECUTION,
        title="tool",
        content={"output": Opaque()},
    )
    await storage.add_observation(item)
    (saved,) = await storage.get_observations("t")
    assert saved.content == {"output": "<Opaque 42>"}
    assert saved.id == item.id


# -- whole threads -------------------------------------------------------------------------------


async def test_list_threads_names_every_thread_with_data(storage: Storage) -> None:
    """A thread is listed once it has a config, a state, a message or an observation."""
    await storage.set_thread_config("c", ThreadConfig())
    await storage.set_agent_state("s", AgentState())
    await storage.add_messages("m", [user("m", "x")])
    await storage.add_observation(observation("o", ObservationType.PLAN, "p"))
    await storage.add_messages("m", [user("m", "y")])
    assert await storage.list_threads() == ["c", "m", "o", "s"]


async def test_delete_thread_removes_everything_under_it(storage: Storage) -> None:
    """Deleting a thread removes its config, state, messages and observations, and no other's."""
    for thread in ("gone", "kept"):
        await storage.set_thread_config(thread, ThreadConfig(history_limit=1))
        await storage.commit_turn(thread, [user(thread, "x")], AgentState(data={"a": 1}))
        await storage.add_observation(observation(thread, ObservationType.PLAN, "p"))
    await storage.delete_thread("gone")
    await storage.delete_thread("never-existed")

    assert await storage.list_threads() == ["kept"]
    assert await storage.get_thread_config("gone") is None
    assert await storage.get_agent_state("gone") is None
    assert await storage.get_messages("gone") == []
    assert await storage.get_observations("gone") == []
    assert len(await storage.get_messages("kept")) == 1
    assert len(await storage.get_observations("kept")) == 1
    # A deleted thread starts over.
    assert (await storage.set_agent_state("gone", AgentState())).version == 1


# -- copies --------------------------------------------------------------------------------------


async def test_returned_objects_are_copies(storage: Storage) -> None:
    """Mutating what was saved or what was read never changes what is stored."""
    config = ThreadConfig(enabled_tools=["a"])
    await storage.set_thread_config("t", config)
    assert config.enabled_tools is not None
    config.enabled_tools.append("added-after-save")
    read_config = await storage.get_thread_config("t")
    assert read_config is not None
    assert read_config.enabled_tools is not None
    read_config.enabled_tools.append("added-after-read")
    assert await storage.get_thread_config("t") == ThreadConfig(enabled_tools=["a"])

    state = AgentState(data={"items": [1]})
    returned = await storage.set_agent_state("t", state)
    state.data["items"].append(2)
    returned.data["items"].append(3)
    read_state = await storage.get_agent_state("t")
    assert read_state is not None
    read_state.data["items"].append(4)
    assert await storage.get_agent_state("t") == AgentState(data={"items": [1]}, version=1)

    message = user("t", "hi", tags=["a"])
    await storage.add_messages("t", [message])
    message.metadata["tags"].append("after-save")
    (read_message,) = await storage.get_messages("t")
    read_message.metadata["tags"].append("after-read")
    assert (await storage.get_messages("t"))[0].metadata == {"tags": ["a"]}

    item = observation("t", ObservationType.PLAN, "p")
    await storage.add_observation(item)
    item.content["title"] = "changed-after-save"
    (read_item,) = await storage.get_observations("t")
    read_item.content["title"] = "changed-after-read"
    assert (await storage.get_observations("t"))[0].content == {"title": "p"}


# -- locks ---------------------------------------------------------------------------------------


async def test_lock_thread_serialises_runs_on_one_thread(storage: Storage) -> None:
    """A second run on the same thread enters only after the first has left."""
    events: list[str] = []
    first_inside = asyncio.Event()
    second_waits = asyncio.Event()

    async def first() -> None:
        async with storage.lock_thread("t"):
            events.append("first enters")
            first_inside.set()
            await second_waits.wait()
            # Give the second run every chance to (wrongly) get in before we leave.
            await asyncio.sleep(0.05)
            events.append("first leaves")

    async def second() -> None:
        await first_inside.wait()
        events.append("second waits")
        second_waits.set()
        async with storage.lock_thread("t"):
            events.append("second enters")

    await asyncio.gather(first(), second())
    assert events == ["first enters", "second waits", "first leaves", "second enters"]


async def test_lock_thread_does_not_block_other_threads(storage: Storage) -> None:
    """While one thread is held, a run on another thread gets in and finishes."""
    events: list[str] = []
    release = asyncio.Event()
    entered = asyncio.Event()

    async def holder() -> None:
        async with storage.lock_thread("held"):
            events.append("held enters")
            entered.set()
            await release.wait()
            events.append("held leaves")

    holding = asyncio.create_task(holder())
    await entered.wait()
    async with storage.lock_thread("other"):
        events.append("other enters")
    release.set()
    await holding
    assert events == ["held enters", "other enters", "held leaves"]


async def test_locked_read_modify_write_loses_no_update(storage: Storage) -> None:
    """Concurrent runs that read, await, then write the state under the lock lose nothing."""

    async def run(n: int) -> None:
        async with storage.lock_thread("t"):
            state = await storage.get_agent_state("t") or AgentState()
            history = await storage.get_messages("t", limit=2)
            assert not history or history[-1].role is MessageRole.AI
            await asyncio.sleep(0)
            await storage.commit_turn(
                "t",
                [user("t", f"q{n}"), ai("t", f"a{n}")],
                AgentState(data={"count": state.data.get("count", 0) + 1}),
            )

    await asyncio.gather(*(run(n) for n in range(12)))
    final = await storage.get_agent_state("t")
    assert final == AgentState(data={"count": 12}, version=12)
    roles = [m.role for m in await storage.get_messages("t")]
    assert roles == [MessageRole.USER, MessageRole.AI] * 12


async def test_lock_thread_is_not_reentrant(storage: Storage) -> None:
    """Asking again for a thread the task already holds is a UsageError, not a deadlock."""
    async with storage.lock_thread("t"):
        with pytest.raises(UsageError, match="not reentrant"):
            async with storage.lock_thread("t"):
                pass


async def test_lock_is_released_when_the_run_raises(storage: Storage) -> None:
    """A run that fails inside the lock leaves the thread free for the next run."""
    with pytest.raises(RuntimeError):
        async with storage.lock_thread("t"):
            raise RuntimeError("boom")
    async with asyncio.timeout(30), storage.lock_thread("t"):
        pass


async def test_cancelled_waiter_leaves_the_lock_usable(storage: Storage) -> None:
    """A run cancelled while waiting for the thread neither gets it nor keeps it from others."""
    entered: list[str] = []
    release = asyncio.Event()
    holding = asyncio.Event()

    async def holder() -> None:
        async with storage.lock_thread("t"):
            holding.set()
            await release.wait()

    async def waiter() -> None:
        async with storage.lock_thread("t"):
            entered.append("waiter")

    held = asyncio.create_task(holder())
    await holding.wait()
    waiting = asyncio.create_task(waiter())
    await asyncio.sleep(0.02)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    release.set()
    await held
    async with asyncio.timeout(30), storage.lock_thread("t"):
        entered.append("next")
    assert entered == ["next"]


# -- durability ----------------------------------------------------------------------------------


@pytest.mark.parametrize("open_backend", DURABLE_BACKENDS, indirect=True)
async def test_data_survives_reopening(open_backend: StorageFactory) -> None:
    """What one storage object saved, a new one on the same store reads back."""
    first = open_backend()
    await first.set_thread_config("t", ThreadConfig(history_limit=4))
    await first.commit_turn("t", [user("t", "q"), ai("t", "a")], AgentState(data={"k": "v"}))
    await first.add_observation(observation("t", ObservationType.FINAL_RESPONSE, "done"))
    await first.aclose()

    second = open_backend()
    assert await second.get_thread_config("t") == ThreadConfig(history_limit=4)
    assert await second.get_agent_state("t") == AgentState(data={"k": "v"}, version=1)
    assert [m.content for m in await second.get_messages("t")] == ["q", "a"]
    assert [o.title for o in await second.get_observations("t")] == ["done"]


@pytest.mark.parametrize("open_backend", DURABLE_BACKENDS, indirect=True)
async def test_two_storage_objects_serialise_one_thread(open_backend: StorageFactory) -> None:
    """Two storage objects on one store (as two processes would be) never interleave a thread's
    runs."""
    stores = [open_backend(), open_backend()]

    async def run(store: Storage, n: int) -> None:
        async with store.lock_thread("t"):
            state = await store.get_agent_state("t") or AgentState()
            await asyncio.sleep(0.002)
            await store.commit_turn(
                "t",
                [user("t", f"q{n}"), ai("t", f"a{n}")],
                AgentState(data={"count": state.data.get("count", 0) + 1}),
            )

    await asyncio.gather(*(run(stores[n % 2], n) for n in range(10)))
    assert await stores[0].get_agent_state("t") == AgentState(data={"count": 10}, version=10)


# -- idempotent turns (trace_id) -----------------------------------------------------------------


async def test_commit_turn_of_a_trace_that_landed_is_a_no_op_returning_what_was_saved(
    storage: Storage,
) -> None:
    """A second commit_turn with the same trace_id writes nothing and returns the first save."""
    turn = [user("t", "q"), ai("t", "a")]
    first = await storage.commit_turn("t", turn, AgentState(data={"n": 1}), trace_id="run-1")
    assert first == AgentState(data={"n": 1}, version=1)
    await storage.set_agent_state("t", AgentState(data={"n": 5}))
    again = await storage.commit_turn("t", turn, AgentState(data={"n": 2}), trace_id="run-1")
    assert again == first
    assert [m.content for m in await storage.get_messages("t")] == ["q", "a"]
    assert await storage.get_agent_state("t") == AgentState(data={"n": 5}, version=2)
    # The same trace id on another thread is another turn.
    other = await storage.commit_turn("u", [user("u", "q")], None, trace_id="run-1")
    assert other is None
    assert [m.content for m in await storage.get_messages("u")] == ["q"]


async def test_commit_turn_replayed_without_state_returns_none_and_writes_nothing(
    storage: Storage,
) -> None:
    """A landed turn that saved no state replays as None, with fresh message ids ignored too."""
    assert await storage.commit_turn("t", [user("t", "q")], None, trace_id="run-1") is None
    assert await storage.commit_turn("t", [user("t", "q")], None, trace_id="run-1") is None
    assert [m.content for m in await storage.get_messages("t")] == ["q"]
    assert await storage.get_agent_state("t") is None


async def test_a_failed_commit_does_not_claim_its_trace(storage: Storage) -> None:
    """A commit that saved nothing leaves its trace_id free for the retry that does save."""
    first = user("t", "first")
    await storage.add_messages("t", [first])
    with pytest.raises(StorageError, match="already saved"):
        await storage.commit_turn("t", [user("t", "q"), first], None, trace_id="run-1")
    await storage.commit_turn("t", [user("t", "q"), ai("t", "a")], None, trace_id="run-1")
    assert [m.content for m in await storage.get_messages("t")] == ["first", "q", "a"]


async def test_deleting_a_thread_forgets_its_traces(storage: Storage) -> None:
    """After delete_thread, a trace id committed before is a new turn again."""
    await storage.commit_turn("t", [user("t", "q")], AgentState(data={"n": 1}), trace_id="r")
    await storage.delete_thread("t")
    again = await storage.commit_turn(
        "t", [user("t", "q")], AgentState(data={"n": 1}), trace_id="r"
    )
    assert again == AgentState(data={"n": 1}, version=1)
    assert [m.content for m in await storage.get_messages("t")] == ["q"]


@pytest.mark.parametrize("open_backend", DURABLE_BACKENDS, indirect=True)
async def test_concurrent_commits_of_one_trace_write_it_once(open_backend: StorageFactory) -> None:
    """The same turn committed at once through two storage objects (a retry racing the first
    attempt) is saved once, and both callers get the same saved state."""
    stores = [open_backend(), open_backend()]
    for store in stores:
        await store.list_threads()
    results = await asyncio.gather(
        *(
            store.commit_turn(
                "t", [user("t", f"q{n}"), ai("t", f"a{n}")], AgentState(data={"n": n}), trace_id="r"
            )
            for n, store in enumerate(stores)
        )
    )
    assert results[0] == results[1]
    assert results[0] is not None
    assert results[0].version == 1
    assert len(await stores[0].get_messages("t")) == 2


# -- compare-and-set on the state version --------------------------------------------------------


async def test_set_agent_state_with_the_expected_version_saves_the_next_one(
    storage: Storage,
) -> None:
    """expected_version=0 creates the state; the stored version then lets the next save in."""
    created = await storage.set_agent_state("t", AgentState(data={"n": 1}), expected_version=0)
    assert created == AgentState(data={"n": 1}, version=1)
    saved = await storage.set_agent_state("t", AgentState(data={"n": 2}), expected_version=1)
    assert saved == AgentState(data={"n": 2}, version=2)


async def test_set_agent_state_with_a_stale_version_is_a_conflict_that_saves_nothing(
    storage: Storage,
) -> None:
    """A save expecting an older version (or no state, or a state that is not there) raises
    StateConflictError naming the thread, and the stored state stays."""
    await storage.set_agent_state("t", AgentState(data={"n": 1}))
    await storage.set_agent_state("t", AgentState(data={"n": 2}))
    for expected in (0, 1, 3):
        with pytest.raises(StateConflictError, match="'t'") as caught:
            await storage.set_agent_state("t", AgentState(data={"n": 9}), expected_version=expected)
        assert caught.value.expected_version == expected
        assert not caught.value.transient
    with pytest.raises(StateConflictError):
        await storage.set_agent_state("new", AgentState(data={"n": 9}), expected_version=1)
    assert await storage.get_agent_state("t") == AgentState(data={"n": 2}, version=2)
    assert await storage.get_agent_state("new") is None


async def test_commit_turn_with_a_stale_version_saves_no_message_and_no_state(
    storage: Storage,
) -> None:
    """A turn whose state expects an outdated version is refused whole, trace id included."""
    await storage.set_agent_state("t", AgentState(data={"n": 1}))
    with pytest.raises(StateConflictError):
        await storage.commit_turn(
            "t", [user("t", "q")], AgentState(data={"n": 2}), trace_id="r", expected_version=0
        )
    assert await storage.get_messages("t") == []
    assert await storage.get_agent_state("t") == AgentState(data={"n": 1}, version=1)
    saved = await storage.commit_turn(
        "t", [user("t", "q")], AgentState(data={"n": 2}), trace_id="r", expected_version=1
    )
    assert saved == AgentState(data={"n": 2}, version=2)


async def test_expected_version_must_be_a_version_number(storage: Storage) -> None:
    """A negative or non-int expected_version, or one without a state, is a UsageError."""
    for bad in (-1, 1.5, True, "1"):
        with pytest.raises(UsageError, match="expected_version"):
            await storage.set_agent_state("t", AgentState(), expected_version=bad)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="expected_version"):
        await storage.commit_turn("t", [user("t", "q")], None, expected_version=0)
    assert await storage.list_threads() == []


@pytest.mark.parametrize("open_backend", DURABLE_BACKENDS, indirect=True)
async def test_two_connections_compare_and_set_lose_no_update(
    open_backend: StorageFactory,
) -> None:
    """Increments through two storage objects, each read-then-compare-and-set with retries,
    all land: none overwrites another."""
    stores = [open_backend(), open_backend()]
    for store in stores:
        await store.list_threads()  # opened one after the other, as two processes would be

    async def increment(store: Storage) -> None:
        while True:
            current = await store.get_agent_state("t") or AgentState()
            await asyncio.sleep(0)
            try:
                await store.set_agent_state(
                    "t",
                    AgentState(data={"n": current.data.get("n", 0) + 1}),
                    expected_version=current.version,
                )
            except StateConflictError:
                continue
            return

    await asyncio.gather(*(increment(stores[n % 2]) for n in range(16)))
    assert await stores[0].get_agent_state("t") == AgentState(data={"n": 16}, version=16)


# -- after aclose --------------------------------------------------------------------------------


_CALLS_AFTER_CLOSE: dict[str, Callable[[Storage], Awaitable[object]]] = {
    "get_thread_config": lambda s: s.get_thread_config("t"),
    "set_thread_config": lambda s: s.set_thread_config("t", ThreadConfig()),
    "get_agent_state": lambda s: s.get_agent_state("t"),
    "set_agent_state": lambda s: s.set_agent_state("t", AgentState()),
    "add_messages": lambda s: s.add_messages("t", [user("t", "x")]),
    "get_messages": lambda s: s.get_messages("t"),
    "commit_turn": lambda s: s.commit_turn("t", [user("t", "x")], None),
    "add_observation": lambda s: s.add_observation(observation("t", ObservationType.PLAN, "x")),
    "get_observations": lambda s: s.get_observations("t"),
    "list_threads": lambda s: s.list_threads(),
    "delete_thread": lambda s: s.delete_thread("t"),
}


@pytest.mark.parametrize("method", sorted(_CALLS_AFTER_CLOSE))
async def test_every_method_after_aclose_raises_the_same_usage_error(
    storage: Storage, method: str
) -> None:
    """Once closed, each method raises a UsageError saying to open a new storage object, every
    time (add_observation included: nothing is silently dropped)."""
    await storage.add_observation(observation("t", ObservationType.PLAN, "before"))
    await storage.aclose()
    for _ in range(2):
        with pytest.raises(UsageError, match=r"is closed: open a new storage object"):
            await _CALLS_AFTER_CLOSE[method](storage)


async def test_lock_thread_after_aclose_raises_the_same_usage_error(storage: Storage) -> None:
    """Once closed, lock_thread refuses too, every time."""
    await storage.aclose()
    for _ in range(2):
        with pytest.raises(UsageError, match=r"is closed: open a new storage object"):
            async with storage.lock_thread("t"):
                pass


# -- records too deep or damaged ----------------------------------------------------------------


def nested(levels: int) -> dict[str, Any]:
    """An object `levels` deep: {"down": {"down": ... "bottom"}}."""
    value: Any = "bottom"
    for _ in range(levels):
        value = {"down": value}
    return value  # type: ignore[no-any-return]


def levels_of(value: Any) -> int:
    """How many levels of `nested` `value` holds, reading on through levels stored as JSON
    text; fails unless it reaches the bottom."""
    levels = 0
    while True:
        if isinstance(value, str) and value.startswith("{"):
            value = json.loads(value)
        elif isinstance(value, dict):
            levels += 1
            value = value["down"]
        else:
            assert value == "bottom"
            return levels


def paused_run(thread_id: str, trace_id: str, output: Any = "done") -> PausedRun:
    """A run paused after step 1 (which returned `output`) with step 2 waiting."""
    return PausedRun(
        thread_id=thread_id,
        trace_id=trace_id,
        props=AgentProps("pay", thread_id),
        planning=PlanningOutput(title="Pay", plan="1. look\n2. pay"),
        calls=[
            ParsedToolCall(call_id="c1", tool_name="look", arguments={}),
            ParsedToolCall(call_id="c2", tool_name="pay", arguments={"amount": 5}),
        ],
        results={1: ToolResult(call_id="c1", tool_name="look", status="success", output=output)},
        pending=[PendingApproval(call_id="c2", tool_name="pay", arguments={"amount": 5})],
    )


# 250: past the 200 levels pydantic reads (such rows were written, then never read again);
# 400: past the 254 it writes (the save itself failed).
@pytest.mark.parametrize("levels", [250, 400])
async def test_records_nested_past_the_read_limit_are_saved_readable_and_whole(
    storage: Storage, levels: int
) -> None:
    """A message, an observation and a paused run holding data nested `levels` deep are saved,
    listed and read back with nothing lost (the deepest part as JSON text)."""
    await storage.add_messages("t", [user("t", "hi", deep=nested(levels))])
    item = Observation(
        thread_id="t",
        trace_id="r",
        type=ObservationType.TOOL_EXECUTION,
        title="deep",
        content={"output": nested(levels)},
    )
    await storage.add_observation(item)
    await storage.save_paused_run(paused_run("t", "r", output=nested(levels)))

    [message] = await storage.get_messages("t")
    assert levels_of(message.metadata["deep"]) == levels
    [saved] = await storage.get_observations("t")
    assert levels_of(saved.content["output"]) == levels
    [listed] = await storage.get_paused_runs()
    assert levels_of(listed.results[1].output) == levels
    claimed = await storage.claim_paused_run("t", "r")
    assert claimed is not None
    assert levels_of(claimed.results[1].output) == levels


async def test_agent_state_nested_past_the_write_limit_is_saved_readable_and_whole(
    storage: Storage, caplog: pytest.LogCaptureFixture
) -> None:
    """An agent state nested 300 levels deep (past the 254 pydantic writes) is saved alone and
    in a turn, and read back with nothing lost (the deepest part as JSON text), with a warning
    naming the table."""
    saved = await storage.set_agent_state("t", AgentState(data={"deep": nested(300)}))
    assert saved.version == 1
    assert levels_of(saved.data["deep"]) == 300
    committed = await storage.commit_turn(
        "t", [user("t", "hi")], AgentState(data={"deep": nested(300), "n": 2})
    )
    assert committed is not None
    read = await storage.get_agent_state("t")
    assert read == committed
    assert (read.version, read.data["n"], levels_of(read.data["deep"])) == (2, 2, 300)
    assert any(
        "storage_data_flattened" in r.getMessage() and "agent_states" in r.getMessage()
        for r in caplog.records
    )


async def write_raw(storage: Storage, table: str, thread_id: str, key: str, body: str) -> None:
    """Add a row of `table` holding `body`, past the codec: with SQL in SQLite and PostgreSQL,
    with the text-level writer in memory (which has no SQL)."""
    columns = {
        "messages": ("thread_id, message_id, body", (thread_id, key, body)),
        "observations": (
            "id, thread_id, trace_id, type, body",
            (key, thread_id, "r", ObservationType.PLAN.value, body),
        ),
        "paused_runs": ("thread_id, trace_id, body", (thread_id, key, body)),
        "a2a_tasks": ("task_id, thread_id, owner, saved, body", (key, thread_id, "", 0, body)),
    }
    names, values = columns[table]
    if isinstance(storage, SQLiteStorage):
        with closing(sqlite3.connect(storage.path, isolation_level=None)) as conn:
            conn.execute(
                f"INSERT INTO {table} ({names}) VALUES (?, ?{', ?' * (len(values) - 2)})", values
            )
    elif isinstance(storage, PostgresStorage):
        import asyncpg  # type: ignore[import-untyped]

        marks = ", ".join(f"${n}" for n in range(1, len(values) + 1))
        conn = await asyncpg.connect(POSTGRES_URL)
        try:
            await conn.execute(
                f'INSERT INTO "{storage.schema}".{table} ({names}) VALUES ({marks})', *values
            )
        finally:
            await conn.close()
    else:
        assert isinstance(storage, InMemoryStorage)
        if table == "messages":
            await storage._write_turn(Turn(thread_id, [key], [body], None, None, None))
        elif table == "observations":
            await storage._write_observation(ObservationRow(*values))  # type: ignore[arg-type]
        elif table == "a2a_tasks":
            await storage._write_task(TaskRow(key, thread_id, "", body))
        else:
            await storage._write_paused(thread_id, key, body)


# Rows another program could leave: one as deep as pes-agent itself once wrote, one of the
# wrong shape.
DAMAGED = {"too-deep": json.dumps(nested(250)), "wrong-shape": '{"role": "nobody"}'}


async def test_a_damaged_row_never_fails_a_listing_of_the_others(
    storage: Storage, caplog: pytest.LogCaptureFixture
) -> None:
    """Messages, observations and paused runs are listed without the rows that cannot be read,
    each left out with a warning naming the table and the thread."""
    first, last = user("t", "first"), user("t", "last")
    seen = observation("t", ObservationType.PLAN, "seen")
    also = observation("t", ObservationType.PLAN, "also seen")
    mine, theirs = paused_run("t", "r1"), paused_run("u", "r2")
    await storage.add_messages("t", [first])
    await storage.add_observation(seen)
    await storage.save_paused_run(mine)
    await storage.get_observations("t")  # written before the damaged rows are
    for key, body in DAMAGED.items():
        for table in ("messages", "observations", "paused_runs"):
            await write_raw(storage, table, "t", key, body)
    await storage.add_messages("t", [last])
    await storage.add_observation(also)
    await storage.save_paused_run(theirs)

    assert await storage.get_messages("t") == [first, last]
    assert await storage.get_observations("t") == [seen, also]
    assert await storage.get_paused_runs("t") == [mine]
    assert await storage.get_paused_runs() == [mine, theirs]
    assert "t" in await storage.list_threads()
    skipped = [r.getMessage() for r in caplog.records if "storage_row_skipped" in r.getMessage()]
    for table in ("messages", "observations", "paused_runs"):
        assert any(f"table {table!r}" in text and "thread 't'" in text for text in skipped)


async def test_a_message_limit_counts_only_messages_that_can_be_read(
    storage: Storage, caplog: pytest.LogCaptureFixture
) -> None:
    """get_messages(limit=n) gives the newest n messages that can be read, reaching past the
    damaged rows among them, each left out with one warning."""
    first, second, third = user("t", "first"), ai("t", "second"), user("t", "third")
    await storage.add_messages("t", [first, second])
    for key, body in DAMAGED.items():
        await write_raw(storage, "messages", "t", key, body)
    await storage.add_messages("t", [third])
    await write_raw(storage, "messages", "t", "newest", DAMAGED["wrong-shape"])

    assert await storage.get_messages("t", limit=1) == [third]
    assert await storage.get_messages("t", limit=2) == [second, third]
    caplog.clear()
    assert await storage.get_messages("t", limit=3) == [first, second, third]
    skipped = [r for r in caplog.records if "storage_row_skipped" in r.getMessage()]
    assert len(skipped) == 3
    assert await storage.get_messages("t", limit=4) == [first, second, third]


async def test_a_state_or_message_holding_a_cycle_is_refused_as_not_json(
    storage: Storage,
) -> None:
    """Data that refers to itself is not JSON: a state or a message holding such data is a
    StorageError saying so, and nothing is saved (it is not stored unrolled 100 levels deep)."""
    looped: dict[str, Any] = {}
    looped["self"] = looped
    with pytest.raises(StorageError, match="JSON-serialisable"):
        await storage.set_agent_state("t", AgentState(data={"loop": looped}))
    with pytest.raises(StorageError, match="JSON-serialisable"):
        await storage.add_messages("t", [user("t", "hi", loop=looped)])
    assert await storage.get_agent_state("t") is None
    assert await storage.get_messages("t") == []


# -- a thread's turn, lent by name (TurnLeases) --------------------------------------------------


async def test_backend_lends_turns(storage: Storage) -> None:
    """Every bundled backend is a runtime-checkable TurnLeases."""
    assert isinstance(storage, TurnLeases)


async def test_a_turn_is_lent_to_one_owner_at_a_time(storage: Storage) -> None:
    """The first claimer holds the turn; another is told who holds it; the holder's claim
    repeated holds it still; after its release the other gets it. Threads are independent."""
    assert isinstance(storage, TurnLeases)
    assert await storage.claim_turn("t", "run-a") == "run-a"
    assert await storage.claim_turn("t", "run-b") == "run-a"
    assert await storage.claim_turn("t", "run-a") == "run-a"  # repeated after a crash
    assert await storage.claim_turn("u", "run-b") == "run-b"  # another thread
    await storage.release_turn("t", "run-b")  # not its holder: nothing happens
    assert await storage.claim_turn("t", "run-b") == "run-a"
    await storage.release_turn("t", "run-a")
    await storage.release_turn("t", "run-a")  # twice: harmless
    assert await storage.claim_turn("t", "run-b") == "run-b"


async def test_a_gone_holders_turn_is_broken_by_one_claimer(storage: Storage) -> None:
    """A claim naming the holder as gone (`breaking`) takes the turn over; a claim naming
    someone else as gone does not; of two claimers breaking the same lease one wins."""
    assert isinstance(storage, TurnLeases)
    assert await storage.claim_turn("t", "dead") == "dead"
    assert await storage.claim_turn("t", "run-b", breaking="someone-else") == "dead"
    claims = await asyncio.gather(
        storage.claim_turn("t", "run-b", breaking="dead"),
        storage.claim_turn("t", "run-c", breaking="dead"),
    )
    assert sorted(claims) in (["run-b", "run-b"], ["run-c", "run-c"])
    # The loser cannot break the winner's lease by naming the dead holder again.
    loser = "run-c" if claims[0] == "run-b" else "run-b"
    assert await storage.claim_turn("t", loser, breaking="dead") == claims[0]


async def test_concurrent_claims_lend_the_turn_once(open_backend: StorageFactory) -> None:
    """Twenty claimers through five storage objects on one store: exactly one holds the turn,
    and every claimer is told who."""
    stores = [open_backend() for _ in range(5)]
    leases = [store for store in stores if isinstance(store, TurnLeases)]
    assert len(leases) == 5
    owners = [f"run-{n}" for n in range(20)]
    holders = await asyncio.gather(
        *(leases[n % 5].claim_turn("t", owner) for n, owner in enumerate(owners))
    )
    assert len(set(holders)) == 1
    assert holders[0] in owners


async def test_claiming_a_turn_with_an_empty_owner_says_what_to_give(storage: Storage) -> None:
    """An empty owner is a usage error naming the argument."""
    assert isinstance(storage, TurnLeases)
    with pytest.raises(UsageError, match="owner must be a non-empty str"):
        await storage.claim_turn("t", "")


# -- protocol tasks (TaskRecords) ----------------------------------------------------------------


def task(task_id: str, thread_id: str = "t", owner: str = "", state: str = "working") -> TaskRecord:
    return TaskRecord(task_id, thread_id, owner, {"id": task_id, "status": {"state": state}})


async def test_backend_keeps_task_records(storage: Storage) -> None:
    """Every bundled backend is a runtime-checkable TaskRecords."""
    assert isinstance(storage, TaskRecords)


async def test_a_task_record_round_trips_and_keeps_its_first_owner(storage: Storage) -> None:
    """A saved task reads back whole; saving it again replaces its body but not its owner."""
    assert isinstance(storage, TaskRecords)
    assert await storage.get_task_record("x") is None
    await storage.save_task_record(task("x", owner="alice"))
    assert await storage.get_task_record("x") == task("x", owner="alice")
    await storage.save_task_record(task("x", owner="bob", state="completed"))
    assert await storage.get_task_record("x") == task("x", owner="alice", state="completed")


async def test_task_records_list_by_owner_and_thread_latest_save_first(storage: Storage) -> None:
    """A listing filters by owner and thread and puts the task saved last first."""
    assert isinstance(storage, TaskRecords)
    await storage.save_task_record(task("a", "t", "alice"))
    await storage.save_task_record(task("b", "u", "alice"))
    await storage.save_task_record(task("c", "t", "bob"))
    await storage.save_task_record(task("a", "t", "alice", state="completed"))
    listed = await storage.list_task_records()
    assert [r.task_id for r in listed] == ["a", "c", "b"]
    assert [r.task_id for r in await storage.list_task_records(owner="alice")] == ["a", "b"]
    assert [r.task_id for r in await storage.list_task_records(thread_id="t")] == ["a", "c"]
    by_both = await storage.list_task_records(owner="bob", thread_id="t")
    assert [r.task_id for r in by_both] == ["c"]


async def test_task_records_go_with_their_thread_or_alone(storage: Storage) -> None:
    """delete_task_record deletes one task; delete_thread deletes the thread's tasks only."""
    assert isinstance(storage, TaskRecords)
    for record in (task("a", "t"), task("b", "t"), task("c", "u")):
        await storage.save_task_record(record)
    await storage.delete_task_record("a")
    await storage.delete_task_record("a")  # twice: harmless
    assert await storage.get_task_record("a") is None
    await storage.delete_thread("t")
    assert [r.task_id for r in await storage.list_task_records()] == ["c"]


async def test_a_damaged_task_record_is_left_out_of_a_listing(
    storage: Storage, caplog: pytest.LogCaptureFixture
) -> None:
    """A task whose stored JSON is not an object is skipped in a listing with a warning, and
    read alone is a StorageError naming the table and thread."""
    assert isinstance(storage, TaskRecords)
    await storage.save_task_record(task("good"))
    await write_raw(storage, "a2a_tasks", "t", "bad", "[1, 2]")
    assert [r.task_id for r in await storage.list_task_records()] == ["good"]
    skipped = [r.getMessage() for r in caplog.records if "storage_row_skipped" in r.getMessage()]
    assert any("table 'a2a_tasks'" in text and "thread 't'" in text for text in skipped)
    with pytest.raises(StorageError, match="a2a_tasks"):
        await storage.get_task_record("bad")


async def test_a_task_record_needs_ids_and_an_object_body(storage: Storage) -> None:
    """An empty task id or thread id, or a body that is not a dict, is a usage error."""
    assert isinstance(storage, TaskRecords)
    with pytest.raises(UsageError, match="task_id"):
        await storage.save_task_record(TaskRecord("", "t", "", {}))
    with pytest.raises(UsageError, match="thread_id"):
        await storage.save_task_record(TaskRecord("x", "", "", {}))
    with pytest.raises(UsageError, match="JSON object"):
        await storage.save_task_record(TaskRecord("x", "t", "", [1]))  # type: ignore[arg-type]
