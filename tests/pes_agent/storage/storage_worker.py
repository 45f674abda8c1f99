"""A worker process for the multi-process storage tests (run as a script, not collected).

    python storage_worker.py STORE SCHEMA MODE THREAD [ARGS...]

STORE is a `sqlite:///...` or `postgresql://...` URL; SCHEMA is the PostgreSQL schema (ignored
for SQLite). Modes:

- `turns NAME N GO_FILE`: wait for GO_FILE to exist, then run N turns on THREAD, each under
  `lock_thread`: read the history (its last message must be an AI answer), read the state,
  record an observation, pause, then `commit_turn` a USER and an AI message tagged `NAME:i`
  with `turns` incremented. Prints `TURN i` after each.
- `hold`: take THREAD's lock, record two observations, print `LOCKED`, then sleep forever
  (the test SIGKILLs it).
- `observe COUNT`: record COUNT observations on THREAD (types alternating PLAN, TOOL_CALL)
  and one on thread `elsewhere`, then exit.

Exit status 3 means the worker saw a half turn.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time

from pes_agent.config import AgentState
from pes_agent.observing.types import Observation, ObservationType
from pes_agent.storage import PostgresStorage, SQLiteStorage, Storage, open_storage
from pes_agent.threads.messages import ConversationMessage, MessageRole


def open_store(url: str, schema: str) -> Storage:
    if url.startswith("postgres"):
        return PostgresStorage(url, schema=schema, max_pool_size=2)
    storage = open_storage(url)
    assert isinstance(storage, SQLiteStorage)
    return storage


def note(thread_id: str, kind: ObservationType, title: str) -> Observation:
    return Observation(thread_id=thread_id, trace_id=f"pid-{os.getpid()}", type=kind, title=title)


async def turns(storage: Storage, thread_id: str, name: str, count: int) -> int:
    for i in range(count):
        async with storage.lock_thread(thread_id):
            history = await storage.get_messages(thread_id, limit=2)
            if history and history[-1].role is not MessageRole.AI:
                print(f"HALF TURN seen by {name} at {i}: {history}", flush=True)
                return 3
            state = await storage.get_agent_state(thread_id) or AgentState()
            await storage.add_observation(note(thread_id, ObservationType.PLAN, f"{name}:{i}"))
            await asyncio.sleep(random.uniform(0, 0.003))
            tag = f"{name}:{i}"
            await storage.commit_turn(
                thread_id,
                [
                    ConversationMessage(thread_id=thread_id, role=MessageRole.USER, content=tag),
                    ConversationMessage(thread_id=thread_id, role=MessageRole.AI, content=tag),
                ],
                AgentState(data={"turns": state.data.get("turns", 0) + 1}),
            )
        print(f"TURN {i}", flush=True)
    return 0


async def hold(storage: Storage, thread_id: str) -> int:
    async with storage.lock_thread(thread_id):
        await storage.add_observation(note(thread_id, ObservationType.INTENT, "before-crash-1"))
        await storage.add_observation(note(thread_id, ObservationType.PLAN, "before-crash-2"))
        print("LOCKED", flush=True)
        await asyncio.sleep(3600)
    return 0


async def observe(storage: Storage, thread_id: str, count: int) -> int:
    kinds = (ObservationType.PLAN, ObservationType.TOOL_CALL)
    for i in range(count):
        await storage.add_observation(note(thread_id, kinds[i % 2], f"obs-{i}"))
    await storage.add_observation(note("elsewhere", ObservationType.PLAN, "elsewhere"))
    return 0


async def main(argv: list[str]) -> int:
    url, schema, mode, thread_id, *rest = argv
    storage = open_store(url, schema)
    try:
        if mode == "turns":
            return await turns(storage, thread_id, rest[0], int(rest[1]))
        if mode == "hold":
            return await hold(storage, thread_id)
        if mode == "observe":
            return await observe(storage, thread_id, int(rest[0]))
        raise SystemExit(f"unknown mode {mode!r}")
    finally:
        await storage.aclose()


def wait_for_file(path: str) -> None:
    """Block until `path` exists, so that all workers start their turns together."""
    while not os.path.exists(path):
        time.sleep(0.01)


if __name__ == "__main__":
    if sys.argv[3] == "turns":
        wait_for_file(sys.argv[7])
    sys.exit(asyncio.run(main(sys.argv[1:])))
