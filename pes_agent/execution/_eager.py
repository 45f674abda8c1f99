"""Run a coroutine eagerly: as far as it goes without waiting, in the caller's task.

`run_eagerly(coro)` takes the coroutine's first step at once; if it finished, that is all
(None). If it waited, the rest is returned as an awaitable, which goes on driving the same
coroutine in the task that awaits it, exactly as an `await coro` would have from the point
where it waited (results, exceptions and cancellation pass through unchanged). This is what
Python 3.12's eager tasks do, without a task: the executor uses it to know whether a hook
finished without waiting before it goes on with the next call of a chain.
"""

from __future__ import annotations

import types
from collections.abc import Coroutine, Generator
from contextvars import Context
from typing import Any, TypeVar

__all__ = ["rest_of", "run_eagerly"]

T = TypeVar("T")


def run_eagerly(
    coro: Coroutine[Any, Any, None], context: Context | None = None
) -> Coroutine[Any, Any, None] | None:
    """Run `coro` until it first waits: None if it finished, else the rest to await.

    Args:
        coro: A coroutine not started yet.
        context: The context every step of `coro` runs in (as a task's own context is), the
            rest's too; None runs it in the caller's.

    Returns:
        None if `coro` finished without waiting, else an awaitable that drives it on.

    Raises:
        BaseException: Whatever `coro` raised before it first waited.
    """
    try:
        waited = coro.send(None) if context is None else context.run(coro.send, None)
    except StopIteration:
        return None
    if context is None:
        return rest_of(coro, waited)
    return _rest_in(context, coro, waited)


@types.coroutine
def rest_of(coro: Coroutine[Any, Any, T], waited: Any) -> Generator[Any, Any, T]:
    """Drive `coro` on from where its first step yielded `waited`, to what it returns (PEP
    380's `yield from`, written out): for a caller that took that step itself, with
    `coro.send(None)`, to see whether it waits."""
    while True:
        try:
            sent = yield waited
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:  # a cancellation, thrown in by the task: pass it on
            try:
                waited = coro.throw(exc)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
        else:
            try:
                waited = coro.send(sent)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]


@types.coroutine
def _rest_in(
    context: Context, coro: Coroutine[Any, Any, None], waited: Any
) -> Generator[Any, Any, None]:
    """`_rest`, each step of `coro` in `context`."""
    while True:
        try:
            sent = yield waited
        except GeneratorExit:
            context.run(coro.close)
            raise
        except BaseException as exc:  # a cancellation, thrown in by the task: pass it on
            try:
                waited = context.run(coro.throw, exc)
            except StopIteration:
                return
        else:
            try:
                waited = context.run(coro.send, sent)
            except StopIteration:
                return
