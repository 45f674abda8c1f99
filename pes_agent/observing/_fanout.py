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
        self._subscribers: list[_Subscriber[T]] = []

    def __bool__(self) -> bool:
        return bool(self._subscribers)

    def add(
        self, callback: Callable[[T], Awaitable[None] | None], wants: Callable[[T], bool]
    ) -> Callable[[], None]:
        subscriber = _Subscriber(callback, wants)
        self._subscribers.append(subscriber)

        def unsubscribe() -> None:
            if subscriber in self._subscribers:
                self._subscribers.remove(subscriber)

        return unsubscribe

    async def deliver(self, item: T) -> None:
        for subscriber in tuple(self._subscribers):
            if not subscriber.wants(item):
                continue
            try:
                outcome = subscriber.callback(item)
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception:
                _log.exception("subscriber_failed", stream=self._label)
