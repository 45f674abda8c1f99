"""Runs the server started: each in its own task, with a bounded replay buffer of its events.

A run is not tied to the request that started it: a client that disconnects leaves it running
(unless it asked otherwise), and another request can attach to its events by trace id, with
`Last-Event-ID` to resume after the last event it saw. Each run keeps its newest
`replay_limit` events; a client resuming from an event older than that gets the stream from
the oldest event kept, after a `gap` event saying how many it missed. Once the run ends its
tokens are merged, a series of them into one event under the id of its last (`merge_text`):
the replay reads the same, and a client resuming inside a series gets the text it missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from array import array
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from dataclasses import dataclass, field, replace
from itertools import accumulate
from typing import Any

from pydantic import BaseModel

from pes_agent.observing.streams import StreamEvent, StreamSocket
from pes_agent.observing.types import Observation
from pes_agent.protocols import ObservationRecorder
from pes_agent.run import AgentFinalResponse
from pes_agent.storage._depth import dump_bounded

__all__ = [
    "MergedText",
    "RunEvent",
    "RunFeeds",
    "RunHandle",
    "RunRegistry",
    "bounded_json",
    "event_for_observation",
    "event_for_stream",
    "merge_text",
    "stream_event_data",
    "stream_event_name",
    "yield_to_loop",
]


@dataclass(frozen=True, slots=True)
class MergedText:
    """Consecutive token (or thinking) events of one phase, kept as one once their run ended:
    `event` holds the text of them all, `ends[i]` where the text of the i-th of them ends."""

    event: StreamEvent
    ends: array[int]


@dataclass(frozen=True, slots=True)
class RunEvent:
    """One server-sent event: its `id` (increasing within a stream), `event` name and data.

    An event keeps what it was made from (an observation, a model stream event, the final
    response) and turns it into JSON only when a client reads it: most runs are answered as
    JSON, and nobody reads their events. An event of `MergedText` stands for the events
    `first_id` to `id`, and is sent under the last one's id.
    """

    id: int
    event: str
    source: dict[str, Any] | BaseModel | StreamEvent | MergedText

    @property
    def first_id(self) -> int:
        """The id of the first event this one stands for (its own `id` unless merged)."""
        if isinstance(self.source, MergedText):
            return self.id - len(self.source.ends) + 1
        return self.id

    def rest_after(self, seen: int) -> RunEvent:
        """This event for a client that got the events up to `seen`: a merged one without the
        text of the events it already got."""
        source = self.source
        if not isinstance(source, MergedText) or seen < self.first_id:
            return self
        text = source.event.text[source.ends[seen - self.first_id] :]
        return RunEvent(self.id, self.event, replace(source.event, text=text))

    @property
    def data(self) -> dict[str, Any]:
        """The event's data as JSON-ready values."""
        source = self.source
        if isinstance(source, BaseModel):
            return json.loads(bounded_json(source))  # type: ignore[no-any-return]
        if isinstance(source, StreamEvent):
            return stream_event_data(source)
        if isinstance(source, MergedText):
            return stream_event_data(source.event)
        return source

    @property
    def observation_id(self) -> str | None:
        """The id of the observation this event carries, if it carries one."""
        return self.source.id if isinstance(self.source, Observation) else None

    def json(self) -> str:
        """The event's data as JSON text."""
        if isinstance(self.source, BaseModel):
            return bounded_json(self.source)
        return json.dumps(self.data)


def bounded_json(model: BaseModel) -> str:
    """`model` as JSON the way the store writes it (`dump_bounded`): parts nested deeper than
    it keeps are their JSON text, values JSON cannot hold their `repr`. A tool output nested
    about 250 levels failed pydantic's writer in the middle of a live stream, and a reader
    would have seen other data live than stored."""
    return dump_bounded(model, fallback=repr)[0]


def event_for_observation(observation: Observation) -> tuple[str, dict[str, Any]]:
    """The SSE name (the observation type, e.g. `PLAN`) and data of an observation, bounded
    as the store keeps it (`bounded_json`)."""
    data: dict[str, Any] = json.loads(bounded_json(observation))
    return observation.type.value, data


def stream_event_name(event: StreamEvent) -> str:
    """The SSE name of a model stream event: `token` for answer text, `thinking` for thinking
    text, `stream` for a restart, end or error of a model stream (its `kind` says which)."""
    return event.kind if event.kind in ("token", "thinking") else "stream"


def stream_event_data(event: StreamEvent) -> dict[str, Any]:
    """The SSE data of a model stream event."""
    return {
        "thread_id": event.thread_id,
        "trace_id": event.trace_id,
        "phase": event.phase,
        "kind": event.kind,
        "text": event.text,
    }


def event_for_stream(event: StreamEvent) -> tuple[str, dict[str, Any]]:
    """The SSE name and data of a model stream event (`stream_event_name`)."""
    return stream_event_name(event), stream_event_data(event)


def merge_text(events: Iterable[RunEvent]) -> list[RunEvent]:
    """`events` with each series of consecutive `token` (or `thinking`) events of one phase
    made one `MergedText` event, under the id of the series' last."""
    merged: list[RunEvent] = []
    series: list[RunEvent] = []

    def close_series() -> None:
        if len(series) > 1:
            texts = [event.source.text for event in series if isinstance(event.source, StreamEvent)]
            first = series[0].source
            assert isinstance(first, StreamEvent)
            whole = replace(first, text="".join(texts))
            ends = array("I", accumulate(len(text) for text in texts))
            merged.append(RunEvent(series[-1].id, series[-1].event, MergedText(whole, ends)))
        else:
            merged.extend(series)
        series.clear()

    for event in events:
        source = event.source
        if isinstance(source, StreamEvent) and event.event in ("token", "thinking"):
            last = series[-1] if series else None
            if last is not None and (
                last.event != event.event
                or not isinstance(last.source, StreamEvent)
                or last.source.phase != source.phase
            ):
                close_series()
            series.append(event)
        else:
            close_series()
            merged.append(event)
    close_series()
    return merged


async def yield_to_loop() -> None:
    """Let the event loop run once, between two events of a replay.

    A replay sends what is buffered without waiting, and a server's `send` returns at once
    for a client gone: without this the server noticed a client hanging up only after writing
    it the whole replay, and cancelling the response had no point to stop it at."""
    await asyncio.sleep(0)


@dataclass(eq=False)
class RunHandle:
    """A run executing (or lately finished) in this process, and its buffered events."""

    thread_id: str
    trace_id: str
    user_id: str | None
    replay_limit: int
    #: What the run was asked (kept for the run list while no turn of it is saved).
    query: str | None = None
    task: asyncio.Task[None] | None = None
    #: How the run ended: its final response, or (HTTP status, error type, message).
    response: AgentFinalResponse | None = None
    failure: tuple[int, str, str] | None = None
    events: deque[RunEvent] = field(init=False)
    next_id: int = 1
    done: bool = False
    finished_at: float | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.events = deque(maxlen=self.replay_limit)

    def add(self, event: str, data: dict[str, Any] | BaseModel | StreamEvent) -> None:
        """Append an event to the buffer and wake the readers."""
        if self.done:
            return
        self.events.append(RunEvent(self.next_id, event, data))
        self.next_id += 1
        self._changed.set()

    def finish(self, event: str, data: dict[str, Any] | BaseModel) -> None:
        """Append the last event (`final` or `error`); nothing is added after it. The run's
        tokens are merged (`merge_text`): a finished run is kept for minutes, and one event a
        token made it about 0.5 MB."""
        self.add(event, data)
        self.events = deque(merge_text(self.events), maxlen=self.replay_limit)
        self.done = True
        self.finished_at = time.monotonic()
        self._changed.set()

    def fail(self, status: int, kind: str, message: str) -> None:
        """End the run with an `error` event (the run could not be started or crashed)."""
        self.failure = (status, kind, message)
        self.finish("error", {"type": kind, "message": message})

    async def follow(self, after: int = 0, *, heartbeat_s: float = 15.0) -> AsyncIterator[RunEvent]:
        """The events with an id above `after`, then each new one, until the run's last;
        a `ping` event (id 0) after each `heartbeat_s` without one."""
        while True:
            self._changed.clear()
            oldest = self.events[0].first_id if self.events else self.next_id
            if after + 1 < oldest:
                yield RunEvent(0, "gap", {"missed": oldest - after - 1, "resumed_at": oldest})
                after = oldest - 1
            pending = [event for event in self.events if event.id > after]
            for event in pending:
                # Merged meanwhile (the run ended), an event may hold text this client has.
                yield event.rest_after(after)
                after = event.id
                await yield_to_loop()
            if self.done and not any(event.id > after for event in self.events):
                return
            if not pending:
                try:
                    await asyncio.wait_for(self._changed.wait(), heartbeat_s)
                except TimeoutError:
                    yield RunEvent(0, "ping", {})


class RunFeeds:
    """Feeds the runs executing in this process their observations and model stream events.

    One subscription of each kind on the agent serves every run, found by trace id, while any
    run executes: one subscription per run would have each event checked against the filter
    of every run going on.
    """

    def __init__(self, observations: ObservationRecorder, stream: StreamSocket) -> None:
        self._observations = observations
        self._stream = stream
        self._handles: dict[str, RunHandle] = {}
        self._streams_only: set[str] = set()
        self._unsubscribe: tuple[Callable[[], None], Callable[[], None]] | None = None

    def attach(self, handle: RunHandle, *, observations: bool = True) -> None:
        """Add the events of run `handle.trace_id` to its handle from now on; with
        `observations=False` only its model stream events (a run on a durable engine, whose
        observations come from the store)."""
        self._handles[handle.trace_id] = handle
        if observations:
            self._streams_only.discard(handle.trace_id)
        else:
            self._streams_only.add(handle.trace_id)
        if self._unsubscribe is None:
            self._unsubscribe = (
                self._observations.subscribe(self._on_observation),
                self._stream.subscribe(self._on_stream),
            )

    def detach(self, handle: RunHandle) -> None:
        """Stop feeding `handle`; with no run left, unsubscribe from the agent."""
        if self._handles.get(handle.trace_id) is handle:
            del self._handles[handle.trace_id]
            self._streams_only.discard(handle.trace_id)
        if not self._handles and self._unsubscribe is not None:
            for unsubscribe in self._unsubscribe:
                unsubscribe()
            self._unsubscribe = None

    def _on_observation(self, observation: Observation) -> None:
        trace_id = observation.trace_id
        handle = self._handles.get(trace_id)
        if (
            handle is not None
            and handle.thread_id == observation.thread_id
            and trace_id not in self._streams_only
        ):
            # Turned into JSON only if a client reads the run's events.
            handle.add(observation.type.value, observation)

    def _on_stream(self, event: StreamEvent) -> None:
        handle = self._handles.get(event.trace_id)
        if handle is not None and handle.thread_id == event.thread_id:
            handle.add(stream_event_name(event), event)


class RunRegistry:
    """The runs this process executes or lately finished, by trace id.

    Finished runs stay `retention_s` seconds (at most `max_finished` of them) so that a client
    can still read or resume their events.
    """

    def __init__(
        self, *, replay_limit: int = 2048, retention_s: float = 300.0, max_finished: int = 1000
    ) -> None:
        self.replay_limit = replay_limit
        self._retention_s = retention_s
        self._max_finished = max_finished
        self._runs: dict[str, RunHandle] = {}
        # Finished runs in the order they finished, so pruning looks at the oldest only:
        # scanning every kept run on each request cost more than the rest of the request.
        self._finished: OrderedDict[str, RunHandle] = OrderedDict()
        self._tasks: set[asyncio.Task[Any]] = set()

    def get(self, trace_id: str) -> RunHandle | None:
        """The run with this trace id, if this process runs it or finished it lately."""
        self._prune()
        return self._runs.get(trace_id)

    def kept(self) -> list[RunHandle]:
        """The runs executing, and those finished lately."""
        self._prune()
        return list(self._runs.values())

    def running(self) -> list[RunHandle]:
        """The runs still executing."""
        return [run for run in self._runs.values() if not run.done]

    def forget_thread(self, thread_id: str) -> None:
        """Forget the finished runs of a deleted thread: their trace ids may name new runs."""
        for trace_id, run in list(self._finished.items()):
            if run.thread_id == thread_id:
                del self._finished[trace_id]
                del self._runs[trace_id]

    def start(
        self,
        handle: RunHandle,
        work: Callable[[RunHandle], Coroutine[Any, Any, None]],
    ) -> RunHandle:
        """Run `work(handle)` in a task of its own, registered under the handle's trace id."""
        self._prune()
        # A resumed run takes over the trace id of the paused run it continues.
        self._finished.pop(handle.trace_id, None)
        self._runs[handle.trace_id] = handle
        task = asyncio.create_task(work(handle), name=f"pes-agent run {handle.trace_id}")
        handle.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda _: self._ended(handle))
        return handle

    def _ended(self, handle: RunHandle) -> None:
        if handle.done and self._runs.get(handle.trace_id) is handle:
            self._finished[handle.trace_id] = handle

    async def aclose(self) -> None:
        """Cancel the runs still executing and wait for them to end."""
        tasks = [task for task in self._tasks if not task.done()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task

    def _prune(self) -> None:
        now = time.monotonic()
        while self._finished:
            trace_id, run = next(iter(self._finished.items()))
            assert run.finished_at is not None
            if (
                len(self._finished) <= self._max_finished
                and now - run.finished_at <= self._retention_s
            ):
                return
            del self._finished[trace_id]
            del self._runs[trace_id]
