"""MessageBusSystem [5]: topics between entities, bounded queues, requests answered in time.

```python
world.register_system(MessageBusSystem(), priority=5)
bus = MessageBus(world)
bus.subscribe(researcher, "research")                  # adds/extends its MessageBusComponent
await bus.publish(writer, "research", "JWST in one line?")
cid = await bus.request(writer, "research", "Key facts on JWST", timeout_s=30)
await bus.respond(researcher, cid, "Launched 2021; 6.5 m mirror; sits at L2.")
```

Where things live: the bus state — a queue per recipient, the requests still waiting, the
counters — is one `MessageBusStateComponent` on a dedicated entity of the world, never on the
system or the `MessageBus` façade (which holds only the world). One system instance serves many
worlds; a world's bus is created the first time it is used.

How a message travels:

1. `publish` / `request` put a `BusMessage` in the queue of every entity whose
   `MessageBusComponent.subscriptions` holds the topic (exact match; the sender never gets its
   own message) and publish `MessageBusPublishedEvent` at once.
2. Each queue keeps at most the recipient's `max_queue` messages (100 without a component):
   the oldest is dropped and counted in `state.dropped[recipient]`. Queues only grow while a
   recipient cannot read — in a tool round, ended, or without a conversation — so a flood
   costs at most `max_queue` messages per recipient.
3. Every tick `MessageBusSystem` moves each readable queue into its entity's conversation as
   user messages (``"[topic] From writer: ..."``, ``"[topic] Request <id> from writer: ..."``,
   ``"[topic] Response to <id> from researcher: ..."``) and publishes
   `MessageBusDeliveredEvent` for each. Readable means what it means for direct messages
   (`pes_agent.ecs.collaboration`): a conversation, no open tool round, and not ended — except
   `"reasoning_complete"`, which mail lifts (at once, when it is queued) so the entity answers.
   An entity without a `ConversationComponent` keeps its queue for code: `await
   bus.receive(entity)` takes it.

Requests: `request` returns a correlation id and records the request with its deadline. The
first `respond` with that id before the deadline wins: `MessageBusResponseEvent`, and the
response is queued for the requester. A request unanswered at its deadline (checked every tick,
and by a `respond` that arrives late) ends in one `MessageBusTimeoutEvent` and a ``timeout``
notice queued for the requester. Any later `respond` for it — or a second one, or one for an
unknown id — is dropped, counted in `state.late_responses`, and returns False. A request with
no subscriber simply times out.

Deleted entities: messages queued for them are dropped and counted in `state.undeliverable`;
their requests still time out (or are answered) exactly once.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, assert_never

from ecs_core import EntityId, World
from pes_agent.ecs._delivery import deliver, entity_name, ready_for_mail, wake
from pes_agent.ecs.components import MessageBusComponent
from pes_agent.ecs.events import (
    BusMessageKind,
    MessageBusDeliveredEvent,
    MessageBusPublishedEvent,
    MessageBusResponseEvent,
    MessageBusTimeoutEvent,
)
from pes_agent.errors import ToolExecutionError, UsageError
from pes_agent.tools.base import Tool
from pes_agent.tools.decorator import tool

__all__ = [
    "DEFAULT_MAX_QUEUE",
    "BusMessage",
    "MessageBus",
    "MessageBusStateComponent",
    "MessageBusSystem",
    "PendingRequest",
    "bus_state",
    "message_bus_tools",
]

DEFAULT_MAX_QUEUE = 100
"""The queue bound of a recipient without a `MessageBusComponent` (a requester's responses)."""


@dataclass(frozen=True, slots=True)
class BusMessage:
    """One message in a recipient's queue; `correlation_id` ties requests to responses."""

    sender: EntityId
    topic: str
    payload: Any
    kind: BusMessageKind = "message"
    correlation_id: str | None = None


@dataclass(slots=True)
class PendingRequest:
    """A request still waiting for its first response, until `deadline` (`time.monotonic()`)."""

    requester: EntityId
    topic: str
    deadline: float


@dataclass(slots=True)
class MessageBusStateComponent:
    """World-level (on one dedicated entity): everything the bus keeps between ticks.

    `queues` holds each recipient's undelivered messages, oldest first; `dropped` how many
    messages each recipient lost to its queue bound; `pending` the requests waiting, by
    correlation id. The counters cover the world's lifetime.
    """

    queues: dict[EntityId, deque[BusMessage]] = field(default_factory=dict)
    dropped: dict[EntityId, int] = field(default_factory=dict)
    pending: dict[str, PendingRequest] = field(default_factory=dict)
    published: int = 0
    """Messages and requests published."""
    delivered: int = 0
    """Messages handed to a conversation or taken by `receive`."""
    responses: int = 0
    """Requests answered in time."""
    timeouts: int = 0
    """Requests that got no response in time."""
    late_responses: int = 0
    """Responses dropped: after a timeout, a second answer, or an unknown correlation id."""
    undeliverable: int = 0
    """Messages dropped because their recipient was deleted."""

    @property
    def total_dropped(self) -> int:
        """Messages dropped by every recipient's queue bound."""
        return sum(self.dropped.values())


class MessageBus:
    """The typed way to use a world's message bus; it holds nothing but the world.

    Every method works on the world's `MessageBusStateComponent` (created on first use), so
    two `MessageBus(world)` objects are the same bus.
    """

    __slots__ = ("world",)

    def __init__(self, world: World) -> None:
        self.world = world

    @property
    def state(self) -> MessageBusStateComponent:
        """The world's bus state: queues, pending requests and counters."""
        return bus_state(self.world)

    def subscribe(self, entity: EntityId, *topics: str) -> None:
        """Make `entity` receive `topics`, adding a `MessageBusComponent` if it has none."""
        for topic in topics:
            _check_topic(topic)
        component = self.world.get_component(entity, MessageBusComponent)
        if component is None:
            self.world.add_component(entity, MessageBusComponent(set(topics)))
        else:
            component.subscriptions.update(topics)

    def unsubscribe(self, entity: EntityId, *topics: str) -> None:
        """Stop `entity` receiving `topics`; messages already queued for it stay."""
        component = self.world.get_component(entity, MessageBusComponent)
        if component is not None:
            component.subscriptions.difference_update(topics)

    async def publish(self, sender: EntityId, topic: str, payload: Any) -> int:
        """Queue `payload` for every subscriber of `topic` but `sender`; return how many.

        Publishes `MessageBusPublishedEvent(sender, topic, payload)`. `payload` may be any
        value; a conversation shows a str as it is and anything else as JSON.
        """
        _check_topic(topic)
        state = self.state
        state.published += 1
        reached = _fan_out(self.world, state, BusMessage(sender, topic, payload))
        await self.world.events.publish(MessageBusPublishedEvent(sender, topic, payload))
        return reached

    async def request(
        self, sender: EntityId, topic: str, payload: Any, *, timeout_s: float = 30.0
    ) -> str:
        """Ask the subscribers of `topic`; return the correlation id their answer must carry.

        The first `respond` within `timeout_s` seconds reaches `sender` (see the module
        docstring); otherwise the request times out, once.
        """
        _check_topic(topic)
        if not isinstance(timeout_s, int | float) or not math.isfinite(timeout_s) or timeout_s <= 0:
            raise UsageError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        state = self.state
        correlation_id = uuid.uuid4().hex[:12]
        while correlation_id in state.pending:  # 48 random bits: a clash is rare, never silent
            correlation_id = uuid.uuid4().hex[:12]
        state.pending[correlation_id] = PendingRequest(sender, topic, time.monotonic() + timeout_s)
        state.published += 1
        message = BusMessage(sender, topic, payload, "request", correlation_id)
        _fan_out(self.world, state, message)
        await self.world.events.publish(
            MessageBusPublishedEvent(sender, topic, payload, correlation_id)
        )
        return correlation_id

    async def respond(self, responder: EntityId, correlation_id: str, payload: Any) -> bool:
        """Answer the request `correlation_id`; False when the answer was dropped as late.

        In time and first: `MessageBusResponseEvent`, and the response is queued for the
        requester. After the deadline the request times out here (if the tick has not already
        timed it out) and the answer is dropped; so is a second answer or an unknown id.
        """
        state = self.state
        pending = state.pending.get(correlation_id)
        if pending is None:
            state.late_responses += 1
            return False
        if time.monotonic() >= pending.deadline:
            # Overdue but not yet seen by a tick: it times out now, exactly once.
            state.late_responses += 1
            await self.world.events.publish(_expire(self.world, state, correlation_id, pending))
            return False
        del state.pending[correlation_id]
        state.responses += 1
        _enqueue(
            self.world,
            state,
            pending.requester,
            BusMessage(responder, pending.topic, payload, "response", correlation_id),
        )
        await self.world.events.publish(
            MessageBusResponseEvent(pending.requester, responder, correlation_id, payload)
        )
        return True

    async def receive(self, entity: EntityId) -> list[BusMessage]:
        """Take every message queued for `entity`, oldest first (for entities run by code).

        Publishes `MessageBusDeliveredEvent` for each, as delivery into a conversation does.
        """
        queue = self.state.queues.pop(entity, None)
        if not queue:
            return []
        messages = list(queue)
        self.state.delivered += len(messages)
        for message in messages:
            await self.world.events.publish(_delivered_event(entity, message))
        return messages

    def queued(self, entity: EntityId) -> tuple[BusMessage, ...]:
        """The messages waiting for `entity`, oldest first, without taking them."""
        return tuple(self.state.queues.get(entity, ()))

    def dropped(self, entity: EntityId) -> int:
        """How many messages `entity` lost because its queue was full."""
        return self.state.dropped.get(entity, 0)


class MessageBusSystem:
    """Each tick: times out overdue requests, then hands readable queues to conversations.

    Overdue requests: each gets one `MessageBusTimeoutEvent(requester, topic, correlation_id)`
    and a ``timeout`` notice in the requester's queue. Queues of deleted entities are dropped
    (counted in `undeliverable`). Every other queue whose entity can read now (see the module
    docstring) becomes user messages, with one `MessageBusDeliveredEvent` each. The system
    keeps nothing itself; all of it is the world's `MessageBusStateComponent`.
    """

    __slots__ = ()

    async def process(self, world: World) -> None:
        """Time out overdue requests and deliver what every readable recipient has queued."""
        state = _find(world)
        if state is None:
            return  # nobody used this world's bus yet
        now = time.monotonic()
        overdue = [(cid, p) for cid, p in state.pending.items() if now >= p.deadline]
        # Timed out first, so each notice is delivered with the rest of this tick's mail.
        timeouts = [_expire(world, state, cid, pending) for cid, pending in overdue]
        delivered: list[MessageBusDeliveredEvent] = []
        # A snapshot: tools running beside this system in the tick may queue more meanwhile.
        for entity, queue in list(state.queues.items()):
            if not world.entity_exists(entity):
                state.undeliverable += len(queue)
                del state.queues[entity]
            elif queue and ready_for_mail(world, entity):
                messages = list(queue)
                del state.queues[entity]
                deliver(world, entity, [_render(world, m) for m in messages])
                state.delivered += len(messages)
                delivered.extend(_delivered_event(entity, m) for m in messages)
        # Events last, once the state is consistent: a handler may publish or respond.
        for event in timeouts:
            await world.events.publish(event)
        for delivery in delivered:
            await world.events.publish(delivery)


def bus_state(world: World) -> MessageBusStateComponent:
    """The world's bus state, created (on a dedicated entity) the first time it is needed."""
    state = _find(world)
    if state is None:
        state = MessageBusStateComponent()
        world.create_entity(state)
    return state


def message_bus_tools(
    world: World, entity: EntityId, *, request_timeout_s: float = 60.0
) -> list[Tool]:
    """Tools for `entity`'s model to use the bus: publish, request and respond.

    ``publish_message(topic, message)``, ``send_request(topic, message)`` (returns the
    correlation id; the answer arrives later as a user message) and
    ``respond_to_request(correlation_id, message)``. Put them in the entity's
    `ToolRegistryComponent`.
    """
    bus = MessageBus(world)

    # async tools: they run on the event loop, as touching the world requires.
    @tool(name="publish_message")
    async def publish_message(topic: str, message: str) -> str:
        """Publish a message to every agent subscribed to a topic."""
        reached = await bus.publish(entity, topic, message)
        return f"Published to {reached} subscriber(s) of {topic!r}."

    @tool(name="send_request")
    async def send_request(topic: str, message: str) -> str:
        """Ask the agents subscribed to a topic; their answer arrives later as a message."""
        correlation_id = await bus.request(entity, topic, message, timeout_s=request_timeout_s)
        return f"Request {correlation_id} sent on {topic!r}; the answer will arrive as a message."

    @tool(name="respond_to_request")
    async def respond_to_request(correlation_id: str, message: str) -> str:
        """Answer a request you received, by its correlation id."""
        if not await bus.respond(entity, correlation_id.strip(), message):
            raise ToolExecutionError(
                f"request {correlation_id!r} is not waiting for an answer (answered already, "
                "timed out, or unknown); nothing was sent"
            )
        return f"Answered request {correlation_id}."

    return [publish_message, send_request, respond_to_request]


def _find(world: World) -> MessageBusStateComponent | None:
    for _, (state,) in world.query(MessageBusStateComponent):
        return state
    return None


def _check_topic(topic: object) -> None:
    if not isinstance(topic, str) or not topic:
        raise UsageError(f"a topic is a non-empty str, e.g. 'research'; got {topic!r}")


def _subscribers(world: World, topic: str) -> Iterable[EntityId]:
    for entity, (component,) in world.query(MessageBusComponent):
        if topic in component.subscriptions:
            yield entity


def _fan_out(world: World, state: MessageBusStateComponent, message: BusMessage) -> int:
    reached = 0
    for entity in _subscribers(world, message.topic):
        if entity != message.sender:
            _enqueue(world, state, entity, message)
            reached += 1
    return reached


def _enqueue(
    world: World, state: MessageBusStateComponent, entity: EntityId, message: BusMessage
) -> None:
    if not world.entity_exists(entity):
        state.undeliverable += 1
        return
    queue = state.queues.get(entity)
    if queue is None:
        queue = state.queues[entity] = deque()
    queue.append(message)
    component = world.get_component(entity, MessageBusComponent)
    # Read at every message, so a max_queue changed at runtime takes effect at once.
    limit = max(component.max_queue if component is not None else DEFAULT_MAX_QUEUE, 0)
    excess = len(queue) - limit
    if excess > 0:
        for _ in range(excess):
            queue.popleft()
        state.dropped[entity] = state.dropped.get(entity, 0) + excess
    wake(world, entity)


def _expire(
    world: World, state: MessageBusStateComponent, correlation_id: str, pending: PendingRequest
) -> MessageBusTimeoutEvent:
    """Time out a pending request: count it, queue the notice, return the event to publish."""
    del state.pending[correlation_id]
    state.timeouts += 1
    notice = BusMessage(pending.requester, pending.topic, None, "timeout", correlation_id)
    _enqueue(world, state, pending.requester, notice)
    return MessageBusTimeoutEvent(pending.requester, pending.topic, correlation_id)


def _render(world: World, message: BusMessage) -> str:
    """The user message a conversation gets for `message`."""
    topic, cid = message.topic, message.correlation_id
    sender = entity_name(world, message.sender)
    text = _text(message.payload)
    match message.kind:
        case "message":
            return f"[{topic}] From {sender}: {text}"
        case "request":
            return f"[{topic}] Request {cid} from {sender}: {text}"
        case "response":
            return f"[{topic}] Response to {cid} from {sender}: {text}"
        case "timeout":
            return f"[{topic}] Request {cid} got no response in time."
        case _:
            assert_never(message.kind)


def _text(payload: Any) -> str:
    if isinstance(payload, str):
        return payload
    return json.dumps(payload, ensure_ascii=False, default=str)


def _delivered_event(recipient: EntityId, message: BusMessage) -> MessageBusDeliveredEvent:
    return MessageBusDeliveredEvent(
        recipient,
        message.topic,
        message.payload,
        message.correlation_id,
        sender=message.sender,
        kind=message.kind,
    )
