"""Two agents, a writer and a researcher, working together over the ECS message bus.

    python examples/multi_agent.py                                 # offline, scripted models
    PES_MODEL=openai:gpt-4o-mini python examples/multi_agent.py    # a real model (needs its key)

Each agent is an entity. The researcher subscribes to the "research" topic; both get the bus
tools (`message_bus_tools`): the writer sends a request, the researcher's model sees it as a
user message ``"[research] Request <id> from writer: ..."`` and answers it by that id, and the
answer wakes the writer (who had stopped to wait) to write the note. `MessageBusSystem` moves
messages into conversations each tick and times out requests nobody answers; the Runner stops
once both agents are done.
"""

from __future__ import annotations

import asyncio
import os
import re

from ecs_core import EntityId, Runner, World
from pes_agent import ProviderConfig
from pes_agent.ecs import (
    AgentIdentityComponent,
    ChatMessage,
    ConversationComponent,
    ErrorHandlingSystem,
    ErrorOccurredEvent,
    LLMComponent,
    MessageBus,
    MessageBusComponent,
    MessageBusPublishedEvent,
    MessageBusResponseEvent,
    MessageBusSystem,
    MessageBusTimeoutEvent,
    ReasoningSystem,
    StreamEndEvent,
    StreamingComponent,
    SystemPromptComponent,
    ToolCall,
    ToolExecutionSystem,
    ToolRegistryComponent,
    close_services,
    message_bus_tools,
)
from pes_agent.providers.base import LLMProvider, LLMRequest
from pes_agent.providers.registry import parse_provider_spec
from pes_agent.testing import ScriptedProvider, ScriptedResponse

KEYS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
TASK = "Write a three-sentence note on the James Webb Space Telescope for a school newsletter."
WRITER_PROMPT = (
    "You are a writer. Never invent facts: first ask the researcher with send_request on the "
    "topic 'research', then say briefly that you are waiting. When the facts arrive, write "
    "the note from them."
)
RESEARCHER_PROMPT = (
    "You are a researcher. When a request arrives, answer it with respond_to_request, using "
    "its id, with three short, accurate facts; then say in one line that you answered."
)


def last_user_text(request: LLMRequest) -> str:
    return next(m.content for m in reversed(request.messages) if m.role == "user")


def scripted_researcher(request: LLMRequest) -> ScriptedResponse:
    """Answers the request in its last message, by the id the message carries."""
    match = re.search(r"Request (\w+) from", last_user_text(request))
    assert match is not None, "the researcher expected a request"
    facts = (
        "JWST launched on 25 December 2021; its gold-coated mirror is 6.5 m across; it "
        "observes in infrared from the Sun-Earth L2 point, 1.5 million km away."
    )
    answer = {"correlation_id": match.group(1), "message": facts}
    return ScriptedResponse(tool_calls=[ToolCall("r1", "respond_to_request", answer)])


def scripted_note(request: LLMRequest) -> str:
    """The writer's note, built from the facts in the response it received."""
    facts = last_user_text(request).split(": ", 1)[1].rstrip(".").split("; ")
    return (
        f"The James Webb Space Telescope {facts[0].removeprefix('JWST ')}. "
        f"Its {facts[1].removeprefix('its ')}. "
        f"It {facts[2].removeprefix('it ')}."
    )


def choose_models() -> tuple[LLMProvider | ProviderConfig, LLMProvider | ProviderConfig]:
    """(writer, researcher): PES_MODEL when set and its key is present, else scripted models."""
    spec = os.environ.get("PES_MODEL")
    if spec:
        config = parse_provider_spec(spec)
        key = KEYS.get(config.provider)
        if key is None or os.environ.get(key):
            print(f"model: {spec}")
            return config, config
        print(f"{key} is not set: running {spec!r} offline on scripted models instead")
    else:
        print("model: scripted (set PES_MODEL=openai:gpt-4o-mini to use a real one)")
    ask = {"topic": "research", "message": "Three key facts about the James Webb telescope?"}
    writer = ScriptedProvider(
        [
            ScriptedResponse(tool_calls=[ToolCall("w1", "send_request", ask)]),
            "Asked the researcher; waiting for the facts.",
            scripted_note,
        ]
    )
    researcher = ScriptedProvider([scripted_researcher, "Answered the writer's request."])
    return writer, researcher


def agent(
    world: World, name: str, model: LLMProvider | ProviderConfig, prompt: str, *topics: str
) -> EntityId:
    entity = world.create_entity(
        AgentIdentityComponent(name),
        LLMComponent(model),
        SystemPromptComponent(prompt),
        ConversationComponent(),
        MessageBusComponent(set(topics)),
        StreamingComponent(),
    )
    world.add_component(entity, ToolRegistryComponent(message_bus_tools(world, entity)))
    return entity


async def main() -> None:
    world = World()
    world.register_system(ReasoningSystem(), priority=0)
    world.register_system(ToolExecutionSystem(), priority=5)
    world.register_system(MessageBusSystem(), priority=5)
    world.register_system(ErrorHandlingSystem(), priority=99)

    writer_model, researcher_model = choose_models()
    writer = agent(world, "writer", writer_model, WRITER_PROMPT)
    researcher = agent(world, "researcher", researcher_model, RESEARCHER_PROMPT, "research")
    names = {writer: "writer", researcher: "researcher"}

    def said(event: StreamEndEvent) -> None:
        if event.content.strip():
            print(f"{names[event.entity_id]}: {event.content.strip()}")

    def published(event: MessageBusPublishedEvent) -> None:
        what = f"request {event.correlation_id}" if event.correlation_id else "message"
        print(f"  [bus] {names[event.sender]} -> '{event.topic}' ({what}): {event.payload}")

    def answered(event: MessageBusResponseEvent) -> None:
        print(
            f"  [bus] {names[event.responder]} answers {event.correlation_id} "
            f"for {names[event.requester]}: {event.payload}"
        )

    world.events.subscribe(StreamEndEvent, said)
    world.events.subscribe(MessageBusPublishedEvent, published)
    world.events.subscribe(MessageBusResponseEvent, answered)
    world.events.subscribe(
        MessageBusTimeoutEvent, lambda e: print(f"  [bus] request {e.correlation_id} timed out")
    )
    world.events.subscribe(
        ErrorOccurredEvent, lambda e: print(f"error in {e.system_name}: {e.error}")
    )

    print(f"user -> writer: {TASK}")
    world.require_component(writer, ConversationComponent).messages.append(
        ChatMessage("user", TASK)
    )
    try:
        result = await Runner().run(world, until=[writer, researcher], max_ticks=30)
    finally:
        await close_services(world)

    state = MessageBus(world).state
    ends = ", ".join(f"{names[e]} {t.reason}" for e, t in result.terminals.items())
    print(f"\nstopped after {result.ticks} ticks ({ends})")
    print(
        f"bus: {state.published} published, {state.delivered} delivered, "
        f"{state.responses} answered, {state.timeouts} timed out, {state.total_dropped} dropped"
    )


if __name__ == "__main__":
    asyncio.run(main())
