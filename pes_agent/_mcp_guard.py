"""Runs an MCP stdio server so that it never outlives the agent that started it.

`pes_agent.mcp` launches `python _mcp_guard.py PARENT_PID LEASE_FILE -- command args...`
instead of the server's command; the MCP SDK starts it in a new process group, and the guard
starts the server in that same group, on the same stdin/stdout (the guard never reads them).
The server is stopped (SIGTERM to the group, SIGKILL after a grace period) as soon as either

- the parent is gone: `PR_SET_PDEATHSIG` wakes the guard at once on Linux, and a poll of
  `os.getppid()` catches it anywhere (the agent was SIGKILLed, crashed, or exited), or
- the lease file is gone: the agent deletes it when it drops the connection, even when its own
  orderly shutdown was cut short (a native cancellation, an event loop torn down).

On Linux the server also gets `PR_SET_PDEATHSIG(SIGKILL)`, so killing the guard alone kills it.
The guard exits with the server's exit code. Only the standard library is used, and the file is
run by path, so starting it does not import pes_agent.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from types import FrameType

__all__ = ["main"]

_POLL_S = 0.2
_GRACE_S = 2.0
_PR_SET_PDEATHSIG = 1


def _pdeathsig(sig: int) -> Callable[[], None]:
    """A preexec function asking Linux to send `sig` when the parent dies (no-op elsewhere)."""

    def apply() -> None:
        if not sys.platform.startswith("linux"):
            return
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)

    return apply


def _stay(_signum: int, _frame: FrameType | None) -> None:
    """Survive the signal: the loop notices what it means within one poll."""


class _Guard:
    def __init__(self, parent: int, lease: str) -> None:
        self.parent = parent
        self.lease = lease

    def should_stop(self) -> bool:
        return os.getppid() != self.parent or not os.path.exists(self.lease)

    def stop(self, child: subprocess.Popen[bytes] | None) -> None:
        """SIGTERM the whole group, give it `_GRACE_S`, then SIGKILL it (the guard included)."""
        with contextlib.suppress(FileNotFoundError):
            if os.getppid() != self.parent:
                os.unlink(self.lease)  # nobody else is left to remove it
        group = os.getpgrp()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGTERM)
        if child is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(_GRACE_S)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
        os._exit(1)  # only reached when the group could not be signalled


def main(argv: Sequence[str]) -> int:
    """Start the server after `--` and wait for it, stopping it if the agent goes away."""
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write("usage: _mcp_guard.py PARENT_PID LEASE_FILE -- command [args...]\n")
        return 2
    guard = _Guard(int(argv[0]), argv[1])
    command = list(argv[3:])
    if os.getpgrp() != os.getpid():
        # Started outside the SDK: never signal the group of whoever started us.
        os.setpgid(0, 0)
    # A group SIGTERM (the SDK's shutdown) reaches the server too; the guard waits for it.
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
        signal.signal(sig, _stay)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _pdeathsig(signal.SIGUSR1)()
    if guard.should_stop():  # the parent died, or gave up, before the watch was set
        guard.stop(None)
    try:
        child = subprocess.Popen(command, preexec_fn=_pdeathsig(signal.SIGKILL))
    except OSError as error:
        sys.stderr.write(f"cannot start MCP server {command[0]!r}: {error}\n")
        return 127
    while True:
        code = child.poll()
        if code is not None:
            # Whatever the server left behind in its group goes with it.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(os.getpgrp(), signal.SIGTERM)
            return code
        if guard.should_stop():
            guard.stop(child)
        time.sleep(_POLL_S)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
