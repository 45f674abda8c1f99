"""Which runs the current task is inside of: tools and subscribers inherit it (contextvars)."""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["EnclosingRun", "enclosing_run", "running"]


class EnclosingRun:
    """A run under way that the current task belongs to (or was started from)."""

    __slots__ = ("active", "thread_id", "trace_id")

    def __init__(self, thread_id: str, trace_id: str) -> None:
        self.thread_id = thread_id
        self.trace_id = trace_id
        self.active = True


_ENCLOSING: contextvars.ContextVar[tuple[EnclosingRun, ...]] = contextvars.ContextVar(
    "pes_agent_enclosing_runs", default=()
)


@contextmanager
def running(thread_id: str, trace_id: str) -> Iterator[EnclosingRun]:
    """Mark the current task (and the tasks it starts) as inside this run until it ends."""
    run = EnclosingRun(thread_id, trace_id)
    token = _ENCLOSING.set((*_ENCLOSING.get(), run))
    try:
        yield run
    finally:
        # A task started during the run may outlive it; once over, it no longer encloses it.
        run.active = False
        _ENCLOSING.reset(token)


def enclosing_run(thread_id: str) -> EnclosingRun | None:
    """The run on `thread_id` still under way that the current task is inside of, if any."""
    for run in _ENCLOSING.get():
        if run.thread_id == thread_id and run.active:
            return run
    return None
