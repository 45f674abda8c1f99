"""How models become the JSON text every backend stores, and back.

All three backends store the same JSON, so they behave the same: data that cannot be saved
fails the same way everywhere, what comes back is always a fresh copy, and a stored row that
cannot be read (damaged by hand or by another program) is a `StorageError` naming the store,
the table and the thread, never a raw pydantic or JSON error.

What a run records (messages, observations, paused runs) and the agent state are written at
most `MAX_DEPTH` levels deep, deeper parts as their JSON text (see `_depth`), so they can always
be read back; and a listing of records leaves out a row that cannot be read, with a warning
naming it, rather than failing for every other row (`load_rows`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, TypeVar

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from pes_agent.approvals.models import PausedRun
from pes_agent.config import AgentState, ProviderConfig, ThreadConfig
from pes_agent.errors import ConfigurationError, StorageError, UsageError
from pes_agent.observing.logs import get_logger
from pes_agent.observing.types import Observation, ObservationType
from pes_agent.storage._depth import MAX_DEPTH, bounded_text, dump_bounded
from pes_agent.threads.messages import ConversationMessage

__all__ = [
    "check_limit",
    "dump_config",
    "dump_message",
    "dump_observation",
    "dump_paused_run",
    "dump_state_data",
    "load_config",
    "load_message",
    "load_observation",
    "load_paused_run",
    "load_rows",
    "load_state",
]

_log = get_logger("pes_agent.storage")

_Record = TypeVar("_Record")


def dump_message(message: ConversationMessage, thread_id: str) -> str:
    """JSON for a message, or a `StorageError` saying which one cannot be saved."""
    if message.thread_id != thread_id:
        raise UsageError(
            f"message {message.message_id!r} belongs to thread {message.thread_id!r}, "
            f"not {thread_id!r}: build it with thread_id={thread_id!r}"
        )
    try:
        text, flattened = dump_bounded(message)
    except (PydanticSerializationError, ValueError, TypeError) as exc:
        raise StorageError(
            f"message {message.message_id!r} cannot be saved: its metadata must be "
            f"JSON-serialisable ({exc})",
            thread_id=thread_id,
        ) from exc
    if flattened:
        _flattened("messages", thread_id, message.message_id)
    return text


def load_message(text: str | bytes, *, store: object, thread_id: str) -> ConversationMessage:
    """The message stored as `text` in `store`'s thread `thread_id`."""
    try:
        return ConversationMessage.model_validate_json(text)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        raise _damaged(store, "messages", thread_id, exc) from exc


def dump_state_data(state: AgentState, thread_id: str) -> str:
    """JSON for a state's `data` (bounded in depth like a message), or a `StorageError` if it
    is not JSON-serialisable."""
    try:
        text, flattened = dump_bounded(state.data)
    except (PydanticSerializationError, ValueError, TypeError) as exc:
        raise StorageError(
            f"the agent state of thread {thread_id!r} cannot be saved: AgentState.data must "
            f"be JSON-serialisable ({exc})",
            thread_id=thread_id,
        ) from exc
    if flattened:
        _flattened("agent_states", thread_id, "data")
    return text


def load_state(data: str | bytes, version: int, *, store: object, thread_id: str) -> AgentState:
    """The state stored as `data` at `version` in `store`'s thread `thread_id`."""
    try:
        return AgentState(data=json.loads(data), version=version)
    except (ValueError, TypeError) as exc:  # json's and pydantic's errors are ValueErrors
        raise _damaged(store, "agent_states", thread_id, exc) from exc


def dump_config(config: ThreadConfig, thread_id: str) -> str:
    """JSON for a thread config; an API key is refused rather than written to a database."""
    provider = config.provider_config
    if provider is not None and provider.api_key is not None:
        raise ConfigurationError(
            f"ThreadConfig for thread {thread_id!r} carries provider_config.api_key, and "
            "storage never saves secrets: leave api_key=None in the thread config and give the "
            "key to the agent's ProviderConfig or the provider's environment variable "
            "(OPENAI_API_KEY, ANTHROPIC_API_KEY, ...)"
        )
    return config.model_dump_json()


def load_config(text: str | bytes, *, store: object, thread_id: str) -> ThreadConfig:
    """The thread config stored as `text` in `store`'s thread `thread_id`."""
    try:
        raw: dict[str, Any] = json.loads(text)
        provider_raw = raw.pop("provider_config", None)
        # ProviderConfig takes provider and model positionally, so nested validation of a plain
        # dict cannot build it: construct it explicitly and hand ThreadConfig the instance.
        provider = None
        if provider_raw is not None:
            provider = ProviderConfig(
                provider_raw.pop("provider"), provider_raw.pop("model"), **provider_raw
            )
        return ThreadConfig(provider_config=provider, **raw)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise _damaged(store, "thread_configs", thread_id, exc) from exc


def _fallback(value: Any) -> Any:
    return repr(value)


def dump_observation(observation: Observation) -> str:
    """JSON for an observation; values JSON cannot hold are saved as their `repr`.

    Observations are a log: a tool output that is not JSON must not fail the run that
    records it, so it is kept in readable form instead.
    """
    if observation.__class__ is Observation:
        # dump_bounded's steps for the common case, without its general dispatch: a run
        # records two observations per tool call.
        try:
            text = _observation_json(observation, fallback=_fallback).decode()
        except PydanticSerializationError:
            text, flattened = dump_bounded(observation, fallback=_fallback)
        else:
            # A text too short to hold MAX_DEPTH levels needs no counting (a quarter of the
            # cost of a short observation's dump); a longer one is counted as `dump_bounded`
            # counts it.
            if len(text) < _SURELY_SHALLOW or text.count("{") + text.count("[") <= MAX_DEPTH:
                return text
            text, flattened = bounded_text(observation, text, fallback=_fallback)
    else:
        text, flattened = dump_bounded(observation, fallback=_fallback)
    if flattened:
        _flattened("observations", observation.thread_id, observation.id)
    return text


# What `model_dump_json` calls, without its keyword handling. An Observation's schema is
# complete when its class is made, so its serializer is never rebuilt.
_observation_json = Observation.__pydantic_serializer__.to_json


def _shortest_observation_json() -> str:
    """The JSON of the shortest observation there can be: every string empty, both dicts
    and the parent id as short as their JSON gets, the shortest type and timestamp."""
    shortest = Observation(
        id="",
        thread_id="",
        trace_id="",
        timestamp=datetime(2000, 1, 1),  # no zone, no fraction: 19 characters
        type=min(ObservationType, key=len),
        title="",
        content={},
        metadata={},
        parent_id="",
    )
    return shortest.model_dump_json()


# An observation nests deeper than MAX_DEPTH only if its content or metadata nests MAX_DEPTH
# levels or more, which takes at least 2 * MAX_DEPTH brackets where the shortest observation
# has "{}" (2 characters): every text shorter than this is shallow enough, unread.
_SURELY_SHALLOW = 2 * MAX_DEPTH + len(_shortest_observation_json()) - 2


def load_observation(text: str | bytes, *, store: object, thread_id: str) -> Observation:
    """The observation stored as `text` in `store`'s thread `thread_id`."""
    try:
        return Observation.model_validate_json(text)
    except ValueError as exc:
        raise _damaged(store, "observations", thread_id, exc) from exc


def dump_paused_run(run: PausedRun) -> str:
    """JSON for a paused run; a tool output JSON cannot hold is saved as its `repr` (the
    resumed run's placeholders then see that text).

    A per-call provider override's API key is left out: secrets are never written to the
    store, so the resumed run calls that provider with the key from the environment.
    """
    exclude: Any = {"props": {"options": {"provider_config": {"api_key"}}}}
    text, flattened = dump_bounded(run, fallback=_fallback, exclude=exclude)
    if flattened:
        _flattened("paused_runs", run.thread_id, run.trace_id)
    return text


def load_paused_run(text: str | bytes, *, store: object, thread_id: str) -> PausedRun:
    """The paused run stored as `text` in `store`'s thread `thread_id`."""
    try:
        return PausedRun.model_validate_json(text)
    except ValueError as exc:
        raise _damaged(store, "paused_runs", thread_id, exc) from exc


def dump_task_body(body: dict[str, Any], task_id: str, thread_id: str) -> str:
    """JSON for a protocol task's document, nested at most `MAX_DEPTH` levels (a data part
    a client sent may nest deeper: that part is kept as its JSON text)."""
    if not isinstance(body, dict):
        raise UsageError(f"a task record's body must be a JSON object (a dict), not {body!r:.80}")
    text, flattened = dump_bounded(body)
    if flattened:
        _flattened("a2a_tasks", thread_id, task_id)
    return text


def load_task_body(text: str | bytes, *, store: object, thread_id: str) -> dict[str, Any]:
    """The task document stored as `text` in `store`'s thread `thread_id`."""
    try:
        body = json.loads(text)
        if not isinstance(body, dict):
            raise ValueError(f"a task is a JSON object, not {type(body).__name__}")
    except ValueError as exc:
        raise _damaged(store, "a2a_tasks", thread_id, exc) from exc
    return body


def load_rows(
    load: Callable[..., _Record], rows: Iterable[tuple[str, str | bytes]], *, store: object
) -> list[_Record]:
    """What `load` (`load_message`, ...) reads of each (thread id, text) row, in order; a row
    it cannot read is left out with a warning naming it, so it never hides the others."""
    found = []
    for thread_id, text in rows:
        try:
            found.append(load(text, store=store, thread_id=thread_id))
        except StorageError as exc:
            _log.warning("storage_row_skipped", thread_id=thread_id, reason=exc.message)
    return found


def _flattened(table: str, thread_id: str, key: str) -> None:
    _log.warning(
        "storage_data_flattened",
        table=table,
        thread_id=thread_id,
        key=key,
        detail=f"parts nested deeper than {MAX_DEPTH} levels are stored as their JSON text",
    )


def _damaged(store: object, table: str, thread_id: str, exc: Exception) -> StorageError:
    if isinstance(exc, ValidationError):
        # pydantic's own text spans lines and links; the fields and what is wrong suffice.
        detail = "; ".join(
            f"{'.'.join(map(str, error['loc'])) or 'value'}: {error['msg']}"
            for error in exc.errors()[:3]
        )
    else:
        detail = " ".join(str(exc).split())
    if len(detail) > 300:
        detail = detail[:300] + "..."
    return StorageError(
        f"{store!r}: a row of thread {thread_id!r} in table {table!r} is damaged and cannot be "
        f"read ({type(exc).__name__}: {detail}); repair or delete that row, or delete the "
        "thread with delete_thread()",
        thread_id=thread_id,
    )


# SQLite and PostgreSQL integers are 64-bit; a larger limit means "all" anyway.
_MAX_LIMIT = 2**63 - 1


def check_limit(limit: int | None) -> int | None:
    """`limit` for `get_messages`, checked: None (all) or 0..2**63-1 (larger means all)."""
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise UsageError(f"limit must be an int >= 0 or None (all messages), not {limit!r}")
    if limit < 0:
        raise UsageError(f"limit must be >= 0 or None (all messages), not {limit}")
    return min(limit, _MAX_LIMIT)
