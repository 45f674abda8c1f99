"""The HTTP service under load, and what it adds to a run over `agent.process`.

Every server is `pes_agent.server.create_app` run by real uvicorn worker processes on
127.0.0.1 (`uvicorn --factory --workers N` on this module's `app_from_env`, the options handed
to the workers in the `PES_BENCH_SERVER` environment variable as `pes-agent serve` does),
serving an agent whose scripted model answers each call after `--latency-ms` (50 ms): a plan
with two quick tool calls that run side by side, then the answer. It answers by phase, so any
number of runs may overlap. A run is thus two model calls, about 100 ms of waiting.

1. Load: `--clients` (50) concurrent httpx clients, each on a conversation thread of its own,
   send `POST /v1/threads/{id}/runs` (JSON) one after another, `--runs` each per round, to 1
   and 2 workers on a SQLite file and on PostgreSQL. Each run opens a connection of its own
   (`--keep-alive`: one kept per client), since uvicorn's workers share a listening socket and
   a kept-alive connection stays with whichever worker accepted it, however unevenly. All
   servers are started at once and measured in a rotating order for `--rounds` rounds, so the
   machine's noise hits all alike: runs/s is the median of the rounds, p50/p95 are over every
   run; CPU is the server processes' (and this client's) user + system time per run.
2. Overhead: at concurrency 1, `agent.process` called in this process beside the same request
   to the 1-worker server of the same store kind (same model latency, tools and store kind),
   interleaved for `--samples` samples each: as JSON, as server-sent events (read to the end of
   the stream, just after its `final` event), and an HTTP round trip that runs nothing (a 404),
   which tells the transport (TCP, uvicorn, waking two idle processes) from the server's work.
   These requests go through a lean client (h11 on one kept-alive asyncio connection), so that
   what is measured is the server; the same JSON request and 404 through httpx show what a
   full-featured client library adds on the client's side. The server also times each JSON
   run request from inside (from the app receiving it to uvicorn taking the response, less
   the `agent.process` call it made; `GET /bench/timings` on the benchmark's own app). Target:
   that, the server's own overhead, at most 2 ms at p50; the end-to-end figure beside it adds
   the loopback round trip and the two processes waking for each other.

    python benchmarks/server.py [--clients 50] [--runs 10] [--rounds 3] [--samples 200]
                                [--latency-ms 50] [--workers 1,2] [--keep-alive]
                                [--postgres-url postgresql://postgres@127.0.0.1:5432/test]

PostgreSQL runs in fresh schemas, dropped afterwards, and is skipped with the reason printed
when the server cannot be reached (`--postgres-url ''` skips it). The script exits 1 if any
run failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import importlib.util
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h11
import httpx2 as httpx
from _table import median_ms, print_table

from pes_agent import AgentCore, AgentProps, create_agent, tool
from pes_agent.providers.base import LLMRequest
from pes_agent.testing import ScriptedProvider

#: Where the benchmark hands a server's options to its uvicorn workers.
BENCH_ENV_VAR = "PES_BENCH_SERVER"
TOKEN = "bench-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
QUERY = "Lisbon or Porto today: which one is warmer?"
QUERY_BODY = {"query": QUERY}
TARGET_OVERHEAD_MS = 2.0
HERE = Path(__file__).resolve().parent

PLAN = json.dumps(
    {
        "intent": "compare the weather in two cities",
        "plan": "1. Look up Lisbon and Porto at once.\n2. Say which one is warmer.",
        "toolCalls": [
            {"callId": "call_1", "toolName": "weather", "arguments": {"city": "Lisbon"}},
            {"callId": "call_2", "toolName": "weather", "arguments": {"city": "Porto"}},
        ],
    }
)
ANSWER = "Lisbon is warmer today: 24 °C against 19 °C in Porto."
_CELSIUS = {"Lisbon": 24, "Porto": 19}

DIRECT = "agent.process (direct)"
JSON_RUN = "POST /runs, JSON"
SSE_RUN = "POST /runs, SSE"
ROUND_TRIP = "HTTP round trip alone (404)"
HTTPX_JSON_RUN = "httpx: POST /runs, JSON"
HTTPX_ROUND_TRIP = "httpx: round trip alone (404)"
INSIDE = "inside the server: request - agent.process"
#: The benchmark's own endpoint on its servers: the run requests timed from inside.
TIMINGS_PATH = "/bench/timings"


@tool
async def weather(city: str) -> dict[str, Any]:
    """Today's temperature in a city."""
    return {"city": city, "celsius": _CELSIUS.get(city, 20)}


def make_agent(storage: str, latency_s: float) -> AgentCore:
    """The benchmark's agent: the scripted model (plan, then answer) and `weather`, on `storage`."""
    # The scripted model keeps every request it is sent: trimmed here, or a long benchmark
    # would grow it (and the garbage collector's work) without bound.
    requests: list[LLMRequest] = []

    def respond(request: LLMRequest) -> str:
        if len(requests) > 64:
            del requests[:-1]
        return PLAN if request.phase == "planning" else ANSWER

    model = ScriptedProvider([respond], repeat=True, latency_s=latency_s, requests=requests)
    return create_agent(provider=model, tools=[weather], storage=storage)


def app_from_env() -> Any:
    """uvicorn's factory (`--factory`): the app for the options in `PES_BENCH_SERVER`, timed
    from inside (`timed_app`)."""
    from pes_agent.server import create_app

    options = json.loads(os.environ[BENCH_ENV_VAR])
    agent = make_agent(options["storage"], options["latency_s"])
    return timed_app(create_app, agent)


def timed_app(create_app: Callable[..., Any], agent: AgentCore) -> Any:
    """The server's app, timing each JSON run request from inside the process: from the app
    receiving it to uvicorn taking the response's last byte, and the `agent.process` call it
    made. `GET TIMINGS_PATH` answers the pairs recorded so far (in ns) and forgets them."""
    pairs: list[tuple[int, int]] = []
    spent: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar(
        "bench_process_ns", default=None
    )
    process = agent.process

    async def timed_process(props: AgentProps) -> Any:
        started = time.perf_counter_ns()
        try:
            return await process(props)
        finally:
            holder = spent.get()
            if holder is not None:
                holder.append(time.perf_counter_ns() - started)

    # The run's task is created inside the request, so it sees the request's holder.
    agent.process = timed_process  # type: ignore[method-assign]
    inner = create_app(agent, tokens=[TOKEN], close_agent=True)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await inner(scope, receive, send)
        if scope["path"] == TIMINGS_PATH:
            body = json.dumps(pairs).encode()
            pairs.clear()
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            return await send({"type": "http.response.body", "body": body})
        accept = dict(scope["headers"]).get(b"accept", b"")
        if scope["method"] != "POST" or not scope["path"].endswith("/runs") or b"stream" in accept:
            return await inner(scope, receive, send)
        holder: list[int] = []
        token = spent.set(holder)
        started = time.perf_counter_ns()

        async def timed_send(message: dict[str, Any]) -> None:
            await send(message)
            last = message["type"] == "http.response.body" and not message.get("more_body")
            if last and holder:
                pairs.append((time.perf_counter_ns() - started, holder[0]))

        try:
            await inner(scope, receive, timed_send)
        finally:
            spent.reset(token)

    return app


@contextlib.asynccontextmanager
async def opened_agent(storage: str, latency_s: float) -> AsyncIterator[AgentCore]:
    agent = make_agent(storage, latency_s)
    try:
        yield agent
    finally:
        await agent.aclose()


# -- servers ----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def cpu_seconds(root: int) -> float | None:
    """User + system CPU seconds of process `root` and its children so far (Linux /proc)."""
    proc = Path("/proc")
    if not (proc / str(root) / "stat").exists():
        return None
    ticks = 0
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # The fields after the command name, which may itself hold spaces and parentheses.
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(entry.name) == root or int(fields[1]) == root:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class Store:
    """A store kind, and a function naming a fresh store of that kind (`spec(label)`)."""

    kind: str
    spec: Callable[[str], str]


@dataclass(slots=True)
class Server:
    """A uvicorn process (and its workers) serving the benchmark's agent, and what it measured."""

    store: str
    workers: int
    url: str
    process: subprocess.Popen[bytes]
    rates: list[float] = field(default_factory=list)
    latencies_ns: list[int] = field(default_factory=list)
    runs: int = 0
    errors: int = 0
    server_cpu_s: float | None = 0.0
    client_cpu_s: float = 0.0


@contextlib.contextmanager
def serving(
    store: str, spec: str, workers: int, latency_s: float, folder: Path
) -> Iterator[Server]:
    """Start uvicorn with `workers` workers on a free port; stop it (SIGINT) on leaving."""
    port = free_port()
    log = folder / f"uvicorn-{store}-{workers}-{port}.log"
    env = {**os.environ, BENCH_ENV_VAR: json.dumps({"storage": spec, "latency_s": latency_s})}
    command = [sys.executable, "-m", "uvicorn", "server:app_from_env", "--factory"]
    command += ["--app-dir", str(HERE), "--host", "127.0.0.1", "--port", str(port)]
    command += ["--workers", str(workers), "--log-level", "info", "--no-access-log"]
    with log.open("wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        # Every worker logs this once its lifespan started: the first alone would not do.
        deadline = time.monotonic() + 60
        while log.read_text().count("Application startup complete") < workers:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.05)
        yield Server(store, workers, f"http://127.0.0.1:{port}", process)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# -- load -------------------------------------------------------------------------------------


class RunFailed(Exception):
    """A run answered with something other than a successful final response."""


def check(response: httpx.Response) -> None:
    if response.status_code != 200:
        raise RunFailed(f"HTTP {response.status_code}: {response.text[:300]}")
    metadata = response.json()["metadata"]
    if metadata["status"] != "success":
        raise RunFailed(f"run {metadata['status']}: {metadata.get('error')}")


async def one_client(
    http: httpx.AsyncClient, thread_id: str, runs: int, server: Server, record: bool
) -> None:
    for _ in range(runs):
        started = time.perf_counter_ns()
        try:
            check(await http.post(f"/v1/threads/{thread_id}/runs", json=QUERY_BODY))
        except (RunFailed, httpx.HTTPError) as error:
            server.errors += 1
            print(f"{server.store}, {server.workers} worker(s): {error!r}", file=sys.stderr)
            continue
        if record:
            server.latencies_ns.append(time.perf_counter_ns() - started)
            server.runs += 1


async def load_round(
    server: Server, clients: list[httpx.AsyncClient], runs: int, *, record: bool = True
) -> None:
    """Every client does `runs` runs on its own thread; runs/s and CPU are recorded."""
    cpu_before = cpu_seconds(server.process.pid)
    client_before = time.process_time()
    started = time.perf_counter()
    await asyncio.gather(
        *(
            one_client(http, f"load-{number}", runs, server, record)
            for number, http in enumerate(clients)
        )
    )
    if not record:
        return
    server.rates.append(len(clients) * runs / (time.perf_counter() - started))
    server.client_cpu_s += time.process_time() - client_before
    cpu_after = cpu_seconds(server.process.pid)
    if server.server_cpu_s is None or cpu_before is None or cpu_after is None:
        server.server_cpu_s = None
    else:
        server.server_cpu_s += cpu_after - cpu_before


async def measure_load(
    servers: list[Server], clients: int, runs: int, rounds: int, *, keep_alive: bool
) -> None:
    """Rounds of load on every server in a rotating order."""
    # Of 50 connections opened at once one uvicorn worker took 48 here: kept alive, they
    # would pin the load on it. A connection per run lets whichever worker is free accept.
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=int(keep_alive))
    async with contextlib.AsyncExitStack() as stack:
        pools: list[list[httpx.AsyncClient]] = []
        for server in servers:
            pool = [
                await stack.enter_async_context(
                    httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=120, limits=limits)
                )
                for _ in range(clients)
            ]
            pools.append(pool)
            # Warm-up: connections, the store's tables, every thread's first turns.
            await load_round(server, pool, 2, record=False)
        for number in range(rounds):
            shift = number % len(servers)
            for index in [*range(shift, len(servers)), *range(shift)]:
                await load_round(servers[index], pools[index], runs)


def percentile_ms(samples_ns: Sequence[int], share: float) -> float:
    ordered = sorted(samples_ns) or [0]
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] / 1e6


def load_rows(servers: list[Server]) -> list[list[object]]:
    rows: list[list[object]] = []
    single: dict[str, float] = {}
    for server in servers:
        rate = statistics.median(server.rates) if server.rates else 0.0
        base = single.setdefault(server.store, rate)
        runs = max(server.runs, 1)
        cpu = server.server_cpu_s
        rows.append(
            [
                server.store,
                server.workers,
                server.runs,
                server.errors,
                f"{rate:,.1f}",
                f"{rate / base:.2f}x" if base else "-",
                median_ms(server.latencies_ns or [0]),
                percentile_ms(server.latencies_ns, 0.95),
                "-" if cpu is None else f"{cpu * 1000 / runs:.2f}",
                f"{server.client_cpu_s * 1000 / runs:.2f}",
            ]
        )
    return rows


# -- overhead ---------------------------------------------------------------------------------


class LeanClient:
    """HTTP/1.1 on one kept-alive connection, spoken with h11 over asyncio streams: about the
    least a client can add to a request, so that the overhead measured is the server's."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        address = httpx.URL(url)
        self._host = address.host
        self._port = address.port or 80
        self._headers = [("Host", f"{self._host}:{self._port}"), *headers.items()]
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._conn = h11.Connection(h11.CLIENT)

    async def request(
        self, method: str, target: str, body: Any = None, headers: Sequence[tuple[str, str]] = ()
    ) -> tuple[int, bytes]:
        """Send one request; its status and whole body (a finished event stream included)."""
        if self._writer is None or self._conn.our_state is not h11.IDLE:
            await self.aclose()
            self._reader, self._writer = await asyncio.open_connection(self._host, self._port)
            self._conn = h11.Connection(h11.CLIENT)
        assert self._reader is not None
        payload = b"" if body is None else json.dumps(body).encode()
        fields = [*self._headers, *headers, ("Content-Length", str(len(payload)))]
        if body is not None:
            fields.append(("Content-Type", "application/json"))
        out = self._conn.send(h11.Request(method=method, target=target, headers=fields))
        out += self._conn.send(h11.Data(data=payload)) if payload else b""
        out += self._conn.send(h11.EndOfMessage())
        self._writer.write(out)
        status, chunks = 0, []
        while True:
            event = self._conn.next_event()
            if event is h11.NEED_DATA:
                received = await self._reader.read(65536)
                if not received:
                    raise RunFailed("the server closed the connection mid-response")
                self._conn.receive_data(received)
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                break
            elif isinstance(event, h11.ConnectionClosed):
                raise RunFailed("the server closed the connection mid-response")
        if self._conn.our_state is h11.DONE and self._conn.their_state is h11.DONE:
            self._conn.start_next_cycle()
        return status, b"".join(chunks)

    async def aclose(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError):
                await self._writer.wait_closed()
        self._reader = self._writer = None


def final_of_stream(body: bytes) -> dict[str, Any]:
    """The data of the `final` event of a whole server-sent event stream."""
    event = None
    for line in body.decode().splitlines():
        if line.startswith("event: "):
            event = line.removeprefix("event: ")
        elif line.startswith("data: ") and event in ("final", "error"):
            data: dict[str, Any] = json.loads(line.removeprefix("data: "))
            if event == "error":
                raise RunFailed(f"run error: {data}")
            return data
    raise RunFailed("the event stream ended without a final event")


def check_run(status: int, body: bytes) -> None:
    """Fail unless a JSON run answered 200 with a successful response."""
    if status != 200:
        raise RunFailed(f"HTTP {status}: {body[:300]!r}")
    metadata = json.loads(body)["metadata"]
    if metadata["status"] != "success":
        raise RunFailed(f"run {metadata['status']}: {metadata.get('error')}")


async def measure_overhead(
    store: str, direct: AgentCore, url: str, samples: int
) -> tuple[dict[str, list[int]], int]:
    """Interleaved samples of one run called directly, as JSON, as SSE, and of a bare 404."""
    errors = 0
    lean = LeanClient(url, AUTH)
    async with httpx.AsyncClient(base_url=url, headers=AUTH, timeout=60) as http:

        async def direct_run(thread_id: str) -> None:
            result = await direct.process(AgentProps(QUERY, thread_id))
            if result.metadata.status != "success":
                raise RunFailed(f"run {result.metadata.status}: {result.metadata.error}")

        async def json_run(thread_id: str) -> None:
            check_run(*await lean.request("POST", f"/v1/threads/{thread_id}/runs", QUERY_BODY))

        async def sse_run(thread_id: str) -> None:
            accept = [("Accept", "text/event-stream")]
            status, body = await lean.request(
                "POST", f"/v1/threads/{thread_id}/runs", QUERY_BODY, accept
            )
            if status != 200:
                raise RunFailed(f"HTTP {status}")
            final = final_of_stream(body)
            if final["metadata"]["status"] != "success":
                raise RunFailed(f"run {final['metadata']['status']}")

        async def round_trip(thread_id: str) -> None:
            if (await lean.request("GET", "/v1/no-such-endpoint"))[0] != 404:
                raise RunFailed("the bare round trip did not answer 404")

        async def httpx_json_run(thread_id: str) -> None:
            check(await http.post(f"/v1/threads/{thread_id}/runs", json=QUERY_BODY))

        async def httpx_round_trip(thread_id: str) -> None:
            if (await http.get("/v1/no-such-endpoint")).status_code != 404:
                raise RunFailed("the bare round trip did not answer 404")

        paths: dict[str, Callable[[str], Awaitable[None]]] = {
            DIRECT: direct_run,
            JSON_RUN: json_run,
            SSE_RUN: sse_run,
            ROUND_TRIP: round_trip,
            HTTPX_JSON_RUN: httpx_json_run,
            HTTPX_ROUND_TRIP: httpx_round_trip,
        }
        times: dict[str, list[int]] = {name: [] for name in paths}
        names = list(paths)
        await lean.request("GET", TIMINGS_PATH)  # forget the load's runs
        try:
            for number in range(-5, samples):  # five warm-up rotations, not recorded
                # Each path in every place of the order in turn; ten threads, so histories grow.
                shift = number % len(names)
                thread_id = f"overhead-{number % 10}"
                for name in names[shift:] + names[:shift]:
                    started = time.perf_counter_ns()
                    try:
                        await paths[name](thread_id)
                    except (RunFailed, httpx.HTTPError, OSError) as error:
                        errors += 1
                        print(f"overhead, {store}, {name}: {error!r}", file=sys.stderr)
                        continue
                    if number >= 0:
                        times[name].append(time.perf_counter_ns() - started)
            # What the server measured of the same JSON runs (warm-ups and httpx's too).
            status, body = await lean.request("GET", TIMINGS_PATH)
            if status != 200:
                raise RunFailed(f"HTTP {status} from {TIMINGS_PATH}")
            times[INSIDE] = [request - process for request, process in json.loads(body)]
        finally:
            await lean.aclose()
    return times, errors


def overhead_rows(store: str, times: dict[str, list[int]]) -> list[list[object]]:
    base = median_ms(times[DIRECT] or [0])
    rows: list[list[object]] = []
    for name, samples in times.items():
        p50 = median_ms(samples or [0])
        added = f"{p50 - base:+.3f}" if name in (JSON_RUN, SSE_RUN, HTTPX_JSON_RUN) else ""
        if name == INSIDE:
            added = f"{p50:+.3f}"
        rows.append([store, name, len(samples), p50, percentile_ms(samples, 0.95), added])
    return rows


def overhead_verdict(store: str, times: dict[str, list[int]]) -> str:
    """The target judged on the server's own overhead; end to end reported beside it."""
    inside = median_ms(times[INSIDE] or [0])
    end_to_end = median_ms(times[JSON_RUN] or [0]) - median_ms(times[DIRECT] or [0])
    transport = median_ms(times[ROUND_TRIP] or [0])
    client = median_ms(times[HTTPX_JSON_RUN] or [0]) - median_ms(times[JSON_RUN] or [0])
    verdict = "met" if inside <= TARGET_OVERHEAD_MS else "NOT met"
    return (
        f"server overhead at p50, {store}: {inside:+.3f} ms a run inside the server (request "
        f"received to response sent, less its agent.process call); target <= "
        f"{TARGET_OVERHEAD_MS:g} ms -> {verdict}. End to end through the lean client "
        f"{end_to_end:+.3f} ms over agent.process here, of which a bare round trip "
        f"{transport:.3f} ms; httpx as the client adds {client:+.3f} ms more"
    )


# -- PostgreSQL -------------------------------------------------------------------------------


async def postgres_problem(url: str) -> str | None:
    import asyncpg  # type: ignore[import-untyped]

    try:
        conn = await asyncpg.connect(url, timeout=5)
    except Exception as exc:
        return str(exc) or repr(exc)
    await conn.close()
    return None


async def drop_schemas(url: str, schemas: Sequence[str]) -> None:
    import asyncpg

    conn = await asyncpg.connect(url, timeout=5)
    try:
        for schema in schemas:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


# -- main -------------------------------------------------------------------------------------


def stores(args: argparse.Namespace, folder: Path, schemas: list[str]) -> list[Store]:
    """SQLite files in `folder`, and PostgreSQL schemas (noted in `schemas`) if reachable."""
    found = [Store("sqlite", lambda label: f"sqlite:///{folder / label}.db")]
    if not args.postgres_url:
        return found
    problem = asyncio.run(postgres_problem(args.postgres_url))
    if problem is not None:
        print(f"PostgreSQL skipped: {problem}")
        return found

    def fresh_schema(label: str) -> str:
        schema = f"pes_bench_{uuid.uuid4().hex[:12]}"
        schemas.append(schema)
        separator = "&" if "?" in args.postgres_url else "?"
        return f"{args.postgres_url}{separator}schema={schema}"

    found.append(Store("postgres", fresh_schema))
    return found


async def measure(args: argparse.Namespace, folder: Path, kinds: list[Store]) -> int:
    """Print both tables; the number of failed runs."""
    latency_s = args.latency_ms / 1000
    workers = [int(n) for n in args.workers.split(",")]
    connections = "a connection kept per client" if args.keep_alive else "a connection per run"
    rows: list[list[object]] = []
    verdicts: list[str] = []
    with contextlib.ExitStack() as stack:
        servers = [
            stack.enter_context(
                serving(kind.kind, kind.spec(f"load-{count}"), count, latency_s, folder)
            )
            for kind in kinds
            for count in workers
        ]
        await measure_load(
            servers, args.clients, args.runs, args.rounds, keep_alive=args.keep_alive
        )
        errors = sum(server.errors for server in servers)
        print_table(
            f"POST /v1/threads/{{id}}/runs (JSON): {args.clients} concurrent clients, a thread "
            f"each, {args.runs} runs each per round, {args.rounds} rounds, {connections}; "
            f"model {args.latency_ms:g} ms a call, 2 calls a run",
            [
                "store",
                "workers",
                "runs",
                "errors",
                "runs/s",
                "vs 1 worker",
                "p50 ms",
                "p95 ms",
                "server CPU ms/run",
                "client CPU ms/run",
            ],
            load_rows(servers),
        )
        for kind in kinds:
            server = next(s for s in servers if s.store == kind.kind and s.workers == 1)
            async with opened_agent(kind.spec("direct"), latency_s) as direct:
                times, failed = await measure_overhead(kind.kind, direct, server.url, args.samples)
            errors += failed
            rows += overhead_rows(kind.kind, times)
            verdicts.append(overhead_verdict(kind.kind, times))
    print_table(
        f"One run at concurrency 1: agent.process vs the same agent behind 1 uvicorn worker "
        f"({args.samples} samples each, interleaved)",
        ["store", "path", "samples", "p50 ms", "p95 ms", "+ms p50 vs direct"],
        rows,
    )
    for line in verdicts:
        print(line)
    return errors


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--runs", type=int, default=10, help="runs per client per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument(
        "--keep-alive",
        action="store_true",
        help="each load client keeps one connection (default: a new connection per run)",
    )
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get(
            "PES_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
        ),
        help="empty to skip PostgreSQL",
    )
    args = parser.parse_args(argv)
    if "1" not in args.workers.split(","):
        parser.error("--workers must include 1 (the overhead is measured on 1 worker)")
    schemas: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        try:
            errors = asyncio.run(measure(args, folder, stores(args, folder, schemas)))
        finally:
            if schemas:
                asyncio.run(drop_schemas(args.postgres_url, schemas))
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    print(f"\ncores: {os.cpu_count()}; python {sys.version.split()[0]}; uvicorn on {loop} + {http}")
    print(f"failed runs: {errors}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
