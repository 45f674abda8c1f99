"""The storage protocol behind StateManager, ConversationManager and the observation log."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol, runtime_checkable

from pes_agent.approvals.models import PausedRun
from pes_agent.config import AgentState, ThreadConfig
from pes_agent.observing.types import Observation, ObservationType
from pes_agent.threads.messages import ConversationMessage

__all__ = ["ObservationFeed", "Storage"]


@runtime_checkable
class Storage(Protocol):
    """Where threads, their history, state and observations live.

    Implementations: `InMemoryStorage`, `SQLiteStorage`, `PostgresStorage`. All methods are
    safe to call concurrently. `lock_thread` serialises runs on one thread (in one process at
    least; durable backends also across processes), and never blocks other threads. After
    `aclose()` every method raises a `UsageError`. A stored row that cannot be read is left
    out of a listing (messages, observations, paused runs) with a warning, and read alone is a
    `StorageError` naming the store, table and thread; `StorageError.transient` says whether
    repeating the call may help. What is saved nests at most 100 levels deep: a deeper array
    or object is saved (and read back) as its JSON text, with a warning.
    """

    async def get_thread_config(self, thread_id: str) -> ThreadConfig | None: ...

    async def set_thread_config(self, thread_id: str, config: ThreadConfig) -> None: ...

    async def get_agent_state(self, thread_id: str) -> AgentState | None: ...

    async def set_agent_state(
        self, thread_id: str, state: AgentState, *, expected_version: int | None = None
    ) -> AgentState:
        """Save `state` as the stored version + 1 and return what was saved (`state.version`
        is not looked at). With `expected_version` (the version read; 0 for none) it is a
        compare-and-set: a `StateConflictError`, and nothing saved, if another save landed."""
        ...

    async def add_messages(
        self, thread_id: str, messages: Sequence[ConversationMessage]
    ) -> None: ...

    async def get_messages(
        self, thread_id: str, *, limit: int | None = None
    ) -> list[ConversationMessage]:
        """The newest `limit` readable messages (all when None), oldest first."""
        ...

    async def commit_turn(
        self,
        thread_id: str,
        messages: Sequence[ConversationMessage],
        state: AgentState | None,
        *,
        trace_id: str | None = None,
        expected_version: int | None = None,
    ) -> AgentState | None:
        """Save a run's messages and (if given) its state atomically: all or nothing; return
        the saved state. A turn whose `trace_id` was committed on this thread before writes
        nothing and returns what that commit saved. `expected_version`: as in
        `set_agent_state`; on a conflict nothing of the turn is saved."""
        ...

    async def add_observation(self, observation: Observation) -> None: ...

    async def get_observations(
        self,
        thread_id: str,
        *,
        types: Sequence[ObservationType] | None = None,
        trace_id: str | None = None,
    ) -> list[Observation]:
        """Observations of a thread in the order they were recorded."""
        ...

    async def save_paused_run(self, run: PausedRun) -> None:
        """Store a run waiting for approval (atomically), replacing one with the same
        thread and trace id."""
        ...

    async def get_paused_runs(self, thread_id: str | None = None) -> list[PausedRun]:
        """The runs waiting for approval on `thread_id` (all threads when None), oldest first."""
        ...

    async def claim_paused_run(self, thread_id: str, trace_id: str) -> PausedRun | None:
        """Delete a paused run and return it in one atomic step (None when it is not there):
        of two processes claiming one run, exactly one gets it."""
        ...

    async def list_threads(self) -> list[str]: ...

    async def delete_thread(self, thread_id: str) -> None: ...

    def lock_thread(self, thread_id: str) -> AbstractAsyncContextManager[None]: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class ObservationFeed(Protocol):
    """A store that pushes observations written by other processes (`PostgresStorage`).

    Optional: check with `isinstance(storage, ObservationFeed)`.
    """

    async def subscribe_observations(
        self,
        callback: Callable[[Observation], Awaitable[None] | None],
        *,
        types: Iterable[ObservationType] | None = None,
        thread_id: str | None = None,
        include_own: bool = True,
    ) -> Callable[[], None]:
        """Call `callback` with each observation written to the store by any process (filtered
        by type and thread) until the returned function is called; `include_own=False` leaves
        out those written through this very storage object."""
        ...
