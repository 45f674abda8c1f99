"""Vector stores side by side: index time, query latency and recall@10 against brute force.

Each store indexes `--chunks` random vectors of `--dimension` floats (seeded; unit-normal
entries, so every direction is equally likely: the hardest case for an approximate index, and
no help from clusters), with a short text and one metadata key per row, in batches of 500, then
answers `--queries` random query vectors one after another with top 10. Latency is the wall
time of each `await store.search(...)` (the event loop's view, threads and round trips
included); recall@10 is the share of the exact brute-force top 10 (NumPy, float64 cosine) that
the store returned. Targets: SQLite p95 <= 20 ms at 10k, in-memory <= 5 ms, recall@10 >= 0.95
for any approximate index (all three stores here search exactly).

    python benchmarks/retrieval.py [--chunks 10000] [--queries 1000] [--dimension 384]
                                   [--postgres-url postgresql://postgres@127.0.0.1:5432/test]

PostgreSQL runs in a schema of its own, dropped afterwards, and is skipped with the reason
printed when the server cannot be reached; its row says which backend it used (pgvector, or
the plain-SQL arrays fallback).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt
from _table import print_table

from pes_agent.retrieval import (
    InMemoryVectorStore,
    PostgresVectorStore,
    SQLiteVectorStore,
    VectorStore,
)

TOP_K = 10
BATCH = 500


def exact_top(matrix: npt.NDArray[np.float64], queries: npt.NDArray[np.float64]) -> list[set[int]]:
    """The brute-force top 10 row indices of each query, by cosine similarity."""
    unit = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    scores = (queries / np.linalg.norm(queries, axis=1, keepdims=True)) @ unit.T
    return [set(np.argsort(-row)[:TOP_K].tolist()) for row in scores]


async def measure(
    name: str,
    store: VectorStore,
    matrix: npt.NDArray[np.float64],
    queries: npt.NDArray[np.float64],
    truth: list[set[int]],
) -> list[object]:
    """One table row: index seconds, p50/p95/max query ms and recall@10."""
    started = time.perf_counter()
    for start in range(0, len(matrix), BATCH):
        stop = min(start + BATCH, len(matrix))
        await store.add(
            [str(i) for i in range(start, stop)],
            matrix[start:stop].tolist(),
            [f"chunk {i}" for i in range(start, stop)],
            [{"part": i % 10} for i in range(start, stop)],
        )
    index_s = time.perf_counter() - started
    await store.search(queries[0].tolist(), TOP_K)  # warm-up: connections, caches, snapshot
    latencies: list[float] = []
    found = 0
    for query, expected in zip(queries, truth, strict=True):
        vector = query.tolist()
        begun = time.perf_counter()
        hits = await store.search(vector, TOP_K)
        latencies.append((time.perf_counter() - begun) * 1000.0)
        found += len(expected & {int(hit.id) for hit in hits})
    latencies.sort()
    p95 = latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))]
    recall = found / (TOP_K * len(queries))
    return [name, len(matrix), index_s, statistics.median(latencies), p95, latencies[-1], recall]


async def drop_schema(url: str, schema: str) -> None:
    import asyncpg  # type: ignore[import-untyped]

    conn = await asyncpg.connect(url, timeout=5)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


async def run(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(args.seed)
    matrix = rng.standard_normal((args.chunks, args.dimension))
    queries = rng.standard_normal((args.queries, args.dimension))
    truth = exact_top(matrix, queries)
    rows: list[list[object]] = []
    skipped: list[str] = []
    with tempfile.TemporaryDirectory() as folder:
        makers: list[tuple[str, Callable[[], VectorStore]]] = [
            ("in-memory (NumPy)", lambda: InMemoryVectorStore(args.dimension)),
            (
                "SQLite (sqlite-vec)",
                lambda: SQLiteVectorStore(Path(folder) / "v.db", dimension=args.dimension),
            ),
        ]
        for name, make in makers:
            store = make()
            try:
                rows.append(await measure(name, store, matrix, queries, truth))
            finally:
                await store.aclose()
    if args.postgres_url:
        schema = f"pes_bench_{uuid.uuid4().hex[:12]}"
        store = PostgresVectorStore(args.postgres_url, schema=schema, dimension=args.dimension)
        try:
            backend = await store.backend()
        except Exception as exc:
            skipped.append(f"PostgreSQL skipped: {exc}")
            await store.aclose()
        else:
            try:
                name = f"PostgreSQL ({backend})"
                rows.append(await measure(name, store, matrix, queries, truth))
            finally:
                await store.aclose()
                await drop_schema(args.postgres_url, schema)
    print_table(
        f"Vector stores: {args.queries} queries, top {TOP_K}, dimension {args.dimension}",
        ["store", "chunks", "index s", "p50 ms", "p95 ms", "max ms", "recall@10"],
        rows,
    )
    for line in skipped:
        print(line)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument("--dimension", type=int, default=384)
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get(
            "PES_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
        ),
        help="empty to skip PostgreSQL",
    )
    asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    main(sys.argv[1:])
