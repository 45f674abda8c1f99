"""Early checks of InMemoryStorage, before the contract suite covers every backend."""

from __future__ import annotations

import asyncio

from pes_agent.config import AgentState
from pes_agent.messages import ConversationMessage, MessageRole
from pes_agent.storage import InMemoryStorage, Storage, open_storage


async def test_memory_spec_gives_in_memory_storage() -> None:
    """open_storage('memory') returns an InMemoryStorage that satisfies the Storage protocol."""
    storage = open_storage("memory")
    assert isinstance(storage, InMemoryStorage)
    assert isinstance(storage, Storage)


async def test_commit_turn_saves_messages_and_bumps_state() -> None:
    """commit_turn appends the messages and saves the state as the next version."""
    storage = InMemoryStorage()
    async with storage.lock_thread("t"):
        saved = await storage.commit_turn(
            "t",
            [ConversationMessage(thread_id="t", role=MessageRole.USER, content="hi")],
            AgentState(data={"n": 1}),
        )
    assert saved == AgentState(data={"n": 1}, version=1)
    assert [m.content for m in await storage.get_messages("t")] == ["hi"]


async def test_lock_entries_are_dropped_when_unused() -> None:
    """The per-thread lock table is empty again once no task holds or waits for a lock."""
    storage = InMemoryStorage()

    async def hold(thread_id: str) -> None:
        async with storage.lock_thread(thread_id):
            await asyncio.sleep(0)

    await asyncio.gather(*(hold(f"t{i % 3}") for i in range(10)))
    assert len(storage._locks) == 0
