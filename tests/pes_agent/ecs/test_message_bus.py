"""MessageBusSystem: topics reach their subscribers, queues stay bounded, requests end once."""

from __future__ import annotations

import asyncio

import pytest

from ecs_core import EntityId, Runner, TerminalComponent, World
from pes_agent.ecs.components import (
    AgentIdentityComponent,
    ConversationComponent,
    LLMComponent,
    MessageBusComponent,
    PendingToolCallsComponent,
    ToolRegistryComponent,
)
from pes_agent.ecs.events import (
    MessageBusDeliveredEvent,
    MessageBusPublishedEvent,
    MessageBusResponseEvent,
    MessageBusTimeoutEvent,
)
from pes_agent.ecs.message_bus import (
    MessageBus,
    MessageBusStateComponent,
    MessageBusSystem,
    message_bus_tools,
)
from pes_agent.ecs.messages import ChatMessage, ToolCall
from pes_agent.ecs.reasoning import ReasoningSystem
from pes_agent.ecs.tool_execution import ToolExecutionSystem
from pes_agent.errors import UsageError
from pes_agent.providers.base import LLMRequest
from pes_agent.testing import ScriptedProvider, ScriptedResponse
from tests.pes_agent.ecs.conftest import EventLog

BUS_EVENTS = (
    MessageBusPublishedEvent,
    MessageBusDeliveredEvent,
    MessageBusResponseEvent,
    MessageBusTimeoutEvent,
)


@pytest.fixture
def log(world: World) -> EventLog:
    """The world with MessageBusSystem [5]; every bus event it sees."""
    world.register_system(MessageBusSystem(), priority=5)
    return EventLog(world, *BUS_EVENTS)


def agent(world: World, name: str, *topics: str, max_queue: int = 100) -> EntityId:
    """A named entity with a conversation, subscribed to `topics`."""
    return world.create_entity(
        AgentIdentityComponent(name),
        ConversationComponent(),
        MessageBusComponent(set(topics), max_queue=max_queue),
    )


def texts(world: World, entity: EntityId) -> list[str]:
    return [m.content for m in world.require_component(entity, ConversationComponent).messages]


async def test_a_topic_reaches_its_subscribers_only(world: World, log: EventLog) -> None:
    """A message on a topic lands in its subscribers' conversations and nowhere else."""
    bus = MessageBus(world)
    sender = agent(world, "writer", "news")  # subscribed, yet never gets its own message
    reader = agent(world, "reader", "news")
    fan = agent(world, "fan", "sports")
    loner = agent(world, "loner")
    assert await bus.publish(sender, "news", "hello") == 1
    await world.process()
    assert texts(world, reader) == ["[news] From writer: hello"]
    assert texts(world, sender) == texts(world, fan) == texts(world, loner) == []
    assert log.events == [
        MessageBusPublishedEvent(sender, "news", "hello"),
        MessageBusDeliveredEvent(reader, "news", "hello", sender=sender, kind="message"),
    ]
    assert (bus.state.published, bus.state.delivered) == (1, 1)


async def test_a_structured_payload_reads_as_json(world: World, log: EventLog) -> None:
    """A non-text payload reaches the conversation as JSON and the event as the object."""
    bus = MessageBus(world)
    reader = agent(world, "reader", "data")
    await bus.publish(agent(world, "probe"), "data", {"celsius": 21})
    await world.process()
    assert texts(world, reader) == ['[data] From probe: {"celsius": 21}']
    assert log.of(MessageBusDeliveredEvent)[0].payload == {"celsius": 21}


async def test_a_flood_keeps_each_queue_bounded_and_counts_the_drops(
    world: World, log: EventLog
) -> None:
    """10,000 messages into max_queue=100 keep the newest 100 and count 9,900 drops per reader."""
    bus = MessageBus(world)
    sender = world.create_entity()
    # Neither can read during the flood: one is run by code, one is in a tool round.
    by_code = world.create_entity(MessageBusComponent({"firehose"}, max_queue=100))
    busy = agent(world, "busy", "firehose", max_queue=10)
    world.add_component(busy, PendingToolCallsComponent([ToolCall("c1", "slow", {})]))
    for n in range(10_000):
        await bus.publish(sender, "firehose", n)
    await world.process()
    assert [m.payload for m in bus.queued(by_code)] == list(range(9_900, 10_000))
    assert bus.dropped(by_code) == 9_900
    assert bus.dropped(busy) == 9_990
    assert bus.state.total_dropped == 9_900 + 9_990
    assert texts(world, busy) == []
    world.remove_component(busy, PendingToolCallsComponent)
    await world.process()
    assert texts(world, busy) == [
        f"[firehose] From entity-{sender}: {n}" for n in range(9_990, 10_000)
    ]
    assert len(log.of(MessageBusDeliveredEvent)) == 10
    taken = await bus.receive(by_code)
    assert len(taken) == 100
    assert bus.queued(by_code) == ()
    assert len(log.of(MessageBusDeliveredEvent)) == 110


async def test_a_request_is_answered_once_and_never_times_out(world: World, log: EventLog) -> None:
    """The responder sees the request with its id; the first answer reaches the requester."""
    bus = MessageBus(world)
    writer = agent(world, "writer")
    researcher = agent(world, "researcher", "research")
    cid = await bus.request(writer, "research", "JWST facts?", timeout_s=30)
    await world.process()
    assert texts(world, researcher) == [f"[research] Request {cid} from writer: JWST facts?"]
    assert await bus.respond(researcher, cid, "Launched in 2021.") is True
    assert await bus.respond(researcher, cid, "Also: 6.5 m mirror.") is False  # second answer
    for _ in range(3):
        await world.process()
    assert texts(world, writer) == [
        f"[research] Response to {cid} from researcher: Launched in 2021."
    ]
    assert log.of(MessageBusResponseEvent) == [
        MessageBusResponseEvent(writer, researcher, cid, "Launched in 2021.")
    ]
    assert log.of(MessageBusTimeoutEvent) == []
    assert log.of(MessageBusPublishedEvent) == [
        MessageBusPublishedEvent(writer, "research", "JWST facts?", cid)
    ]
    state = bus.state
    assert (state.responses, state.late_responses, state.pending) == (1, 1, {})


async def test_an_unanswered_request_times_out_once_and_drops_a_late_answer(
    world: World, log: EventLog
) -> None:
    """One timeout event and a notice for the requester; an answer after it is dropped, counted."""
    bus = MessageBus(world)
    writer = agent(world, "writer")
    researcher = agent(world, "researcher", "research")
    cid = await bus.request(writer, "research", "anyone?", timeout_s=0.01)
    await world.process()
    await asyncio.sleep(0.03)
    for _ in range(3):
        await world.process()
    assert log.of(MessageBusTimeoutEvent) == [MessageBusTimeoutEvent(writer, "research", cid)]
    assert texts(world, writer) == [f"[research] Request {cid} got no response in time."]
    assert await bus.respond(researcher, cid, "sorry, late") is False
    await world.process()
    assert log.of(MessageBusResponseEvent) == []
    assert len(log.of(MessageBusTimeoutEvent)) == 1
    assert (bus.state.timeouts, bus.state.late_responses) == (1, 1)
    assert len(texts(world, writer)) == 1  # the late answer never reaches the requester


async def test_an_answer_after_the_deadline_but_before_a_tick_times_out_once(
    world: World, log: EventLog
) -> None:
    """An overdue request answered before any tick saw it times out then, and only then."""
    bus = MessageBus(world)
    writer = agent(world, "writer")
    cid = await bus.request(writer, "research", "anyone?", timeout_s=0.01)
    await asyncio.sleep(0.03)
    assert await bus.respond(agent(world, "late"), cid, "here!") is False
    for _ in range(3):
        await world.process()
    assert log.of(MessageBusTimeoutEvent) == [MessageBusTimeoutEvent(writer, "research", cid)]
    assert log.of(MessageBusResponseEvent) == []
    assert (bus.state.timeouts, bus.state.late_responses) == (1, 1)


async def test_an_unknown_correlation_id_is_dropped_and_counted(world: World) -> None:
    """Answering a request that never existed returns False and counts a late response."""
    bus = MessageBus(world)
    assert await bus.respond(world.create_entity(), "no-such-request", "?") is False
    assert bus.state.late_responses == 1


async def test_each_of_many_requesters_gets_its_own_answer(world: World, log: EventLog) -> None:
    """100 requests answered by one code-run responder reach their own requesters only."""
    bus = MessageBus(world)
    responder = world.create_entity(MessageBusComponent({"square"}, max_queue=1_000))
    requesters = [agent(world, f"asker{n}") for n in range(100)]
    ids = {await bus.request(e, "square", n): e for n, e in enumerate(requesters)}
    for request in await bus.receive(responder):
        assert request.correlation_id is not None
        await bus.respond(responder, request.correlation_id, request.payload**2)
    await world.process()
    for cid, requester in ids.items():
        n = requesters.index(requester)
        assert texts(world, requester) == [
            f"[square] Response to {cid} from entity-{responder}: {n * n}"
        ]
    assert len(log.of(MessageBusResponseEvent)) == 100
    assert bus.state.pending == {}


async def test_a_finished_subscriber_wakes_and_one_ended_otherwise_waits(
    world: World, log: EventLog
) -> None:
    """Mail lifts "reasoning_complete" at once; a "reasoning_failed" entity keeps it queued."""
    bus = MessageBus(world)
    done = agent(world, "done", "news")
    world.add_component(done, TerminalComponent("reasoning_complete"))
    failed = agent(world, "failed", "news")
    world.add_component(failed, TerminalComponent("reasoning_failed"))
    await bus.publish(world.create_entity(), "news", "wake up")
    assert not world.has_component(done, TerminalComponent)  # a Runner would not stop now
    await world.process()
    assert len(texts(world, done)) == 1
    assert texts(world, failed) == []
    assert [m.payload for m in bus.queued(failed)] == ["wake up"]
    assert world.require_component(failed, TerminalComponent).reason == "reasoning_failed"


async def test_mail_for_a_deleted_recipient_is_counted_undeliverable(
    world: World, log: EventLog
) -> None:
    """A recipient deleted with mail queued loses it, counted, and its queue is removed."""
    bus = MessageBus(world)
    reader = world.create_entity(MessageBusComponent({"news"}))
    await bus.publish(world.create_entity(), "news", 1)
    await bus.publish(world.create_entity(), "news", 2)
    world.delete_entity(reader)
    await world.process()
    assert bus.state.undeliverable == 2
    assert reader not in bus.state.queues
    assert log.of(MessageBusDeliveredEvent) == []


async def test_subscribe_and_unsubscribe_change_what_arrives(world: World) -> None:
    """subscribe adds a MessageBusComponent when missing; unsubscribe stops later messages."""
    bus = MessageBus(world)
    reader = world.create_entity()
    bus.subscribe(reader, "a", "b")
    assert world.require_component(reader, MessageBusComponent).subscriptions == {"a", "b"}
    await bus.publish(world.create_entity(), "a", "first")
    bus.unsubscribe(reader, "a")
    await bus.publish(world.create_entity(), "a", "second")
    assert [m.payload for m in bus.queued(reader)] == ["first"]


async def test_bad_topics_and_timeouts_are_usage_errors(world: World) -> None:
    """An empty topic or a non-positive timeout raises UsageError saying what is expected."""
    bus = MessageBus(world)
    sender = world.create_entity()
    with pytest.raises(UsageError, match="non-empty str"):
        await bus.publish(sender, "", "x")
    with pytest.raises(UsageError, match="positive number of seconds"):
        await bus.request(sender, "t", "x", timeout_s=0)
    assert bus.state.published == 0


async def test_models_request_and_respond_through_the_bus_tools(world: World) -> None:
    """A writer's model asks over the bus, a researcher's model answers, the writer uses it."""
    world.register_system(ReasoningSystem(), priority=0)
    world.register_system(ToolExecutionSystem(), priority=5)
    world.register_system(MessageBusSystem(), priority=5)
    writer = agent(world, "writer")
    researcher = agent(world, "researcher", "research")

    def answer(request: LLMRequest) -> ScriptedResponse:
        asked = request.messages[-1].content
        cid = asked.split()[2]  # "[research] Request <id> from writer: ..."
        call = ToolCall("r1", "respond_to_request", {"correlation_id": cid, "message": "2021"})
        return ScriptedResponse(tool_calls=[call])

    ask = ToolCall("w1", "send_request", {"topic": "research", "message": "JWST launch year?"})
    writer_model = ScriptedProvider(
        [
            ScriptedResponse(tool_calls=[ask]),
            "Waiting for the researcher.",
            lambda r: f"Draft: JWST launched in {r.messages[-1].content.rsplit(': ', 1)[1]}.",
        ]
    )
    world.add_component(writer, LLMComponent(writer_model))
    world.add_component(writer, ToolRegistryComponent(message_bus_tools(world, writer)))
    world.add_component(researcher, LLMComponent(ScriptedProvider([answer, "Answered."])))
    world.add_component(researcher, ToolRegistryComponent(message_bus_tools(world, researcher)))
    world.require_component(writer, ConversationComponent).messages.append(
        ChatMessage("user", "Write one line on JWST.")
    )
    result = await Runner().run(world, until=[writer, researcher], max_ticks=20)
    assert result.finished
    assert texts(world, writer)[-1] == "Draft: JWST launched in 2021."
    assert MessageBus(world).state.responses == 1


async def test_one_system_serves_two_worlds_without_mixing_them() -> None:
    """One system instance in two worlds keeps each world's bus, queues and counters apart."""
    system = MessageBusSystem()
    worlds = [World(), World()]
    readers = []
    for world in worlds:
        world.register_system(system, priority=5)
        readers.append(agent(world, "reader", "news"))
    assert readers[0] == readers[1]  # the same ids in both worlds, so mixing would show
    await MessageBus(worlds[0]).publish(worlds[0].create_entity(), "news", "only in world 0")
    for world in worlds:
        await world.process()
    assert texts(worlds[0], readers[0]) == ["[news] From entity-2: only in world 0"]
    assert texts(worlds[1], readers[1]) == []
    assert [len(list(w.query(MessageBusStateComponent))) for w in worlds] == [1, 0]
