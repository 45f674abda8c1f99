"""A multi-turn chat: the agent asks for your next message, answers, and forgets old turns.

    python examples/chat_loop.py                                 # offline, scripted model
    PES_MODEL=openai:gpt-4o-mini python examples/chat_loop.py    # a real model (needs its key)

Type `quit` (or end the input) to stop. Three systems make the loop:

- `UserInputSystem` publishes a `UserInputRequestedEvent` and waits across ticks for the answer,
  which becomes a user message;
- `TerminalCleanupSystem` lifts the `"reasoning_complete"` end after each answer, so the entity
  goes on (ReasoningSystem still never speaks twice without a new user message);
- `MemorySystem` keeps the conversation to `max_messages` (4 here, to show it forgetting).

`AskAgain` below is this example's own system: after each answer it attaches a new
`UserInputComponent`. When stdin is not a terminal (CI, a pipe) scripted lines stand in for
you, and the example says so.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import Iterator

from ecs_core import Runner, World
from pes_agent import ProviderConfig
from pes_agent.ecs import (
    ConversationComponent,
    ConversationTruncatedEvent,
    ErrorHandlingSystem,
    LLMComponent,
    MemorySystem,
    ReasoningSystem,
    StreamContentDeltaEvent,
    StreamEndEvent,
    StreamingComponent,
    StreamStartEvent,
    SystemPromptComponent,
    TerminalCleanupSystem,
    UserInputComponent,
    UserInputRequestedEvent,
    UserInputSystem,
    close_services,
)
from pes_agent.providers.base import LLMProvider, LLMRequest
from pes_agent.providers.registry import parse_provider_spec
from pes_agent.testing import ScriptedProvider

KEYS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
SCRIPTED_USER = ["Hi, I'm Ada.", "What's my name?", "Tell me a joke.", "Do you still know my name?"]


def offline_reply(request: LLMRequest) -> str:
    """A scripted chat model that only knows what is in the messages it was sent."""
    said = [m.content for m in request.messages if m.role == "user"]
    names = [match.group(1) for text in said if (match := re.search(r"I'm (\w+)", text))]
    last = said[-1].lower()
    if "name" in last:
        if names:
            return f"Your name is {names[-1]}."
        return "I'm afraid I've forgotten: I only keep the last few messages."
    if "joke" in last:
        return "Why do programmers prefer dark mode? Because light attracts bugs."
    return f"Nice to meet you, {names[-1]}!" if names else "Hello!"


def choose_model() -> LLMProvider | ProviderConfig:
    """PES_MODEL when it is set and its API key is present, else the scripted model."""
    spec = os.environ.get("PES_MODEL")
    if spec:
        config = parse_provider_spec(spec)
        key = KEYS.get(config.provider)
        if key is None or os.environ.get(key):
            return config
        print(f"{key} is not set: running offline on a scripted model instead")
    return ScriptedProvider([offline_reply], repeat=True)


class AskAgain:
    """After each answer, ask the person for the next message (this example's own system)."""

    async def process(self, world: World) -> None:
        for entity, (conversation,) in world.query(
            ConversationComponent, exclude=(UserInputComponent,)
        ):
            messages = conversation.messages
            if not messages or (messages[-1].role == "assistant" and not messages[-1].tool_calls):
                world.add_component(entity, UserInputComponent("you: "))


class Person:
    """Answers `UserInputRequestedEvent`s from the terminal, or from a script without one."""

    def __init__(self, lines: Iterator[str] | None) -> None:
        self.lines = lines
        self._tasks: set[asyncio.Task[None]] = set()

    def __call__(self, event: UserInputRequestedEvent) -> None:
        # The handler only starts the reading: waiting for a person inside it would block
        # the tick. UserInputSystem looks at the future on every tick.
        task = asyncio.create_task(self._read(event))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _read(self, event: UserInputRequestedEvent) -> None:
        if self.lines is not None:
            line = next(self.lines, None)
            if line is not None:
                print(f"{event.prompt}{line}")
        else:
            try:
                line = await asyncio.to_thread(input, event.prompt)
            except EOFError:
                line = None
        if event.future.done():
            return
        if line is None or line.strip().lower() in {"quit", "exit"}:
            event.future.cancel()  # the person is done: the entity ends "user_input_cancelled"
        else:
            event.future.set_result(line)


class PaceWhileWaiting:
    """Sleeps a little in ticks where the person is still typing, so the loop does not spin."""

    async def process(self, world: World) -> None:
        if any(request.future is not None for _, (request,) in world.query(UserInputComponent)):
            await asyncio.sleep(0.02)


async def main() -> None:
    lines = None
    if not sys.stdin.isatty():
        print("stdin is not a terminal: a scripted user types for you")
        lines = iter(SCRIPTED_USER)

    world = World()
    world.register_system(UserInputSystem(), priority=-10)
    world.register_system(ReasoningSystem(), priority=0)
    world.register_system(TerminalCleanupSystem(), priority=1)
    world.register_system(AskAgain(), priority=2)
    world.register_system(MemorySystem(), priority=10)
    world.register_system(PaceWhileWaiting(), priority=50)
    world.register_system(ErrorHandlingSystem(), priority=99)
    world.events.subscribe(UserInputRequestedEvent, Person(lines))
    world.events.subscribe(StreamStartEvent, lambda e: print("agent: ", end=""))
    world.events.subscribe(StreamContentDeltaEvent, lambda e: print(e.text, end="", flush=True))
    world.events.subscribe(StreamEndEvent, lambda e: print())
    world.events.subscribe(
        ConversationTruncatedEvent,
        lambda e: print(f"  (memory: forgot the {e.removed_count} oldest messages)"),
    )

    agent = world.create_entity(
        LLMComponent(choose_model()),
        SystemPromptComponent("You are a friendly, brief chat partner."),
        ConversationComponent(max_messages=4),
        StreamingComponent(),
    )
    try:
        result = await Runner().run(world, until=agent, max_ticks=100_000)
    finally:
        await close_services(world)
    print(f"(chat ended: {result.terminals[agent].reason} after {result.ticks} ticks)")


if __name__ == "__main__":
    asyncio.run(main())
