"""A person approves or denies each tool call from the terminal before it runs.

    python examples/approval_gate.py                                 # offline, scripted model
    PES_MODEL=openai:gpt-4o-mini python examples/approval_gate.py    # a real model (needs its key)

The agent entity carries a `ToolApprovalComponent(REQUIRE_APPROVAL)`: `ToolApprovalSystem` puts
each call to a person through `ToolApprovalRequestedEvent`, and `ToolExecutionSystem` runs only
the calls that were approved. A denied call never runs; the model is told so in the call's tool
message and answers accordingly. The question waits across ticks without blocking the world.

When stdin is not a terminal (CI, a pipe) the example answers by itself — read-only calls
approved, deletions denied — and says so.
"""

from __future__ import annotations

import asyncio
import os
import sys

from ecs_core import Runner, World
from pes_agent import ProviderConfig, tool
from pes_agent.ecs import (
    ApprovalPolicy,
    ChatMessage,
    ConversationComponent,
    ErrorHandlingSystem,
    LLMComponent,
    ReasoningSystem,
    ToolApprovalComponent,
    ToolApprovalRequestedEvent,
    ToolApprovalSystem,
    ToolApprovedEvent,
    ToolCall,
    ToolDeniedEvent,
    ToolExecutionSystem,
    ToolRegistryComponent,
    close_services,
)
from pes_agent.providers.base import LLMProvider, LLMRequest
from pes_agent.providers.registry import parse_provider_spec
from pes_agent.testing import ScriptedProvider, ScriptedResponse

KEYS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
FILES = {"notes.txt": "buy milk", "report.pdf": "(binary)"}


@tool
def list_files() -> list[str]:
    """List the files in the workspace."""
    return sorted(FILES)


@tool
def delete_file(name: str) -> str:
    """Delete a file from the workspace."""
    FILES.pop(name, None)
    return f"deleted {name}"


def summary(request: LLMRequest) -> str:
    """The scripted model's last turn: it reports what the tool messages say happened."""
    results = {m.tool_call_id: m.content for m in request.messages if m.role == "tool"}
    listed = results.get("call_1", "")
    deleted = results.get("call_2", "")
    first = (
        f"The workspace held {listed}."
        if not listed.startswith("Error")
        else "I was not allowed to list the files."
    )
    second = (
        "notes.txt is deleted."
        if deleted.startswith("deleted")
        else "I did not delete notes.txt: the call was refused."
    )
    return f"{first} {second}"


def offline_model() -> ScriptedProvider:
    calls = [
        ToolCall("call_1", "list_files"),
        ToolCall("call_2", "delete_file", {"name": "notes.txt"}),
    ]
    return ScriptedProvider(
        [ScriptedResponse("I'll list the files and delete notes.txt.", tool_calls=calls), summary]
    )


def choose_model() -> LLMProvider | ProviderConfig:
    """PES_MODEL when it is set and its API key is present, else the scripted model."""
    spec = os.environ.get("PES_MODEL")
    if spec:
        config = parse_provider_spec(spec)
        key = KEYS.get(config.provider)
        if key is None or os.environ.get(key):
            return config
        print(f"{key} is not set: running offline on a scripted model instead")
    return offline_model()


class TerminalApprover:
    """Answers approval requests: by asking at the terminal, or by a fixed rule without one."""

    def __init__(self, interactive: bool) -> None:
        self.interactive = interactive
        self._one_at_a_time = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

    def __call__(self, event: ToolApprovalRequestedEvent) -> None:
        # Never wait for the person inside the handler: the bus awaits handlers within the
        # tick. A task answers the future later; the gate checks it on every tick.
        task = asyncio.create_task(self._answer(event))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, event: ToolApprovalRequestedEvent) -> None:
        call = event.tool_call
        if not self.interactive:
            approve = call.name != "delete_file"
            print(f"  auto-{'approved' if approve else 'denied'}: {call.name}({call.arguments})")
        else:
            async with self._one_at_a_time:
                reply = await asyncio.to_thread(
                    input, f"  allow {call.name}({call.arguments})? [y/N] "
                )
            approve = reply.strip().lower() in {"y", "yes"}
        if not event.future.done():  # it may have timed out meanwhile
            event.future.set_result(approve)


class PaceWhileWaiting:
    """Sleeps a little in ticks where someone is still deciding, so the loop does not spin.

    The gate never blocks a tick; while a person types, ticks would otherwise run back to back.
    """

    async def process(self, world: World) -> None:
        if any(a.waiting for _, (a,) in world.query(ToolApprovalComponent)):
            await asyncio.sleep(0.05)


async def main() -> None:
    interactive = sys.stdin.isatty()
    if not interactive:
        print("stdin is not a terminal: answering automatically (list: yes, delete: no)")

    world = World()
    world.register_system(ToolApprovalSystem(), priority=-5)
    world.register_system(ReasoningSystem(), priority=0)
    world.register_system(ToolExecutionSystem(), priority=5)
    world.register_system(PaceWhileWaiting(), priority=50)
    world.register_system(ErrorHandlingSystem(), priority=99)
    world.events.subscribe(ToolApprovalRequestedEvent, TerminalApprover(interactive))
    world.events.subscribe(
        ToolApprovedEvent, lambda e: print(f"  approved -> {e.tool_call.name} runs")
    )
    world.events.subscribe(ToolDeniedEvent, lambda e: print(f"  denied   -> {e.reason}"))

    request = "List my files, then delete notes.txt."
    agent = world.create_entity(
        LLMComponent(choose_model()),
        ConversationComponent([ChatMessage("user", request)]),
        ToolRegistryComponent([list_files, delete_file]),
        ToolApprovalComponent(ApprovalPolicy.REQUIRE_APPROVAL, timeout_s=120),
    )
    print(f"user: {request}")
    try:
        result = await Runner().run(world, until=agent, max_ticks=100_000)
    finally:
        await close_services(world)

    answer = world.require_component(agent, ConversationComponent).messages[-1].content
    print(f"agent: {answer}")
    print(
        f"({result.terminals[agent].reason} after {result.ticks} ticks; files now: {sorted(FILES)})"
    )


if __name__ == "__main__":
    asyncio.run(main())
