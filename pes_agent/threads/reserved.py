"""Reserved thread ids: entries pes-agent keeps in a store for itself, which are not threads.

The HTTP server (`pes_agent.server`) keeps its bookkeeping in the agent's storage, beside the
threads, as the state of thread ids starting with `RESERVED_PREFIX`: which user owns each
thread, and the runs each worker process executes (with the cancel requests for them). Every
place that lists threads to a person leaves them out (`StateManager.list_threads`, the API's
`GET /v1/threads`, `pes-agent threads`); `Storage.list_threads` itself names every id.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["RESERVED_PREFIX", "is_reserved_thread", "user_threads"]

#: Thread ids starting with this are pes-agent's own records, never a conversation.
RESERVED_PREFIX = "pes-agent-server:"


def is_reserved_thread(thread_id: str) -> bool:
    """Whether `thread_id` names one of pes-agent's own records rather than a thread."""
    return thread_id.startswith(RESERVED_PREFIX)


def user_threads(thread_ids: Iterable[str]) -> list[str]:
    """`thread_ids` without the reserved ones, in the same order."""
    return [thread_id for thread_id in thread_ids if not is_reserved_thread(thread_id)]
