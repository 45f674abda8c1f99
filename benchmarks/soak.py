"""Soak test: many concurrent runs with faults injected, then every thread's history checked.

Runs go through `create_agent(...).process(AgentProps(query, thread_id))` on a scripted model,
many threads at once (at most 2*T runs in flight). Everything random is drawn from one seeded
`random.Random`, up front: each run plans 1-4 tool calls (later ones fed earlier results through
`{step_N_result}` placeholders); tool calls succeed, fail, raise something unexpected, time out
or get invalid arguments; the model fails before or in the middle of its stream, or writes a
plan that needs the repair round-trip (which sometimes fails again); and the client cancels some
runs at a random moment.

Afterwards every thread's history is read back by a storage object of its own and checked:
each turn is its user message immediately followed by its AI message (same run marker, same
trace id); a run that ended success/partial, or whose FINAL_RESPONSE was observed, has its turn
saved exactly once; a cancelled or failed run leaves both messages or none; on each thread the
turns are stored in the order the runs committed (the order of their FINAL_RESPONSE
observations); and each run's prompt held the turn committed just before its own (else two runs
on one thread overlapped). `lost` counts missing turns and half turns; `interleaved` counts
turns split by another message, stored twice, carrying another run's marker, out of order, or
from overlapping runs. Open fds and live asyncio tasks are compared between the start and the
end (after `aclose()` and a short settle). The last line is the verdict; the exit code is 1 if
anything was lost, interleaved or leaked, if `process()` raised, or if fewer than half of the
runs without injected faults succeeded (a soak in which everything fails proves nothing).

    python benchmarks/soak.py [--runs N] [--threads T] [--storage sqlite|postgres] [--seed S]
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import gc
import json
import logging
import os
import random
import re
import resource
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from _table import print_table

from pes_agent import (
    AgentProps,
    LLMRequest,
    Observation,
    ObservationType,
    ProviderError,
    create_agent,
    tool,
)
from pes_agent.providers.base import ProviderEvent, TokenDelta
from pes_agent.storage import open_storage
from pes_agent.testing import ScriptedProvider
from pes_agent.threads.messages import ConversationMessage

POSTGRES_URL = os.environ.get("PES_SOAK_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
TOOL_TIMEOUT_S = 0.2
OUTCOMES = ("success", "partial", "error", "cancelled", "raised")
MARKER = re.compile(r"run (\d+) on thread (t\d+)")

ToolMode = Literal["ok", "fail", "raise", "timeout"]
ProviderFault = Literal["before", "midstream"]


# --- tools: what each call does is in its arguments, decided by the seeded plan ---------------


class LookupFailed(Exception):
    """An expected tool failure."""


async def _behave(mode: str, delay_ms: int) -> None:
    await asyncio.sleep(delay_ms / 1000)
    if mode == "fail":
        raise LookupFailed("the record is not there")
    if mode == "raise":
        records: dict[str, int] = {}
        records["surprise"] += 1  # an unexpected KeyError, as a buggy tool would raise
    if mode == "timeout":
        await asyncio.sleep(30)  # the agent's tool_timeout_s ends this long before


@tool
async def fetch(key: str, mode: str, delay_ms: int) -> dict[str, object]:
    """Fetch the record stored under `key`."""
    await _behave(mode, delay_ms)
    return {"key": key, "value": f"value-of-{key}", "size": len(key)}


@tool
async def combine(text: str, mode: str, delay_ms: int) -> str:
    """Combine earlier results given as text."""
    await _behave(mode, delay_ms)
    return f"combined({len(text)} chars)"


@tool
def digest(text: str) -> int:
    """A checksum of `text` (a synchronous tool, run on a worker thread)."""
    return sum(text.encode()) % 65521


# --- the scripted runs -----------------------------------------------------------------------


@dataclass(slots=True)
class RunScript:
    """Everything one run will do, drawn from the seeded generator before the soak starts."""

    index: int
    thread_id: str
    trace_id: str
    calls: list[dict[str, Any]]
    fate: str
    latency_s: float
    faults: dict[str, ProviderFault] = field(default_factory=dict)
    bad_plan: int = 0  # 0: a good plan; 1: garbage, repaired; 2: garbage, the repair too
    cancel_after_s: float | None = None

    @property
    def marker(self) -> str:
        return f"run {self.index} on thread {self.thread_id}"

    @property
    def query(self) -> str:
        return f"Please handle {self.marker}."


def _draw_calls(rng: random.Random) -> tuple[list[dict[str, Any]], bool]:
    """1-4 tool calls, and whether any is set to fail; every plan of 2+ calls has a
    placeholder dependency."""
    count = rng.randint(1, 4)
    modes: list[ToolMode] = ["ok", "fail", "raise", "timeout"]
    calls: list[dict[str, Any]] = []
    faulty = False
    for position in range(1, count + 1):
        mode = rng.choices(modes, weights=[88, 5, 4, 3])[0]
        delay_ms = rng.randint(0, 5)
        call_id = f"call_{position}"
        kind = "fetch" if position == 1 else rng.choice(["fetch", "combine", "digest", "bad"])
        if position == 2 and kind == "fetch":
            kind = "combine"
        faulty = faulty or kind == "bad" or (kind != "digest" and mode != "ok")
        earlier = rng.randint(1, position - 1) if position > 1 else 0
        if kind == "fetch":
            arguments: dict[str, Any] = {"key": f"k{rng.randint(0, 999)}", "mode": mode}
            arguments["delay_ms"] = delay_ms
            call = {"callId": call_id, "toolName": "fetch", "arguments": arguments}
        elif kind == "combine":
            arguments = {"text": f"got {{step_{earlier}_result}}", "mode": mode}
            arguments["delay_ms"] = delay_ms
            call = {"callId": call_id, "toolName": "combine", "arguments": arguments}
        elif kind == "digest":
            # A field of a fetched record (a whole-value placeholder), else embedded text.
            fetched = calls[earlier - 1]["toolName"] == "fetch"
            text = (
                f"{{step_{earlier}_result.value}}" if fetched else f"of {{step_{earlier}_result}}"
            )
            call = {"callId": call_id, "toolName": "digest", "arguments": {"text": text}}
            call["dependsOn"] = [f"call_{earlier}"]
        else:  # invalid arguments: the call is an error result, its plan is still valid
            call = {"callId": call_id, "toolName": "fetch", "arguments": {"key": 7}}
        calls.append(call)
    return calls, faulty


def draw_scripts(runs: int, threads: int, seed: int) -> list[RunScript]:
    rng = random.Random(seed)
    scripts: list[RunScript] = []
    for index in range(runs):
        thread_id = f"t{rng.randrange(threads)}"
        calls, faulty = _draw_calls(rng)
        script = RunScript(
            index=index,
            thread_id=thread_id,
            trace_id=f"soak{seed}r{index:07d}",
            calls=calls,
            fate="",
            latency_s=rng.choice([0.0, 0.0, 0.001, 0.003]),
        )
        roll = rng.random()
        if roll < 0.10:
            script.fate = "provider error"
            phase = rng.choice(["planning", "planning", "synthesis"])
            script.faults[phase] = rng.choice(["before", "midstream"])
        elif roll < 0.15:
            script.fate = "bad plan"
            script.bad_plan = rng.choice([1, 2])
        elif roll < 0.27:
            script.fate = "client cancel"
            script.cancel_after_s = rng.uniform(0.0, 0.15)
        else:
            script.fate = "tool faults" if faulty else "clean"
        scripts.append(script)
    return scripts


class ChaosModel:
    """A provider answering from each run's script, failing where the script says.

    The answers come from a `ScriptedProvider` (a function of the request); this wrapper adds
    the per-run latency and provider errors before the first token or in mid-stream.
    """

    name = "chaos"
    model = "scripted-chaos"

    def __init__(self, scripts: dict[str, RunScript]) -> None:
        self._scripts = scripts
        # keep_requests=0: the soak reads no request back, and 10,000 runs would pile them up.
        self._inner = ScriptedProvider([self._respond], repeat=True, chunk_size=24, keep_requests=0)
        # The run markers in each run's planning prompt: the history it loaded.
        self.histories: dict[str, set[str]] = {}

    def _respond(self, request: LLMRequest) -> str:
        script = self._scripts[request.trace_id]
        plan = json.dumps({"intent": "soak", "plan": "1. use tools", "toolCalls": script.calls})
        if request.phase == "planning":
            return "I think the plan is: (no JSON today" if script.bad_plan else plan
        if request.phase == "repair":
            return plan if script.bad_plan == 1 else "still no plan [["
        return f"Done: {script.marker}."

    async def stream(self, request: LLMRequest) -> AsyncIterator[ProviderEvent]:
        script = self._scripts[request.trace_id]
        fault = script.faults.get(request.phase)
        if request.phase == "planning":
            history = request.messages[1:-1]  # between the system prompt and the query
            found = (MARKER.search(message.content) for message in history)
            self.histories[request.trace_id] = {match[0] for match in found if match}
        if script.latency_s:
            await asyncio.sleep(script.latency_s)
        if fault == "before":
            raise ProviderError("injected: 503 service unavailable", provider=self.name)
        tokens = 0
        events = cast(AsyncGenerator[ProviderEvent, None], self._inner.stream(request))
        async with contextlib.aclosing(events):
            async for event in events:
                if isinstance(event, TokenDelta):
                    tokens += 1
                    if fault == "midstream" and tokens == 2:
                        raise ProviderError("injected: stream dropped", provider=self.name)
                yield event

    async def aclose(self) -> None:
        await self._inner.aclose()


# --- measuring -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Resources:
    peak_rss_mib: float
    rss_mib: float
    fds: int
    tasks: int

    @staticmethod
    def now() -> Resources:
        peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
        with open("/proc/self/statm") as statm:
            resident_pages = int(statm.read().split()[1])
        rss_mib = resident_pages * os.sysconf("SC_PAGE_SIZE") / 2**20
        return Resources(
            # The kernel updates the high-water mark lazily: it can trail the current size.
            peak_rss_mib=max(peak_kib / 1024, rss_mib),
            rss_mib=rss_mib,
            fds=len(os.listdir("/proc/self/fd")),
            tasks=len(asyncio.all_tasks()),
        )


async def settle(start: Resources, seconds: float = 2.0) -> Resources:
    """Give closing connections and finishing tasks a moment, then measure."""
    deadline = time.monotonic() + seconds
    while True:
        gc.collect()
        await asyncio.sleep(0.1)
        now = Resources.now()
        if (now.fds, now.tasks) == (start.fds, start.tasks) or time.monotonic() > deadline:
            return now


class LogTally(logging.Handler):
    """Counts the library's error logs (by logger) instead of printing them.

    Warnings are expected here (every injected fault logs one) and are left below the level:
    rendering thousands of their tracebacks would cost more than the runs themselves.
    """

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.counts: Counter[tuple[str, str]] = Counter()
        self.examples: dict[tuple[str, str], str] = {}

    def emit(self, record: logging.LogRecord) -> None:
        key = (record.levelname, record.name)
        self.counts[key] += 1
        self.examples.setdefault(key, " ".join(record.getMessage().split())[:150])

    @classmethod
    def install(cls) -> LogTally:
        tally = cls()
        logger = logging.getLogger("pes_agent")
        logger.setLevel(logging.ERROR)
        logger.addHandler(tally)
        logger.propagate = False
        return tally


# --- checking --------------------------------------------------------------------------------


@dataclass(slots=True)
class Verdict:
    lost: set[str] = field(default_factory=set)
    interleaved: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    turns: int = 0

    def flag(self, kind: Literal["lost", "interleaved"], trace_id: str, why: str) -> None:
        (self.lost if kind == "lost" else self.interleaved).add(trace_id)
        self.problems.append(f"{kind}: {trace_id}: {why}")


def _marker_of(message: ConversationMessage) -> str | None:
    found = MARKER.search(message.content)
    return found[0] if found else None


def _out_of_order(stored: Sequence[str], committed: Sequence[str]) -> list[str]:
    """The turns of `stored` outside one longest run that keeps the committed order."""
    rank = {trace_id: position for position, trace_id in enumerate(committed)}
    tails: list[int] = []  # tails[k]: index in `stored` ending an in-order run of length k+1
    before: list[int | None] = []
    for index, trace_id in enumerate(stored):
        length = bisect.bisect_left([rank[stored[t]] for t in tails], rank[trace_id])
        before.append(tails[length - 1] if length else None)
        tails[length : length + 1] = [index]
    keep: set[int] = set()
    cursor = tails[-1] if tails else None
    while cursor is not None:
        keep.add(cursor)
        cursor = before[cursor]
    return [trace_id for index, trace_id in enumerate(stored) if index not in keep]


def check_thread(
    thread_id: str,
    messages: Sequence[ConversationMessage],
    scripts: dict[str, RunScript],
    outcomes: dict[str, str],
    committed: Sequence[str],
    verdict: Verdict,
) -> None:
    positions: dict[str, list[tuple[int, ConversationMessage]]] = defaultdict(list)
    for position, message in enumerate(messages):
        trace_id = str((message.metadata or {}).get("trace_id"))
        positions[trace_id].append((position, message))
    complete: list[tuple[int, str]] = []
    for trace_id, found in positions.items():
        script = scripts.get(trace_id)
        if script is None or script.thread_id != thread_id:
            verdict.flag("interleaved", trace_id, f"a message of no run of {thread_id}")
            continue
        roles = [message.role.value for _, message in found]
        if roles.count("USER") > 1 or roles.count("AI") > 1:
            verdict.flag("interleaved", trace_id, f"stored more than once: {roles}")
            continue
        if len(found) == 1:
            verdict.flag("lost", trace_id, f"half a turn: only its {roles[0]} message")
            continue
        (first, user), (second, answer) = found
        if roles != ["USER", "AI"] or second != first + 1:
            verdict.flag("interleaved", trace_id, f"turn split: {roles} at {first}, {second}")
            continue
        if _marker_of(user) != script.marker or _marker_of(answer) != script.marker:
            verdict.flag("interleaved", trace_id, "the turn carries another run's marker")
            continue
        complete.append((first, trace_id))
    stored = [trace_id for _, trace_id in sorted(complete)]
    verdict.turns += len(stored)
    saved = set(stored)
    for script in scripts.values():
        if script.thread_id != thread_id or script.trace_id in positions:
            continue
        outcome = outcomes.get(script.trace_id)
        if outcome in ("success", "partial"):
            verdict.flag("lost", script.trace_id, f"ended {outcome} but its turn is not stored")
        elif script.trace_id in committed:
            verdict.flag("lost", script.trace_id, f"FINAL_RESPONSE seen ({outcome}), no turn")
    seen = set(committed)
    order = [trace_id for trace_id in stored if trace_id in seen]
    expected = [trace_id for trace_id in committed if trace_id in saved]
    if order != expected:
        for trace_id in _out_of_order(order, expected):
            verdict.flag("interleaved", trace_id, "stored out of the order runs committed in")


# --- the soak --------------------------------------------------------------------------------


async def soak(args: argparse.Namespace, logs: LogTally) -> int:
    start = Resources.now()
    scripts = draw_scripts(args.runs, args.threads, args.seed)
    by_trace = {script.trace_id: script for script in scripts}
    with contextlib.ExitStack() as cleanup:
        if args.storage == "sqlite":
            scratch = cleanup.enter_context(tempfile.TemporaryDirectory(prefix="pes-soak-"))
            spec = f"sqlite:///{os.path.join(scratch, 'soak.db')}"
            schema = None
        else:
            schema = f"pes_soak_{uuid.uuid4().hex[:12]}"
            spec = f"{POSTGRES_URL}{'&' if '?' in POSTGRES_URL else '?'}schema={schema}"
        try:
            return await _soak(args, spec, scripts, by_trace, start, logs)
        finally:
            if schema is not None:
                await _drop_schema(schema)


async def _soak(
    args: argparse.Namespace,
    spec: str,
    scripts: list[RunScript],
    by_trace: dict[str, RunScript],
    start: Resources,
    logs: LogTally,
) -> int:
    model = ChaosModel(by_trace)
    agent = create_agent(
        provider=model,
        tools=[fetch, combine, digest],
        storage=spec,
        tool_timeout_s=TOOL_TIMEOUT_S,
        max_concurrency=4,
    )
    committed: dict[str, list[str]] = defaultdict(list)
    overlaps: list[tuple[str, str]] = []

    def on_final(observation: Observation) -> None:
        """Note the commit order; and a run that saw the turn committed just before its own.

        Every FINAL_RESPONSE is recorded while its run holds the thread, just after its turn
        was saved. If runs on a thread take turns, the run that committed last had finished
        before this one started, so its turn is in this run's history (well within the limit).
        """
        on_thread = committed[observation.thread_id]
        history = model.histories.pop(observation.trace_id, None)
        if on_thread and history is not None and by_trace[on_thread[-1]].marker not in history:
            overlaps.append((observation.trace_id, on_thread[-1]))
        on_thread.append(observation.trace_id)

    agent.observations.subscribe(on_final, types=[ObservationType.FINAL_RESPONSE])
    errors: Counter[str] = Counter()

    def on_tool(observation: Observation) -> None:
        """Tool errors where none was injected (such as a timeout under load) are counted."""
        content = observation.content
        if content.get("status") == "error" and by_trace[observation.trace_id].fate == "clean":
            errors[f"uninjected tool error: {_shape(str(content.get('error')))}"] += 1

    agent.observations.subscribe(on_tool, types=[ObservationType.TOOL_EXECUTION])
    outcomes: dict[str, str] = {}
    raised: list[str] = []
    in_flight = asyncio.Semaphore(2 * args.threads)
    step = max(1, len(scripts) // 10)
    done = 0
    began = time.perf_counter()

    async def one(script: RunScript) -> None:
        nonlocal done
        try:
            props = AgentProps(script.query, script.thread_id, trace_id=script.trace_id)
            run = asyncio.create_task(agent.process(props))
            if script.cancel_after_s is not None:
                await asyncio.wait({run}, timeout=script.cancel_after_s)
                run.cancel()  # a no-op if it already finished
            try:
                result = await run
            except asyncio.CancelledError:
                if not run.cancelled():
                    raise
                outcomes[script.trace_id] = "cancelled"
            except Exception as error:
                outcomes[script.trace_id] = "raised"
                raised.append(f"{script.trace_id}: {type(error).__name__}: {error}")
            else:
                outcomes[script.trace_id] = result.metadata.status
                if result.metadata.error is not None:
                    errors[_shape(result.metadata.error)] += 1
        finally:
            model.histories.pop(script.trace_id, None)
            in_flight.release()
            done += 1
            if done % step == 0 or done == len(scripts):
                elapsed = time.perf_counter() - began
                print(
                    f"soak: {done}/{len(scripts)} runs, {done / elapsed:.0f} runs/s, "
                    f"{elapsed:.1f}s, rss {Resources.now().rss_mib:.0f} MiB",
                    file=sys.stderr,
                    flush=True,
                )

    running: set[asyncio.Task[None]] = set()
    for script in scripts:
        await in_flight.acquire()
        task = asyncio.create_task(one(script))
        running.add(task)
        task.add_done_callback(running.discard)
    await asyncio.gather(*running)
    elapsed = time.perf_counter() - began
    await agent.aclose()

    # Read every thread back through a storage object of its own, as another process would.
    verdict = Verdict()
    reader = open_storage(spec)
    try:
        threads = sorted({script.thread_id for script in scripts})
        for thread_id in threads:
            messages = await reader.get_messages(thread_id)
            check_thread(thread_id, messages, by_trace, outcomes, committed[thread_id], verdict)
    finally:
        await reader.aclose()
    for trace_id, previous in overlaps:
        verdict.flag("interleaved", trace_id, f"ran alongside {previous}: not in its history")
    end = await settle(start)

    _report(scripts, outcomes, verdict, raised, errors, start, end, logs)
    clean = [s.trace_id for s in scripts if s.fate == "clean"]
    clean_ok = sum(outcomes[trace_id] == "success" for trace_id in clean)
    exercised = clean_ok * 2 >= len(clean)
    if not exercised:  # a soak in which (nearly) everything fails proves nothing
        print(f"soak: only {clean_ok} of {len(clean)} runs without injected faults succeeded")
    lost, interleaved = len(verdict.lost), len(verdict.interleaved)
    print(
        f"soak: {len(scripts)} runs, {args.threads} threads, {args.storage}: lost {lost}, "
        f"interleaved {interleaved}, runs/s {len(scripts) / elapsed:.0f}, "
        f"rss {start.peak_rss_mib:.0f}->{end.peak_rss_mib:.0f} MiB, "
        f"fds {start.fds}->{end.fds}, tasks {start.tasks}->{end.tasks}"
    )
    leaked = (end.fds, end.tasks) != (start.fds, start.tasks)
    failed = lost or interleaved or raised or leaked or not exercised
    return 1 if failed else 0


def _report(
    scripts: Sequence[RunScript],
    outcomes: dict[str, str],
    verdict: Verdict,
    raised: Sequence[str],
    errors: Counter[str],
    start: Resources,
    end: Resources,
    logs: LogTally,
) -> None:
    table: dict[str, Counter[str]] = defaultdict(Counter)
    for script in scripts:
        table[script.fate][outcomes.get(script.trace_id, "unfinished")] += 1
    fates = ["clean", "tool faults", "provider error", "bad plan", "client cancel"]
    rows: list[list[object]] = [
        [fate, *(table[fate][o] for o in OUTCOMES), sum(table[fate].values())] for fate in fates
    ]
    total = Counter(outcomes.values())
    rows.append(["all", *(total[o] for o in OUTCOMES), len(scripts)])
    print_table("Outcomes by what was injected", ["injected", *OUTCOMES, "runs"], rows)
    print(
        f"turns stored {verdict.turns}; rss now {start.rss_mib:.0f}->{end.rss_mib:.0f} MiB, "
        f"peak {end.peak_rss_mib:.0f} MiB"
    )
    for message, count in errors.most_common(8):
        print(f"errors: {count} x {message}")
    for (level, name), count in logs.counts.most_common():
        print(f"library log: {count} {level} from {name}, e.g. {logs.examples[(level, name)]}")
    for line in [*raised[:10], *verdict.problems[:20]]:
        print(f"  {line}")
    hidden = len(raised[10:]) + len(verdict.problems[20:])
    if hidden:
        print(f"  ... and {hidden} more")


def _shape(message: str) -> str:
    """An error message with its numbers masked, so alike ones count together."""
    return re.sub(r"\d+(\.\d+)?", "N", " ".join(message.split()))[:140]


async def _drop_schema(schema: str) -> None:
    import asyncpg  # type: ignore[import-untyped]  # installed with pes-agent[postgres]

    connection = await asyncpg.connect(POSTGRES_URL, timeout=5)
    try:
        await connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await connection.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=50)
    parser.add_argument("--storage", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.runs < 1 or args.threads < 1:
        parser.error("--runs and --threads must be >= 1")
    sys.exit(asyncio.run(soak(args, LogTally.install())))


if __name__ == "__main__":
    main()
