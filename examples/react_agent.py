"""A ReAct agent assembled from ECS components and run by `ecs_core.Runner`.

    python examples/react_agent.py                                 # offline, scripted model
    PES_MODEL=openai:gpt-4o-mini python examples/react_agent.py    # a real model (needs its key)

The entity *is* the agent: an `LLMComponent` (the model), a `ConversationComponent` (its
history), a `ToolRegistryComponent` (its tools) and a `StreamingComponent` (tokens as events).
Each tick `ReasoningSystem` asks the model for its next move and `ToolExecutionSystem` runs the
tool calls it made; the Runner stops once the entity carries a `TerminalComponent`.
"""

from __future__ import annotations

import asyncio
import json
import os

from ecs_core import Runner, World
from pes_agent import (
    InMemoryStorage,
    Observation,
    ObservationManager,
    ObservationType,
    ProviderConfig,
    tool,
)
from pes_agent.ecs import (
    AgentIdentityComponent,
    ChatMessage,
    ConversationComponent,
    ErrorHandlingSystem,
    ErrorOccurredEvent,
    LLMComponent,
    ReasoningSystem,
    StreamContentDeltaEvent,
    StreamEndEvent,
    StreamingComponent,
    StreamStartEvent,
    SystemPromptComponent,
    ToolCall,
    ToolExecutionSystem,
    ToolRegistryComponent,
    attach_services,
    close_services,
)
from pes_agent.providers.base import LLMProvider, LLMRequest
from pes_agent.providers.registry import parse_provider_spec
from pes_agent.testing import ScriptedProvider, ScriptedResponse

KEYS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


@tool
async def get_weather(city: str) -> dict[str, object]:
    """Current weather for a city."""
    await asyncio.sleep(0.1)  # a real lookup takes a moment
    return {"city": city, "sky": "sunny", "celsius": 21}


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def final_answer(request: LLMRequest) -> str:
    """The scripted model's second turn: it reads the tool results it was sent."""
    results = {m.tool_call_id: m.content for m in request.messages if m.role == "tool"}
    weather = json.loads(results["call_1"])
    return (
        f"It is {weather['sky']} and {weather['celsius']} °C in {weather['city']}, "
        f"and 12 × 7 = {results['call_2']}."
    )


def offline_model() -> ScriptedProvider:
    """A scripted model that calls both tools at once, then answers from their results."""
    calls = [
        ToolCall("call_1", "get_weather", {"city": "Paris"}),
        ToolCall("call_2", "multiply", {"a": 12, "b": 7}),
    ]
    return ScriptedProvider(
        [ScriptedResponse("Let me look both up.", tool_calls=calls), final_answer], chunk_size=6
    )


def choose_model() -> LLMProvider | ProviderConfig:
    """PES_MODEL when it is set and its API key is present, else the scripted model."""
    spec = os.environ.get("PES_MODEL")
    if spec:
        config = parse_provider_spec(spec)
        key = KEYS.get(config.provider)
        if key is None or os.environ.get(key):
            print(f"model: {spec}")
            return config
        print(f"{key} is not set: running {spec!r} offline on a scripted model instead")
    else:
        print("model: scripted (set PES_MODEL=openai:gpt-4o-mini to use a real one)")
    return offline_model()


def show_tool(observation: Observation) -> None:
    content = observation.content
    if observation.type is ObservationType.TOOL_CALL:
        print(f"  -> {content['toolName']}({json.dumps(content['arguments'])})")
    else:
        outcome = content["error"] or json.dumps(content["output"], ensure_ascii=False)
        print(f"  <- {content['toolName']}: {outcome}")


async def main() -> None:
    world = World()
    observations = ObservationManager(InMemoryStorage())
    attach_services(world, observations=observations)
    observations.subscribe(
        show_tool, types=[ObservationType.TOOL_CALL, ObservationType.TOOL_EXECUTION]
    )
    world.events.subscribe(StreamStartEvent, lambda e: print("agent: ", end=""))
    world.events.subscribe(StreamContentDeltaEvent, lambda e: print(e.text, end="", flush=True))
    world.events.subscribe(StreamEndEvent, lambda e: print())
    world.events.subscribe(
        ErrorOccurredEvent, lambda e: print(f"error in {e.system_name}: {e.error}")
    )

    world.register_system(ReasoningSystem(), priority=0)
    world.register_system(ToolExecutionSystem(), priority=5)
    world.register_system(ErrorHandlingSystem(), priority=99)

    question = "What's the weather in Paris, and what is 12 * 7?"
    agent = world.create_entity(
        LLMComponent(choose_model()),
        SystemPromptComponent("Answer briefly. Use the tools for facts and arithmetic."),
        ConversationComponent([ChatMessage("user", question)]),
        ToolRegistryComponent([get_weather, multiply]),
        StreamingComponent(),
        AgentIdentityComponent("react-demo"),
    )
    print(f"user: {question}")
    try:
        result = await Runner().run(world, until=agent, max_ticks=10)
    finally:
        await close_services(world)

    print(f"\nstopped after {result.ticks} ticks: {result.terminals[agent].reason}")
    history = world.require_component(agent, ConversationComponent).messages
    print(f"conversation ({len(history)} messages, system prompt not stored):")
    for message in history:
        calls = ", ".join(c.name for c in message.tool_calls or [])
        text = message.content or f"[calls {calls}]"
        answered = f" (answers {message.tool_call_id})" if message.tool_call_id else ""
        print(f"  {message.role:<9} {text}{answered}")
    recorded = await observations.get_observations("react-demo")
    print(f"{len(recorded)} observations recorded on thread 'react-demo'")


if __name__ == "__main__":
    asyncio.run(main())
