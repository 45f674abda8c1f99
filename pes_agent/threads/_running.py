"""Which runs the current task is inside of: tools and subscribers inherit it (contextvars)."""

from __future__ import annotations

import contextvars

__all__ = ["EnclosingRun", "enclosing_run", "running"]


class EnclosingRun:
    """A run under way that the current task belongs to (or was started from); as a context
    manager (`running`), it marks the current task as inside the run for the block."""

    __slots__ = ("_token", "active", "thread_id", "trace_id")

    def __init__(self, thread_id: str, trace_id: str) -> None:
        self.thread_id = thread_id
        self.trace_id = trace_id
        self.active = True
        self._token: contextvars.Token[tuple[EnclosingRun, ...]] | None = None

    def __enter__(self) -> EnclosingRun:
        self._token = _ENCLOSING.set((*_ENCLOSING.get(), self))
        return self

    def __exit__(self, *exc_info: object) -> None:
        # A task started during the run may outlive it; once over, it no longer encloses it.
        self.active = False
        if self._token is not None:
            _ENCLOSING.reset(self._token)
            self._token = None


_ENCLOSING: contextvars.ContextVar[tuple[EnclosingRun, ...]] = contextvars.ContextVar(
    "pes_agent_enclosing_runs", default=()
)


def running(thread_id: str, trace_id: str) -> EnclosingRun:
    """Mark the current task (and the tasks it starts) as inside this run for the `with`
    block (a class, not a generator: one object a run)."""
    return EnclosingRun(thread_id, trace_id)


def enclosing_run(thread_id: str) -> EnclosingRun | None:
    """The run on `thread_id` still under way that the current task is inside of, if any."""
    for run in _ENCLOSING.get():
        if run.thread_id == thread_id and run.active:
            return run
    return None
