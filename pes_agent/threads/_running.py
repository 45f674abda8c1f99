"""Which runs the current task is inside of: tools and subscribers inherit it (contextvars)."""

from __future__ import annotations

import contextvars

__all__ = ["EnclosingRun", "enclosing_run", "running"]


class EnclosingRun:
    """A run under way that the current task belongs to (or was started from); as a context
    manager (`running`), it marks the current task as inside the run for the block.

    The runs a task is inside of are a chain, innermost first, held by one context variable:
    each run's `contextvars.Token` keeps the run it was set over (`outer`), so no tuple of
    them is made per run, since every run in flight holds its own for its whole length and
    the garbage collector walks each of them on every full pass. The token is kept, rather
    than the variable set back by hand, so that the task's context is left as it was found
    (a finished task held on to, e.g. by `asyncio.gather`, keeps no context entry of it).
    """

    __slots__ = ("_token", "active", "thread_id", "trace_id")

    def __init__(self, thread_id: str, trace_id: str) -> None:
        self.thread_id = thread_id
        self.trace_id = trace_id
        self.active = True
        self._token: contextvars.Token[EnclosingRun | None] | None = None

    @property
    def outer(self) -> EnclosingRun | None:
        """The run the current task was inside of when this one began, if any."""
        token = self._token
        outer = None if token is None else token.old_value
        return outer if isinstance(outer, EnclosingRun) else None  # not `Token.MISSING`

    def __enter__(self) -> EnclosingRun:
        self._token = _ENCLOSING.set(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        # A task started during the run may outlive it; once over, it no longer encloses it
        # (the token is kept: such a task may still walk through this run to outer ones).
        self.active = False
        if self._token is not None and _ENCLOSING.get() is self:
            _ENCLOSING.reset(self._token)


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
