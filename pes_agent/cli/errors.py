"""The CLI's exit codes and the one exception its commands raise to stop with a message."""

from __future__ import annotations

import sys
from enum import IntEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # not at run time: `pes-agent --help` should not wait for pydantic
    from pes_agent.run import RunStatus

__all__ = ["CLIError", "ExitCode", "exit_code_for", "report"]


class ExitCode(IntEnum):
    """What `pes-agent` exits with; scripts can tell a partial answer from a failed run."""

    OK = 0
    """The command worked; for `run`/`demo`, the run's status is `success`."""
    RUN_ERROR = 1
    """The run ended with status `error` (provider down, unusable plan, ...)."""
    USAGE = 2
    """The command line or configuration was wrong: bad arguments, missing API key, a
    `--tools` path that does not import, an unknown thread, trace or observation type."""
    PARTIAL = 3
    """The run answered, but at least one tool call failed (status `partial`)."""
    AWAITING_APPROVAL = 4
    """The run paused: calls wait for approval (`--no-input`, or no terminal to ask at);
    `pes-agent approve THREAD` finishes it."""
    INTERRUPTED = 130
    """Ctrl-C: the run was cancelled (128 + SIGINT, as shells report it)."""


def exit_code_for(status: RunStatus) -> ExitCode:
    """The exit code for a finished run's status."""
    if status == "success":
        return ExitCode.OK
    if status == "partial":
        return ExitCode.PARTIAL
    if status == "awaiting_approval":
        return ExitCode.AWAITING_APPROVAL
    return ExitCode.RUN_ERROR


class CLIError(Exception):
    """Stop the command: print `message` as one line to stderr and exit with `code`."""

    def __init__(self, message: str, code: ExitCode = ExitCode.USAGE) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def report(message: str) -> None:
    """Print `message` to stderr as one line, prefixed with the program name."""
    sys.stderr.write(f"pes-agent: {' '.join(message.splitlines())}\n")
    sys.stderr.flush()
