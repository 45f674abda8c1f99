"""Live token streams: what a UI subscribes to for text as the model writes it."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Literal, get_args

from pes_agent.observing._fanout import Fanout
from pes_agent.observing._filters import name_set
from pes_agent.providers.base import LLMPhase

__all__ = ["StreamEvent", "StreamEventKind", "StreamSocket"]

StreamEventKind = Literal["token", "thinking", "restart", "end", "error"]


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One piece of a model stream: a token of answer or thinking text, a restart, or the end."""

    thread_id: str
    trace_id: str
    phase: LLMPhase
    kind: StreamEventKind
    text: str = ""


StreamCallback = Callable[[StreamEvent], Awaitable[None] | None]


class StreamSocket:
    """Fan-out of stream events to subscribers filtered by thread and phase.

    `origin` names this socket among processes: the events its agent's runs publish to the
    store's stream feed carry it, so the agent can leave its own out when it forwards the
    feed (`pes_agent.observing.relay`).
    """

    def __init__(self) -> None:
        self._subscribers: Fanout[StreamEvent] = Fanout("llm_stream")
        self._watchers: list[Callable[[bool], None]] = []
        self.origin = uuid.uuid4().hex

    def watch(self, watcher: Callable[[bool], None]) -> None:
        """Call `watcher(True)` when the first subscriber comes and `watcher(False)` when
        the last one leaves (the socket forwards another process's events only meanwhile).

        Args:
            watcher: Called with whether the socket now has subscribers.
        """
        self._watchers.append(watcher)

    @property
    def active(self) -> bool:
        """Whether anyone listens; callers skip building events when nobody does."""
        return bool(self._subscribers)

    def subscribe(
        self,
        callback: StreamCallback,
        *,
        thread_id: str | None = None,
        phases: LLMPhase | Iterable[LLMPhase] | None = None,
    ) -> Callable[[], None]:
        """Call `callback` for each stream event (tokens as they come) of `phases` on `thread_id`.

        Args:
            callback: Called with each `StreamEvent`; sync or async.
            thread_id: Only this thread's events; None for every thread.
            phases: One phase name (``"synthesis"``) or an iterable of them, in any case; None
                for every phase.

        Returns:
            A function that unsubscribes; calling it twice is harmless.

        Raises:
            UsageError: `phases` has an unknown name or is empty (the message lists the
                phases).
        """
        wanted = name_set(
            phases,
            get_args(LLMPhase),
            what="phase",
            parameter="phases",
            normalize=str.lower,
            allow_empty=False,
        )

        def wants(event: StreamEvent) -> bool:
            if thread_id is not None and event.thread_id != thread_id:
                return False
            return wanted is None or event.phase in wanted

        first = not self._subscribers
        unsubscribe = self._subscribers.add(callback, wants)
        if first:
            for watcher in self._watchers:
                watcher(True)
        if not self._watchers:
            return unsubscribe

        def unsubscribe_and_tell() -> None:
            was = bool(self._subscribers)
            unsubscribe()
            if was and not self._subscribers:
                for watcher in self._watchers:
                    watcher(False)

        return unsubscribe_and_tell

    async def publish(self, event: StreamEvent) -> None:
        """Deliver `event` to the subscribers whose filters match it.

        Args:
            event: The event; a subscriber that raises is logged and skipped.
        """
        await self._subscribers.deliver(event)
