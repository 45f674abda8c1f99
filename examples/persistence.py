"""Persistence: a thread's history, state and config survive the agent, on SQLite and PostgreSQL.

One agent runs two turns on a thread and is closed; a NEW agent opened on the same database
sees the messages, the state the tool saved and the thread's config, and carries on. Then the
same on PostgreSQL, in a schema of its own that is dropped afterwards — or one line saying why
that part is skipped.

    python examples/persistence.py [PATH.db]     # default: a temporary file
    PES_EXAMPLES_POSTGRES_URL=postgresql://user@host/db python examples/persistence.py

The model is $PES_MODEL (default openai:gpt-4o-mini); without its API key it says so and runs
offline on a scripted model.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import tempfile
import uuid

from pes_agent import (
    AgentCore,
    AgentProps,
    LLMRequest,
    PESAgentError,
    ThreadConfig,
    ToolContext,
    configure_logging,
    create_agent,
    tool,
)
from pes_agent.storage import PostgresStorage
from pes_agent.testing import ScriptedProvider

THREAD = "shopping"


@tool
def add_item(item: str, context: ToolContext) -> list[str]:
    """Add an item to the user's shopping list and return the whole list."""
    assert context.state is not None  # the run's copy of the thread's AgentState
    items: list[str] = context.state.data.setdefault("items", [])
    items.append(item)  # saved with the turn: the agent uses state_saving="implicit"
    return items


def scripted(request: LLMRequest) -> str:
    """The offline model: plans add_item for 'Add X', then answers with the list it got back."""
    *history, last = request.messages
    if request.phase == "planning":
        call = {"callId": "add", "toolName": "add_item", "arguments": {"item": last.content[4:]}}
        return json.dumps({"intent": last.content, "toolCalls": [call]})
    found = re.search(r"— success\n(.*)", last.content)
    items = ", ".join(json.loads(found[1])) if found else "?"
    turns = sum(message.role == "user" for message in history)
    return f"Your list: {items}. (My prompt held {turns} earlier turns of this thread.)"


async def two_agents(storage: str, model: str | None) -> None:
    """Two turns with one agent; then a new agent on the same storage reads and continues."""

    def agent() -> AgentCore:  # each call builds a new agent with its own connection
        return create_agent(
            provider=model or ScriptedProvider([scripted], repeat=True),
            tools=[add_item],
            storage=storage,
            state_saving="implicit",
        )

    async with agent() as first:
        thread = ThreadConfig(enabled_tools=["add_item"], system_prompt="You keep a shopping list.")
        await first.state.set_thread_config(THREAD, thread)
        for query in ("Add milk", "Add eggs"):
            result = await first.process(AgentProps(query, THREAD))
            print(f"  first agent  > {query}: {result.metadata.status}")
    async with agent() as second:
        for message in await second.conversation.get_messages(THREAD):
            print(f"  second agent reads {message.role.value:>4}: {message.content}")
        state = await second.state.get_agent_state(THREAD)
        config = await second.state.get_thread_config(THREAD)
        print(f"  state: {state}")
        print(f"  config: {config.model_dump(exclude_none=True) if config else None}")
        result = await second.process(AgentProps("Add bread", THREAD))
        print(f"  second agent > Add bread: {result.response.content}")
        print(f"  state now: {await second.state.get_agent_state(THREAD)}")


async def main() -> None:
    configure_logging("WARNING")
    provider = os.environ.get("PES_MODEL", "openai:gpt-4o-mini")
    model: str | None = provider  # None: the scripted model
    key = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}.get(provider.split(":")[0])
    if key and not os.environ.get(key):
        print(f"[offline] {key} is not set: using a scripted model instead of {provider}")
        model = None
    with tempfile.TemporaryDirectory() as scratch:
        path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(scratch, "agent.db")
        print(f"\n== SQLite at {path}")
        await two_agents(f"sqlite:///{path}", model)

    url = os.environ.get("PES_EXAMPLES_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
    schema = f"pes_example_{uuid.uuid4().hex[:12]}"
    try:  # probe: connect (2 s at most) and create the schema
        async with PostgresStorage(url, schema=schema, connect_timeout_s=2):
            pass
    except PESAgentError as error:
        print(f"\n== PostgreSQL skipped: {error}")
        return
    print(f"\n== PostgreSQL, schema {schema}")
    try:
        await two_agents(f"{url}{'&' if '?' in url else '?'}schema={schema}", model)
    finally:
        await drop_schema(url, schema)
        print(f"  dropped schema {schema}")


async def drop_schema(url: str, schema: str) -> None:
    import asyncpg  # type: ignore[import-untyped]  # installed with pes-agent[postgres]

    connection = await asyncpg.connect(url, timeout=5)
    try:
        await connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await connection.close()


if __name__ == "__main__":
    asyncio.run(main())
