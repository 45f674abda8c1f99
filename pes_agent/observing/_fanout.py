"""Delivering one item to many filtered subscribers, sync or async, isolating their failures."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from pes_agent.observing.logs import get_logger

__all__ = ["Fanout"]

T = TypeVar("T")

_log = get_logger("pes_agent.subscribers")


@dataclass(slots=True)
class _Subscriber(Generic[T]):
    callback: Callable[[T], Awaitable[None] | None]
    wants: Callable[[T], bool]


class Fanout(Generic[T]):
    """Subscribers with filters; a raising subscriber is logged and the others still run."""

    def __init__(self, label: str) -> None:
        self._label = label
        #: Replaced on each change, never changed in place. Read it for "anyone there?" on a
        #: hot path: `bool(fanout)` is a call of `__bool__` for every item.
        self.subscribers: list[_Subscriber[T]] = []

    def __bool__(self) -> bool:
        return bool(self.subscribers)

    def add(
        self, callback: Callable[[T], Awaitable[None] | None], wants: Callable[[T], bool]
    ) -> Callable[[], None]:
        subscriber = _Subscriber(callback, wants)
        # Copied on write: a delivery under way goes on over the list it started with.
        self.subscribers = [*self.subscribers, subscriber]

        def unsubscribe() -> None:
            if subscriber in self.subscribers:
                self.subscribers = [s for s in self.subscribers if s is not subscriber]

        return unsubscribe

    async def deliver(self, item: T) -> None:
        pending = self.deliver_now(item)
        if pending is not None:
            await pending

    def deliver_now(self, item: T) -> Awaitable[None] | None:
        """Call the subscribers that want `item`, in order, without awaiting: None once all
        have been called, or, at the first that returned an awaitable, what finishes the
        delivery (that awaitable, then the subscribers after it) for the caller to await.

        A run's observations reach sync subscribers (tracing, a console's queue) this way
        without a coroutine each."""
        return self._deliver_from(self.subscribers, item)

    def _deliver_from(self, subscribers: list[_Subscriber[T]], item: T) -> Awaitable[None] | None:
        for index, subscriber in enumerate(subscribers):
            if not subscriber.wants(item):
                continue
            try:
                outcome = subscriber.callback(item)
            except Exception:
                _log.exception("subscriber_failed", stream=self._label)
                continue
            if outcome is not None and inspect.isawaitable(outcome):
                return self._finish(outcome, subscribers[index + 1 :], item)
        return None

    async def _finish(self, outcome: Awaitable[None], rest: list[_Subscriber[T]], item: T) -> None:
        """Await `outcome`, then deliver to the subscribers after its own."""
        try:
            await outcome
        except Exception:
            _log.exception("subscriber_failed", stream=self._label)
        pending = self._deliver_from(rest, item)
        if pending is not None:
            await pending
