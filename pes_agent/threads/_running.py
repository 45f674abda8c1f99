"""Which runs the current task is inside of: tools and subscribers inherit it (contextvars)."""

from __future__ import annotations

import contextvars

__all__ = ["EnclosingRun", "enclosing_run", "running"]


class EnclosingRun:
    """A run under way that the current task belongs to (or was started from); as a context
    manager (`running`), it marks the current task as inside the run for the block.

    The runs a task is inside of are a chain, innermost first (`outer`), held by one context
    variable: no tuple and no `contextvars.Token` kept per run (the variable is set back to
    `outer` on the way out), since every run in flight holds one for its whole length and the
    garbage collector walks each of them on every full pass.
    """

    __slots__ = ("active", "outer", "thread_id", "trace_id")

    def __init__(self, thread_id: str, trace_id: str) -> None:
        self.thread_id = thread_id
        self.trace_id = trace_id
        self.active = False
        self.outer: EnclosingRun | None = None

    def __enter__(self) -> EnclosingRun:
        self.outer = _ENCLOSING.get()
        self.active = True
        _ENCLOSING.set(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        # A task started during the run may outlive it; once over, it no longer encloses it.
        if self.active:
            self.active = False
            _ENCLOSING.set(self.outer)


_ENCLOSING: contextvars.ContextVar[EnclosingRun | None] = contextvars.ContextVar(
    "pes_agent_enclosing_runs", default=None
)


def running(thread_id: str, trace_id: str) -> EnclosingRun:
    """Mark the current task (and the tasks it starts) as inside this run for the `with`
    block (a class, not a generator: one object a run)."""
    return EnclosingRun(thread_id, trace_id)


def enclosing_run(thread_id: str) -> EnclosingRun | None:
    """The run on `thread_id` still under way that the current task is inside of, if any."""
    run = _ENCLOSING.get()
    while run is not None:
        if run.thread_id == thread_id and run.active:
            return run
        run = run.outer
    return None
