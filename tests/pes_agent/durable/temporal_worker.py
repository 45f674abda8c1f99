"""A pes-agent worker process on Temporal, for the durable tests: `python -m ... ADDRESS STORAGE
TASK_QUEUE EFFECTS_FILE`.

Its agent is `scripted.py`'s (`build_agent`): tools that append what they do to EFFECTS_FILE,
a scripted model. It prints "ready" once it polls the task queue, and exits 0 on SIGTERM.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from pes_agent import create_agent
from pes_agent.core import AgentCore
from pes_agent.durable.temporal import TemporalEngine
from pes_agent.testing import ScriptedProvider
from tests.pes_agent.durable.scripted import TOOLS, approval_options, respond, trace_to_file

# A dead worker's runs and tool calls are taken over after these (defaults: 10 s and 5 s).
TASK_TIMEOUT_S = 2.0
HEARTBEAT_TIMEOUT_S = 2.0


def engine(address: str, task_queue: str) -> TemporalEngine:
    """The tests' engine: quick takeovers."""
    return TemporalEngine(
        address,
        task_queue=task_queue,
        task_timeout_s=TASK_TIMEOUT_S,
        heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S,
    )


def build_agent(engine: TemporalEngine, storage: str) -> AgentCore:
    """The workers' agent (the replay test builds one too)."""
    return create_agent(
        # PES_TEST_MODEL_S: every model call takes this long.
        provider=ScriptedProvider(
            [respond], repeat=True, latency_s=float(os.environ.get("PES_TEST_MODEL_S", "0"))
        ),
        tools=TOOLS,
        **approval_options(),  # `pay` pauses; with PES_TEST_APPROVE, a handler decides in-run
        state_saving="implicit",  # a tool's state changes are saved with the turn
        storage=storage,
        engine=engine,
    )


async def main() -> None:
    address, storage, task_queue = sys.argv[1], sys.argv[2], sys.argv[3]
    on = engine(address, task_queue)
    agent = build_agent(on, storage)
    spans = os.environ.get("PES_TEST_SPANS")
    if spans is not None:
        trace_to_file(agent, spans)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with agent, on.worker(agent):
        print("ready", flush=True)
        await stop.wait()
    await on.aclose()


if __name__ == "__main__":
    asyncio.run(main())
