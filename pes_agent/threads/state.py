"""Thread configuration and agent state, loaded and saved through a `Storage`."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ConfigDict

from pes_agent.config import AgentState, ThreadConfig
from pes_agent.errors import StateConflictError, UsageError
from pes_agent.observing.types import ObservationType
from pes_agent.pes.recorder import RunRecorder
from pes_agent.protocols import ObservationRecorder
from pes_agent.storage.base import Storage
from pes_agent.threads._running import enclosing_run
from pes_agent.threads.ids import check_thread_id
from pes_agent.threads.messages import ConversationMessage
from pes_agent.threads.reserved import user_threads

__all__ = ["MERGE_ATTEMPTS", "StateManager", "ThreadContext", "commit_turn_merging_state"]

# How many times a run's implicit state save merges again after another save beat it.
MERGE_ATTEMPTS = 5


@dataclass(slots=True)
class ThreadContext:
    """A thread's configuration and state as a run sees them.

    `config` is the thread's own config, or an empty `ThreadConfig` (agent defaults apply) when
    the thread was never configured. `state` is a private copy: with `state_saving="implicit"`
    the run saves it back when it changed; with `"explicit"` only `set_agent_state` saves.
    """

    config: ThreadConfig
    state: AgentState
    configured: bool

    @classmethod
    def of(cls, config: ThreadConfig | None, state: AgentState | None) -> ThreadContext:
        """The context a run sees of a thread whose stored config and state are these.

        Args:
            config: The thread's stored config; None when it was never configured.
            state: The thread's stored state; None when none was saved.

        Returns:
            The context: an empty config when there is none, and a private copy of the state.
        """
        return cls(
            config=config if config is not None else ThreadConfig(),
            state=state.model_copy(deep=True) if state is not None else AgentState(),
            configured=config is not None,
        )

    @classmethod
    def for_run(cls, config: ThreadConfig | None, state: AgentState | None) -> ThreadContext:
        """The context a run sees of its thread: as `of`, but a thread never configured gets
        one shared, frozen empty config (the run only reads it, to resolve its settings).

        Args:
            config: The thread's stored config; None when it was never configured.
            state: The thread's stored state; None when none was saved.

        Returns:
            The context: the shared empty config when there is none, and a private copy of
            the state.
        """
        return cls(
            config=config if config is not None else _UNCONFIGURED,
            state=state.model_copy(deep=True) if state is not None else AgentState(),
            configured=config is not None,
        )


class _Unconfigured(ThreadConfig):
    """The config every run on a thread never configured sees: an empty `ThreadConfig`
    (agent defaults apply), shared rather than made per run, since a fresh one is two
    objects (the model and its fields set) that the garbage collector walks in every run in
    flight. Frozen, so that nothing can change what the other runs see: a run never changes
    its config, and one that tried would get a `ValidationError`."""

    model_config = ConfigDict(frozen=True)


_UNCONFIGURED = _Unconfigured()


class StateManager:
    """Read and write each thread's `ThreadConfig` and `AgentState` (an agent's `agent.state`).

    With an observation recorder, every `set_agent_state` records a STATE_UPDATE (with the
    trace of the run it was called from, e.g. by a tool; an empty trace id outside runs).
    """

    def __init__(self, storage: Storage, *, observations: ObservationRecorder | None = None):
        """Keep configs and states in `storage`.

        Args:
            storage: Where the configs and states are kept.
            observations: Records a STATE_UPDATE for every `set_agent_state`; None records
                nothing.
        """
        self._storage = storage
        self._observations = observations

    async def get_thread_config(self, thread_id: str) -> ThreadConfig | None:
        """Read the thread's saved config.

        Args:
            thread_id: The thread to read.

        Returns:
            The config, or None when the thread was never configured.

        Raises:
        UsageError: `thread_id` is not a usable thread id (`thread_id_problem` says why).
        StorageError: The store could not be read or written; `transient` says whether
            trying again may help.
        """
        check_thread_id(thread_id)
        return await self._storage.get_thread_config(thread_id)

    async def set_thread_config(self, thread_id: str, config: ThreadConfig) -> None:
        """Save `config` for the thread; later runs on it use these settings.

        Args:
            thread_id: The thread to configure.
            config: Its settings, e.g. `ThreadConfig(enabled_tools=['calculator'])`.

        Raises:
            UsageError: `thread_id` is not a usable thread id, or `config` is not a
                `ThreadConfig`.
        StorageError: The store could not be read or written; `transient` says whether
            trying again may help.
        """
        check_thread_id(thread_id)
        if not isinstance(config, ThreadConfig):
            raise UsageError(
                f"set_thread_config needs a ThreadConfig, got {type(config).__name__}; "
                "e.g. ThreadConfig(enabled_tools=['calculator'])"
            )
        await self._storage.set_thread_config(thread_id, config)

    async def get_agent_state(self, thread_id: str) -> AgentState | None:
        """Read the thread's saved state.

        Args:
            thread_id: The thread to read.

        Returns:
            The state with its version, or None when nothing was saved yet.

        Raises:
        UsageError: `thread_id` is not a usable thread id (`thread_id_problem` says why).
        StorageError: The store could not be read or written; `transient` says whether
            trying again may help.
        """
        check_thread_id(thread_id)
        return await self._storage.get_agent_state(thread_id)

    async def set_agent_state(
        self, thread_id: str, state: AgentState, *, expected_version: int | None = None
    ) -> AgentState:
        """Save `state` for the thread and return it with its new version.

        Without `expected_version` the save goes over whatever is stored (`state.version` is
        not looked at). With it (the version you read; 0 when there was none) the save is a
        compare-and-set: if another save landed meanwhile, nothing is saved and a
        `StateConflictError` says to read the state again.

        Args:
            thread_id: The thread to save for.
            state: The state to save, e.g. `AgentState(data={'step': 1})`.
            expected_version: The version you read (0 when there was none), for a
                compare-and-set; None saves unconditionally.

        Returns:
            The state as saved, with its new version.

        Raises:
            UsageError: `thread_id` is not a usable thread id, or `state` is not an
                `AgentState`.
            StateConflictError: The stored version is not `expected_version`.
        StorageError: The store could not be read or written; `transient` says whether
            trying again may help.
        """
        check_thread_id(thread_id)
        if not isinstance(state, AgentState):
            raise UsageError(
                f"set_agent_state needs an AgentState, got {type(state).__name__}; "
                "e.g. AgentState(data={'step': 1})"
            )
        saved = await self._storage.set_agent_state(
            thread_id, state, expected_version=expected_version
        )
        if self._observations is not None:
            run = enclosing_run(thread_id)
            await RunRecorder(self._observations, thread_id, run.trace_id if run else "").record(
                ObservationType.STATE_UPDATE,
                "State saved",
                {"version": saved.version, "data": saved.data, "saving": "explicit"},
            )
        return saved

    async def list_threads(self) -> list[str]:
        """Every thread with a config, state, message or observation, sorted by id.

        The HTTP server's records kept in the same store (ids starting with
        `pes_agent.threads.reserved.RESERVED_PREFIX`) are not threads and are left out.

        Returns:
            The thread ids, sorted.

        Raises:
        StorageError: The store could not be read or written; `transient` says whether
            trying again may help.
        """
        return user_threads(await self._storage.list_threads())

    async def delete_thread(self, thread_id: str) -> None:
        """Delete the thread's config, state, messages and observations.

        Args:
            thread_id: The thread to delete; one that does not exist is no error.

        Raises:
        UsageError: `thread_id` is not a usable thread id (`thread_id_problem` says why).
        StorageError: The store could not be read or written; `transient` says whether
            trying again may help.
        """
        check_thread_id(thread_id)
        await self._storage.delete_thread(thread_id)

    async def load_context(self, thread_id: str) -> ThreadContext:
        """Load what a run needs to know about its thread.

        Args:
            thread_id: The thread to load.

        Returns:
            Its config (an empty one when it was never configured) and a private copy of its
            state.

        Raises:
        UsageError: `thread_id` is not a usable thread id (`thread_id_problem` says why).
        StorageError: The store could not be read or written; `transient` says whether
            trying again may help.
        """
        check_thread_id(thread_id)
        config = await self._storage.get_thread_config(thread_id)
        return ThreadContext.of(config, await self._storage.get_agent_state(thread_id))


async def commit_turn_merging_state(
    storage: Storage,
    thread_id: str,
    messages: Sequence[ConversationMessage],
    *,
    ours: AgentState | None,
    base: dict[str, Any],
    trace_id: str | None = None,
) -> AgentState | None:
    """Commit a run's messages with its changes to the state merged onto the stored one.

    `ours` is the run's state (None: the run changed nothing) and `base` the data it started
    from. The application (or a tool calling `set_agent_state`) may save the thread's state
    while the run goes on; the run's changes are applied key by key on top of that save, so
    neither is lost (a key both changed takes the run's value). The save is a compare-and-set
    on the version the merge read: if yet another save lands before the commit, nothing is
    written and the merge is done again, at most `MERGE_ATTEMPTS` times in all (then the
    `StateConflictError` is raised).
    """
    if ours is None:
        return await storage.commit_turn(thread_id, messages, None, trace_id=trace_id)
    changes = ours  # not None: a name the closure below sees narrowed

    async def merge_and_commit() -> AgentState | None:
        current = await storage.get_agent_state(thread_id)
        return await storage.commit_turn(
            thread_id,
            messages,
            _merged(changes, base, current),
            trace_id=trace_id,
            expected_version=0 if current is None else current.version,
        )

    for _ in range(MERGE_ATTEMPTS - 1):
        with contextlib.suppress(StateConflictError):
            return await merge_and_commit()
    return await merge_and_commit()


def _merged(ours: AgentState, base: dict[str, Any], current: AgentState | None) -> AgentState:
    """The run's changes (from `base` to `ours`) applied on top of the stored `current`."""
    if current is None or current.version == ours.version:
        return ours  # nobody saved meanwhile
    merged = dict(current.data)
    for key in base.keys() - ours.data.keys():
        merged.pop(key, None)
    for key, value in ours.data.items():
        if key not in base or base[key] != value:
            merged[key] = value
    return AgentState(data=merged, version=current.version)
