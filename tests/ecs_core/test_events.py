"""EventBus: typed delivery to sync and async handlers; a failing handler is reported, not lost."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import pytest

from ecs_core import EventBus, HandlerErrorEvent


@dataclass
class Ping:
    n: int = 0


@dataclass
class LoudPing(Ping):
    pass


@dataclass
class Pong:
    pass


async def test_sync_handler_receives_the_published_event() -> None:
    """A plain function subscribed to Ping is called with the Ping instance."""
    bus = EventBus()
    got: list[Ping] = []
    bus.subscribe(Ping, got.append)
    event = Ping(1)
    await bus.publish(event)
    assert got == [event]
    assert got[0] is event


async def test_publish_awaits_async_handlers_to_completion() -> None:
    """publish() returns only after an async handler that suspends has finished."""
    bus = EventBus()
    done: list[str] = []

    async def handler(event: Ping) -> None:
        await asyncio.sleep(0.01)
        done.append("finished")

    bus.subscribe(Ping, handler)
    await bus.publish(Ping())
    assert done == ["finished"]


async def test_handlers_only_see_their_event_type_and_its_subclasses() -> None:
    """A Ping handler gets Ping and LoudPing but not Pong; an object handler gets everything."""
    bus = EventBus()
    pings: list[object] = []
    everything: list[object] = []
    bus.subscribe(Ping, pings.append)
    bus.subscribe(object, everything.append)
    ping, loud, pong = Ping(), LoudPing(), Pong()
    for event in (ping, loud, pong):
        await bus.publish(event)
    assert pings == [ping, loud]
    assert everything == [ping, loud, pong]


async def test_handlers_run_most_specific_class_first_then_in_subscription_order() -> None:
    """For a LoudPing, LoudPing handlers run before Ping handlers, each in subscription order."""
    bus = EventBus()
    order: list[str] = []
    bus.subscribe(Ping, lambda e: order.append("ping-1"))
    bus.subscribe(LoudPing, lambda e: order.append("loud-1"))
    bus.subscribe(Ping, lambda e: order.append("ping-2"))
    bus.subscribe(LoudPing, lambda e: order.append("loud-2"))
    await bus.publish(LoudPing())
    assert order == ["loud-1", "loud-2", "ping-1", "ping-2"]


async def test_unsubscribe_stops_delivery_and_is_idempotent() -> None:
    """After unsubscribe() the handler gets nothing; a second call does no harm."""
    bus = EventBus()
    got: list[Ping] = []
    unsubscribe = bus.subscribe(Ping, got.append)
    await bus.publish(Ping(1))
    unsubscribe()
    unsubscribe()
    await bus.publish(Ping(2))
    assert got == [Ping(1)]
    assert bus.handler_count(Ping) == 0


async def test_unsubscribe_removes_only_its_own_subscription_of_a_shared_handler() -> None:
    """The same handler subscribed twice is called twice; one unsubscribe leaves the other."""
    bus = EventBus()
    got: list[Ping] = []
    first = bus.subscribe(Ping, got.append)
    bus.subscribe(Ping, got.append)
    first()
    await bus.publish(Ping())
    assert len(got) == 1


async def test_unsubscribing_during_publish_takes_effect_next_time() -> None:
    """A handler that unsubscribes a later handler does not stop the publish in progress."""
    bus = EventBus()
    got: list[str] = []
    unsubscribe_second = None

    def first(event: Ping) -> None:
        got.append("first")
        assert unsubscribe_second is not None
        unsubscribe_second()

    bus.subscribe(Ping, first)
    unsubscribe_second = bus.subscribe(Ping, lambda e: got.append("second"))
    await bus.publish(Ping())
    await bus.publish(Ping())
    assert got == ["first", "second", "first"]


async def test_a_raising_handler_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    """Handlers after a failing one still run, and publish() itself does not raise."""
    bus = EventBus()
    got: list[str] = []

    def broken(event: Ping) -> None:
        raise RuntimeError("boom")

    async def async_broken(event: Ping) -> None:
        await asyncio.sleep(0)
        raise ValueError("async boom")

    bus.subscribe(Ping, broken)
    bus.subscribe(Ping, async_broken)
    bus.subscribe(Ping, lambda e: got.append("after"))
    with caplog.at_level(logging.ERROR, logger="ecs_core.events"):
        await bus.publish(Ping())
    assert got == ["after"]


async def test_a_raising_handler_is_logged_and_published_as_handler_error_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The failure is logged with its traceback and published with the event and exception."""
    bus = EventBus()
    reports: list[HandlerErrorEvent] = []
    error = RuntimeError("boom")

    def broken(event: Ping) -> None:
        raise error

    bus.subscribe(Ping, broken)
    bus.subscribe(HandlerErrorEvent, reports.append)
    event = Ping(3)
    with caplog.at_level(logging.ERROR, logger="ecs_core.events"):
        await bus.publish(event)
    assert len(reports) == 1
    assert reports[0].event is event
    assert reports[0].exception is error
    assert "broken" in reports[0].handler_name
    [record] = [r for r in caplog.records if r.name == "ecs_core.events"]
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None
    assert record.exc_info[1] is error
    assert "broken" in record.getMessage()


async def test_a_raising_error_handler_is_logged_but_not_reported_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A HandlerErrorEvent handler that raises is logged once; no endless chain of reports."""
    bus = EventBus()
    calls: list[HandlerErrorEvent] = []

    def broken(event: object) -> None:
        raise RuntimeError("first")

    def broken_reporter(event: HandlerErrorEvent) -> None:
        calls.append(event)
        raise RuntimeError("second")

    bus.subscribe(Ping, broken)
    bus.subscribe(HandlerErrorEvent, broken_reporter)
    with caplog.at_level(logging.ERROR, logger="ecs_core.events"):
        await asyncio.wait_for(bus.publish(Ping()), timeout=5)
    assert len(calls) == 1
    messages = [r.getMessage() for r in caplog.records if r.name == "ecs_core.events"]
    assert len(messages) == 2
    assert "not reported again" in messages[1]


async def test_cancellation_inside_a_handler_propagates() -> None:
    """CancelledError is not treated as a handler failure: it escapes publish()."""
    bus = EventBus()
    reports: list[HandlerErrorEvent] = []

    async def cancelled(event: Ping) -> None:
        raise asyncio.CancelledError

    bus.subscribe(Ping, cancelled)
    bus.subscribe(HandlerErrorEvent, reports.append)
    with pytest.raises(asyncio.CancelledError):
        await bus.publish(Ping())
    assert reports == []


def test_subscribe_rejects_a_non_class_event_type() -> None:
    """subscribe(Ping(), ...) is a mistake the message explains."""
    with pytest.raises(TypeError, match=r"event class.*bus.subscribe\(MyEvent, handler\)"):
        EventBus().subscribe(Ping(), print)  # type: ignore[arg-type]


def test_subscribe_rejects_a_non_callable_handler() -> None:
    """A handler must be callable."""
    with pytest.raises(TypeError, match="callable handler"):
        EventBus().subscribe(Ping, "print")  # type: ignore[arg-type]


async def test_publish_without_subscribers_is_a_no_op() -> None:
    """Publishing an event nobody listens to does nothing and raises nothing."""
    bus = EventBus()
    await bus.publish(Pong())
    assert bus.handler_count(Pong) == 0
