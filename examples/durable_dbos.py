"""A run that survives its worker: killed mid-run, finished by the next — offline, on DBOS.

This script starts a worker process (this same file with `--worker`) on a DBOS engine over a
SQLite file, submits a run from here (not a worker) and, while the run's slow tool works, kills
the worker with SIGKILL. A new worker with the same worker id takes the run over: the calls that
had finished are not made again, the slow call runs again, and the turn is saved once. The model
is scripted; nothing leaves this machine.

    python examples/durable_dbos.py          # needs pip install 'pes-agent[dbos]'
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import tempfile
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

from pes_agent import (
    AgentProps,
    LLMRequest,
    ObservationType,
    configure_logging,
    create_agent,
    tool,
)
from pes_agent.durable.dbos import DBOSEngine
from pes_agent.testing import ScriptedProvider, plan_call, plan_lines

PLAN = plan_lines(
    plan_call(1, "book", what="flight"),
    plan_call(2, "book", what="hotel"),
    plan_call(3, "slow_confirm", booking="{step_1_result}"),
    intent="book a trip",
)


def effects_log() -> Path:
    return Path(os.environ["EXAMPLE_EFFECTS"])


def side_effect(line: str) -> None:
    """What a real tool would do to the world (charge a card, send a mail), logged."""
    with effects_log().open("a", encoding="utf-8") as out:
        out.write(line + "\n")


@tool
async def book(what: str) -> str:
    """Book a flight or a hotel."""
    side_effect(f"booked {what}")
    return f"{what}-ref-42"


@tool
async def slow_confirm(booking: str) -> str:
    """Confirm a booking with a slow partner system."""
    side_effect(f"confirming {booking}")
    await asyncio.sleep(2.0)
    side_effect(f"confirmed {booking}")
    return f"{booking} confirmed"


def respond(request: LLMRequest) -> str:
    return PLAN if request.phase == "planning" else "Your trip is booked and confirmed."


async def worker(engine_db: str, storage: str) -> None:
    engine = DBOSEngine(engine_db, worker_id="worker-1")
    agent = create_agent(
        provider=ScriptedProvider([respond], repeat=True),
        tools=[book, slow_confirm],
        storage=storage,
        engine=engine,
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with agent, engine.worker(agent):
        print("ready", flush=True)
        await stop.wait()


async def start_worker(folder: Path, engine_db: str, storage: str) -> asyncio.subprocess.Process:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--worker",
        engine_db,
        storage,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "EXAMPLE_EFFECTS": str(folder / "effects.log")},
    )
    assert process.stdout is not None
    if (await asyncio.wait_for(process.stdout.readline(), 60)).strip() != b"ready":
        raise SystemExit("the worker did not start")
    return process


async def until(condition: Callable[[], Awaitable[bool]], timeout_s: float = 60) -> None:
    for _ in range(int(timeout_s / 0.05)):
        if await condition():
            return
        await asyncio.sleep(0.05)
    raise SystemExit("timed out")


async def main() -> None:
    configure_logging("ERROR")
    with tempfile.TemporaryDirectory(prefix="pes-durable-") as name:
        folder = Path(name)
        engine_db, storage = (
            f"sqlite:///{folder / 'runs.sqlite'}",
            f"sqlite:///{folder / 'agent.db'}",
        )
        log = folder / "effects.log"
        first = await start_worker(folder, engine_db, storage)
        print("worker 1 started")

        engine = DBOSEngine(engine_db)
        client = create_agent(provider=ScriptedProvider([]), storage=storage, engine=engine)
        async with client:
            run = asyncio.create_task(client.process(AgentProps("Book my trip", "trip")))

            async def both_booked() -> bool:  # their results recorded, the slow call running
                ended = await client.observations.get_observations(
                    "trip", types=[ObservationType.TOOL_EXECUTION]
                )
                return len(ended) >= 2 and log.exists() and "confirming" in log.read_text()

            await until(both_booked)
            first.send_signal(signal.SIGKILL)
            await first.wait()
            print("worker 1 killed (SIGKILL) while confirming")

            second = await start_worker(folder, engine_db, storage)
            print("worker 2 started with the same worker id: it takes the run over")
            result = await asyncio.wait_for(run, 60)
            print(f"-> {result.metadata.status}: {result.response.content}")
            saved = await client.conversation.get_messages("trip")
            print(f"turns saved: {len(saved) // 2}")
        await engine.aclose()
        second.send_signal(signal.SIGTERM)
        await second.wait()
        print("side effects:")
        for line, count in Counter(log.read_text().splitlines()).items():
            print(f"  {count} x {line}")
        print("(the bookings ran once; the confirmation cut off by the kill ran again)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        configure_logging("ERROR")
        asyncio.run(worker(sys.argv[2], sys.argv[3]))
    else:
        asyncio.run(main())
