"""What each storage backend adds to a run, beside `memory`.

A "run" is one real `agent.process()` on a zero-latency scripted model with one tool call: it
takes the thread's lock, reads the thread's config, state and last 20 messages, records its
observations (about 16) and commits the turn (a user and an AI message). Every run is on its
own thread, whose history was seeded with 20 messages. For each backend the table gives runs/s
and the milliseconds added per run relative to `memory`, for 200 runs one after another and 200
runs at once (one event loop); then
PostgreSQL (and SQLite, for comparison) with 1, 2 and 4 worker processes, each doing 200
concurrent runs on its own threads, to show whether throughput scales with processes.
Each figure is the best of `--repeats` measurements. Targets: SQLite adds <= 2 ms per run,
PostgreSQL <= 5 ms.

    python benchmarks/storage.py [--runs 200] [--repeats 5] [--workers 1,2,4]
                                 [--postgres-url postgresql://postgres@127.0.0.1:5432/test]

PostgreSQL is skipped, with the reason printed, when the server cannot be reached. On one
machine a Unix socket (`postgresql://postgres@/test?host=/var/run/postgresql`) costs about
half what TCP on 127.0.0.1 does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _table import print_table

from pes_agent import AgentProps, configure_logging, create_agent, tool
from pes_agent.config import AgentState
from pes_agent.providers.base import LLMRequest
from pes_agent.storage import InMemoryStorage, PostgresStorage, SQLiteStorage, Storage
from pes_agent.testing import ScriptedProvider
from pes_agent.threads.messages import ConversationMessage, MessageRole

TARGET_ADDED_MS = {"sqlite": 2.0, "postgres": 5.0}
PLAN = json.dumps(
    {
        "intent": "weather",
        "plan": "1. look it up",
        "toolCalls": [{"callId": "c1", "toolName": "weather", "arguments": {"city": "Paris"}}],
    }
)


@tool
def weather(city: str) -> str:
    """Today's weather in a city."""
    return f"sunny in {city}"


HISTORY = 20


@dataclass(frozen=True, slots=True)
class Backend:
    """How to open one backend: a name, and a factory for a fresh storage object."""

    name: str
    open: Callable[[], Storage]


def message(thread_id: str, role: MessageRole, content: str) -> ConversationMessage:
    return ConversationMessage(thread_id=thread_id, role=role, content=content)


def _respond(request: LLMRequest) -> str:
    return PLAN if request.phase == "planning" else "It is sunny."


def make_run(storage: Storage) -> Callable[[str], Awaitable[None]]:
    """One agent on `storage`; each call does a whole run on the given thread.

    The agent is not closed here: whoever opened `storage` closes it.
    """
    # One response function for every call: concurrent runs share the scripted model.
    model = ScriptedProvider([_respond], repeat=True)
    agent = create_agent(provider=model, tools=[weather], storage=storage)

    async def run(thread_id: str) -> None:
        result = await agent.process(AgentProps("What is the weather in Paris?", thread_id))
        if result.metadata.status != "success":
            raise RuntimeError(f"benchmark run failed: {result.metadata.error}")

    return run


async def seed(storage: Storage, threads: list[str]) -> None:
    """Give every thread a history of HISTORY messages and a state."""

    async def one(thread_id: str) -> None:
        turns = [
            message(thread_id, role, f"seed {i}")
            for i in range(HISTORY // 2)
            for role in (MessageRole.USER, MessageRole.AI)
        ]
        await storage.commit_turn(thread_id, turns, AgentState(data={"turns": HISTORY // 2}))

    for start in range(0, len(threads), 50):
        await asyncio.gather(*(one(t) for t in threads[start : start + 50]))


async def timed(backend: Backend, runs: int, *, concurrent: bool) -> float:
    """Seconds for `runs` runs on fresh threads (one after another, or all at once)."""
    storage = backend.open()
    try:
        prefix = uuid.uuid4().hex[:8]
        threads = [f"bench-{prefix}-{i}" for i in range(runs)]
        await seed(storage, threads)
        run = make_run(storage)
        await run(f"warmup-{prefix}")
        start = time.perf_counter()
        if concurrent:
            await asyncio.gather(*(run(t) for t in threads))
        else:
            for thread_id in threads:
                await run(thread_id)
        return time.perf_counter() - start
    finally:
        await storage.aclose()


async def measure(backends: list[Backend], runs: int, repeats: int) -> None:
    for concurrent in (False, True):
        seconds: dict[str, float] = {}
        for backend in backends:
            samples = [await timed(backend, runs, concurrent=concurrent) for _ in range(repeats)]
            # The best of the repeats: the machine's other work only ever adds time.
            seconds[backend.name] = min(samples)
        base_ms = seconds["memory"] * 1000 / runs
        rows = []
        for name, secs in seconds.items():
            per_run_ms = secs * 1000 / runs
            added = per_run_ms - base_ms
            target = TARGET_ADDED_MS.get(name)
            verdict = "" if target is None else ("ok" if added <= target else "OVER")
            rows.append([name, f"{runs / secs:,.0f}", per_run_ms, added, target or "", verdict])
        mode = "concurrent (asyncio.gather)" if concurrent else "sequential"
        print_table(
            f"{runs} runs, {mode}, best of {repeats}",
            ["backend", "runs/s", "ms/run", "ms added vs memory", "target ms", ""],
            rows,
        )


# -- worker processes -------------------------------------------------------------------------


def _worker(spec: tuple[str, str, str], runs: int, ready: Any, go: Any, results: Any) -> None:
    kind, target, schema = spec

    async def main() -> None:
        configure_logging("WARNING")
        storage: Storage = (
            PostgresStorage(target, schema=schema) if kind == "postgres" else SQLiteStorage(target)
        )
        try:
            prefix = uuid.uuid4().hex[:8]
            threads = [f"proc-{prefix}-{i}" for i in range(runs)]
            await seed(storage, threads)
            run = make_run(storage)
            await run(f"warmup-{prefix}")
            ready.put(os.getpid())
            await asyncio.to_thread(go.wait)
            start = time.monotonic()
            await asyncio.gather(*(run(t) for t in threads))
            results.put((start, time.monotonic()))
        finally:
            await storage.aclose()

    asyncio.run(main())


def scale(kind: str, target: str, schema: str, runs: int, workers: list[int]) -> list[list[Any]]:
    """Rows of (workers, total runs, runs/s) for `kind` with each number of processes."""
    context = multiprocessing.get_context("spawn")
    rows: list[list[Any]] = []
    single: float | None = None
    for count in workers:
        ready, results, go = context.Queue(), context.Queue(), context.Event()
        processes = [
            context.Process(target=_worker, args=((kind, target, schema), runs, ready, go, results))
            for _ in range(count)
        ]
        for process in processes:
            process.start()
        for _ in processes:
            ready.get(timeout=120)
        go.set()
        spans = [results.get(timeout=300) for _ in processes]
        for process in processes:
            process.join()
        wall = max(end for _, end in spans) - min(start for start, _ in spans)
        rate = count * runs / wall
        single = single or rate
        rows.append([count, count * runs, f"{rate:,.0f}", f"{rate / single:.2f}x"])
        ready.close()
        results.close()
    return rows


async def postgres_problem(url: str) -> str | None:
    storage = PostgresStorage(url, schema="pes_bench_probe")
    try:
        await storage.initialize()
    except Exception as exc:
        return str(exc)
    finally:
        await storage.aclose()
    return None


async def drop_schemas(url: str, *schemas: str) -> None:
    import asyncpg  # type: ignore[import-untyped]

    conn = await asyncpg.connect(url)
    try:
        for schema in schemas:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get(
            "PES_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
        ),
    )
    args = parser.parse_args(argv)
    configure_logging("WARNING")
    workers = [int(n) for n in args.workers.split(",")]
    schema = f"pes_bench_{uuid.uuid4().hex[:12]}"

    with tempfile.TemporaryDirectory() as tmp:
        sqlite_path = Path(tmp) / "bench.db"
        backends = [
            # A new one each time: a store refuses every call once closed.
            Backend("memory", InMemoryStorage),
            Backend("sqlite", lambda: SQLiteStorage(sqlite_path)),
        ]
        problem = asyncio.run(postgres_problem(args.postgres_url))
        if problem is None:
            backends.append(
                Backend("postgres", lambda: PostgresStorage(args.postgres_url, schema=schema))
            )
        else:
            print(f"PostgreSQL skipped: {problem}")
        try:
            asyncio.run(measure(backends, args.runs, args.repeats))
            header = ["processes", "runs", "runs/s", "vs 1 process"]
            if problem is None:
                print_table(
                    f"PostgreSQL, {args.runs} concurrent runs per process",
                    header,
                    scale("postgres", args.postgres_url, schema, args.runs, workers),
                )
            print_table(
                f"SQLite (one file), {args.runs} concurrent runs per process",
                header,
                scale("sqlite", str(sqlite_path), "", args.runs, workers),
            )
        finally:
            if problem is None:
                asyncio.run(drop_schemas(args.postgres_url, schema, "pes_bench_probe"))
    print(f"\ncores: {os.cpu_count()}; python {sys.version.split()[0]}")


if __name__ == "__main__":
    main(sys.argv[1:])
