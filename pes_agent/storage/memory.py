"""`InMemoryStorage`: the default store for library use and tests; gone when the process ends."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field

from pes_agent.config import AgentState, ThreadConfig
from pes_agent.errors import StorageError
from pes_agent.observing.types import Observation, ObservationType
from pes_agent.storage import _codec
from pes_agent.storage._locks import ThreadLockTable
from pes_agent.threads.messages import ConversationMessage

__all__ = ["InMemoryStorage"]


@dataclass(slots=True)
class _Thread:
    config: str | None = None
    state: tuple[str, int] | None = None
    messages: list[str] = field(default_factory=list)
    message_ids: set[str] = field(default_factory=set)
    observations: list[tuple[str, str, ObservationType, str]] = field(default_factory=list)


class InMemoryStorage:
    """Keeps every thread in this process's memory, behind the same contract as the durable
    stores: data is saved as the same JSON (so what cannot be persisted fails here too), every
    read returns a fresh copy, and `lock_thread` serialises runs on one thread within the process.
    """

    def __init__(self) -> None:
        self._threads: dict[str, _Thread] = {}
        self._locks = ThreadLockTable()

    def __repr__(self) -> str:
        return f"InMemoryStorage(threads={len(self._threads)})"

    def _thread(self, thread_id: str) -> _Thread:
        found = self._threads.get(thread_id)
        if found is None:
            found = self._threads[thread_id] = _Thread()
        return found

    async def get_thread_config(self, thread_id: str) -> ThreadConfig | None:
        """The thread's saved config, or None if it was never configured."""
        found = self._threads.get(thread_id)
        if found is None or found.config is None:
            return None
        return _codec.load_config(found.config)

    async def set_thread_config(self, thread_id: str, config: ThreadConfig) -> None:
        """Replace the thread's config."""
        text = _codec.dump_config(config, thread_id)
        self._thread(thread_id).config = text

    async def get_agent_state(self, thread_id: str) -> AgentState | None:
        """The thread's saved state, or None if none was saved."""
        found = self._threads.get(thread_id)
        if found is None or found.state is None:
            return None
        return _codec.load_state(*found.state)

    async def set_agent_state(self, thread_id: str, state: AgentState) -> AgentState:
        """Save `state` as the next version (stored version + 1) and return what was saved."""
        data = _codec.dump_state_data(state, thread_id)
        return self._put_state(thread_id, data)

    def _put_state(self, thread_id: str, data: str) -> AgentState:
        thread = self._thread(thread_id)
        version = (thread.state[1] if thread.state is not None else 0) + 1
        thread.state = (data, version)
        return _codec.load_state(data, version)

    async def add_messages(self, thread_id: str, messages: Sequence[ConversationMessage]) -> None:
        """Append messages to the thread's history, all or none."""
        self._append(thread_id, self._dump_messages(thread_id, messages))

    def _dump_messages(
        self, thread_id: str, messages: Sequence[ConversationMessage]
    ) -> list[tuple[str, str]]:
        rows = [(m.message_id, _codec.dump_message(m, thread_id)) for m in messages]
        seen = self._threads[thread_id].message_ids if thread_id in self._threads else set()
        batch: set[str] = set()
        for message_id, _ in rows:
            if message_id in seen or message_id in batch:
                raise StorageError(
                    f"message {message_id!r} is already saved in thread {thread_id!r}: "
                    "each message needs its own message_id",
                    thread_id=thread_id,
                )
            batch.add(message_id)
        return rows

    def _append(self, thread_id: str, rows: list[tuple[str, str]]) -> None:
        if not rows:
            return
        thread = self._thread(thread_id)
        thread.messages.extend(text for _, text in rows)
        thread.message_ids.update(message_id for message_id, _ in rows)

    async def get_messages(
        self, thread_id: str, *, limit: int | None = None
    ) -> list[ConversationMessage]:
        """The newest `limit` messages (all when None), oldest first."""
        limit = _codec.check_limit(limit)
        found = self._threads.get(thread_id)
        if found is None or limit == 0:
            return []
        texts = found.messages if limit is None else found.messages[-limit:]
        return [_codec.load_message(text) for text in texts]

    async def commit_turn(
        self,
        thread_id: str,
        messages: Sequence[ConversationMessage],
        state: AgentState | None,
    ) -> AgentState | None:
        """Save a run's messages and (if given) its state: all or nothing."""
        # Everything that can fail happens before the first change.
        rows = self._dump_messages(thread_id, messages)
        data = _codec.dump_state_data(state, thread_id) if state is not None else None
        self._append(thread_id, rows)
        return self._put_state(thread_id, data) if data is not None else None

    async def add_observation(self, observation: Observation) -> None:
        """Append an observation to its thread's log."""
        text = _codec.dump_observation(observation)
        self._thread(observation.thread_id).observations.append(
            (text, observation.trace_id, observation.type, observation.id)
        )

    async def get_observations(
        self,
        thread_id: str,
        *,
        types: Sequence[ObservationType] | None = None,
        trace_id: str | None = None,
    ) -> list[Observation]:
        """The thread's observations in recording order, optionally of some types or one trace."""
        found = self._threads.get(thread_id)
        if found is None:
            return []
        wanted = None if types is None else frozenset(types)
        return [
            _codec.load_observation(text)
            for text, trace, kind, _ in found.observations
            if (wanted is None or kind in wanted) and (trace_id is None or trace == trace_id)
        ]

    async def list_threads(self) -> list[str]:
        """Every thread with a config, state, message or observation, sorted by id."""
        return sorted(
            thread_id
            for thread_id, thread in self._threads.items()
            if thread.config is not None
            or thread.state is not None
            or thread.messages
            or thread.observations
        )

    async def delete_thread(self, thread_id: str) -> None:
        """Forget the thread: its config, state, messages and observations."""
        self._threads.pop(thread_id, None)

    def lock_thread(self, thread_id: str) -> AbstractAsyncContextManager[None]:
        """Serialise runs on `thread_id` within this process; other threads are not blocked."""
        return self._locks.hold(thread_id)

    async def aclose(self) -> None:
        """Nothing to release; present for the protocol."""
