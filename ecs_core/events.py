"""Typed publish/subscribe: sync or async handlers, failures logged and reported, never lost.

`publish(event)` calls the handlers subscribed to the event's class and to each of its base
classes (most specific class first, then in subscription order), one after another, awaiting
async handlers. A handler that raises is logged on the `ecs_core.events` logger and reported
as a `HandlerErrorEvent`; the remaining handlers still run and `publish` itself never raises
for a handler's failure. A handler of `HandlerErrorEvent` that raises is only logged, so one
faulty error handler cannot recurse forever. Subscribing or unsubscribing during `publish`
takes effect from the next `publish`.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["ErrorOccurredEvent", "EventBus", "HandlerErrorEvent", "Unsubscribe"]

E = TypeVar("E")

Unsubscribe = Callable[[], None]
"""Calling it stops the subscription; calling it again does nothing."""

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ErrorOccurredEvent:
    """A system raised while the world was processing; the tick went on without it."""

    system_name: str
    exception: Exception


@dataclass(frozen=True, slots=True)
class HandlerErrorEvent:
    """An event handler raised while handling `event`; the other handlers still ran."""

    event: object
    handler_name: str
    exception: Exception


class _Subscription:
    __slots__ = ("event_type", "handler")

    def __init__(self, event_type: type[Any], handler: Callable[[Any], object]) -> None:
        self.event_type = event_type
        self.handler = handler


def _handler_name(handler: Callable[..., object]) -> str:
    return getattr(handler, "__qualname__", None) or repr(handler)


class EventBus:
    """Deliver events to the handlers subscribed to their class (or a base class)."""

    __slots__ = ("_resolved", "_subscriptions")

    def __init__(self) -> None:
        self._subscriptions: dict[type[Any], list[_Subscription]] = {}
        # Handlers per concrete event class, MRO order; rebuilt lazily after any (un)subscribe.
        self._resolved: dict[type[Any], tuple[_Subscription, ...]] = {}

    def subscribe(self, event_type: type[E], handler: Callable[[E], object]) -> Unsubscribe:
        """Call `handler(event)` for every published event that is an instance of `event_type`.

        The handler may be a plain function or an `async def`; its return value is ignored
        (awaited first if it is awaitable). Returns a function that ends this subscription.
        """
        if not isinstance(event_type, type):
            raise TypeError(
                f"subscribe() needs an event class as its first argument, got {event_type!r}; "
                "write bus.subscribe(MyEvent, handler)."
            )
        if not callable(handler):
            raise TypeError(
                f"subscribe() needs a callable handler, got {handler!r}; "
                "pass a function or an async function taking the event."
            )
        subscription = _Subscription(event_type, handler)
        self._subscriptions.setdefault(event_type, []).append(subscription)
        self._resolved.clear()

        def unsubscribe() -> None:
            subscriptions = self._subscriptions.get(event_type)
            if subscriptions is None:
                return
            for index, existing in enumerate(subscriptions):
                if existing is subscription:
                    del subscriptions[index]
                    if not subscriptions:
                        del self._subscriptions[event_type]
                    self._resolved.clear()
                    return

        return unsubscribe

    def handler_count(self, event_type: type[Any]) -> int:
        """How many handlers an event of exactly this class would reach."""
        return len(self._resolve(event_type))

    async def publish(self, event: object) -> None:
        """Deliver `event` to its handlers in turn, awaiting each; never raises for a handler."""
        subscriptions = self._resolved.get(type(event))
        if subscriptions is None:
            subscriptions = self._resolve(type(event))
        for subscription in subscriptions:
            handler = subscription.handler
            try:
                result = handler(event)
                if inspect.isawaitable(result):
                    await result
            except Exception as exc:
                name = _handler_name(handler)
                if isinstance(event, HandlerErrorEvent):
                    _log.error(
                        "handler %s failed while handling a HandlerErrorEvent; not reported "
                        "again to avoid recursion",
                        name,
                        exc_info=exc,
                    )
                    continue
                _log.error(
                    "event handler %s failed on %s", name, type(event).__name__, exc_info=exc
                )
                await self.publish(HandlerErrorEvent(event, name, exc))

    def _resolve(self, event_type: type[Any]) -> tuple[_Subscription, ...]:
        resolved = tuple(
            subscription
            for klass in event_type.__mro__
            for subscription in self._subscriptions.get(klass, ())
        )
        self._resolved[event_type] = resolved
        return resolved
