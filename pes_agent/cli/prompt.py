"""`pes-agent run` asks the person at the terminal about each call that needs approval.

`TerminalApprover` is the run's `approval_handler`: for each gated call it takes the live view
off the screen, shows the tool and its arguments, reads `y` or `n` from stdin and puts the view
back. Questions never overlap (calls that run side by side are asked about one at a time), and
the event loop keeps running while the person thinks, so independent calls go on meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass, field

from rich.console import Console
from rich.text import Text

from pes_agent.cli.live import RunView
from pes_agent.run import PendingApproval

__all__ = ["TerminalApprover", "read_line"]

_YES = frozenset({"y", "yes"})
_NO = frozenset({"n", "no"})


async def read_line() -> str | None:
    """One line from stdin without blocking the event loop; None at end of input.

    On Unix the loop watches the file descriptor, so a Ctrl-C (which cancels the run) leaves
    no thread stuck in a read; elsewhere the read runs in a worker thread.
    """
    if os.name != "posix":
        line = await asyncio.to_thread(sys.stdin.readline)
        return line or None
    loop = asyncio.get_running_loop()
    fd = sys.stdin.fileno()
    chunks: list[bytes] = []
    while True:
        ready: asyncio.Future[None] = loop.create_future()
        loop.add_reader(fd, _settle, ready)
        try:
            await ready
        finally:
            loop.remove_reader(fd)
        data = os.read(fd, 4096)
        if not data:
            return b"".join(chunks).decode(errors="replace") or None
        chunks.append(data)
        if data.endswith(b"\n"):
            return b"".join(chunks).decode(errors="replace")


def _settle(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)


@dataclass(slots=True)
class TerminalApprover:
    """An `approval_handler` that asks at the terminal: y runs the call, n (or end of input)
    denies it. `view` is the live view to take off the screen while asking."""

    console: Console
    view: RunView | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def __call__(self, pending: PendingApproval) -> bool:
        """Ask about `pending`; True to run it."""
        async with self._lock:
            if self.view is None:
                return await self._ask(pending)
            with self.view.suspend():
                return await self._ask(pending)

    async def _ask(self, pending: PendingApproval) -> bool:
        console = self.console
        head = Text("⏸ approval needed", style="bold magenta")
        head.append(f" · {pending.call_id} ", style="cyan")
        head.append(pending.tool_name, style="bold")
        head.append(f" (step {pending.step})", style="dim")
        console.print(head, highlight=False)
        arguments = json.dumps(pending.arguments, indent=2, ensure_ascii=False, default=str)
        for line in arguments.splitlines():
            console.print(Text(f"  {line}"), highlight=False, soft_wrap=True)
        while True:
            console.print(
                Text.assemble("run ", (pending.tool_name, "bold"), " with these arguments? [y/n] "),
                end="",
                highlight=False,
            )
            answer = await read_line()
            if answer is None:
                console.print()
                self._said(pending, False, "no answer (end of input)")
                return False
            word = answer.strip().lower()
            if word in _YES or word in _NO:
                approved = word in _YES
                self._said(pending, approved, None)
                return approved
            console.print(Text("please answer y or n", style="yellow"), highlight=False)

    def _said(self, pending: PendingApproval, approved: bool, why: str | None) -> None:
        mark = Text("✓ approved" if approved else "✗ denied", style="green" if approved else "red")
        mark.append(f" {pending.call_id} {pending.tool_name}")
        if why:
            mark.append(f": {why}", style="dim")
        self.console.print(mark, highlight=False)
