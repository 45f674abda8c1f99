"""Logging: how the library gets its loggers, and `configure_logging` for applications.

The library's events are structlog events delivered through stdlib `logging`.

structlog's processors (the application's, if it configured structlog) render each event; the
result goes to the `logging` logger of the same name. So, as with any well-behaved library,
nothing shows below WARNING until the application configures logging — and `logging`'s levels
and handlers, or `pes_agent.configure_logging`, decide what does.

While nobody has configured structlog, an event below the stdlib logger's level is dropped
before any processor runs: rendering an event nobody will see would cost more than the run's
own work on the hot path.

A failure is logged as its type (`error_type`), its message (`error`) and a plain traceback
(`exception`: file, line and function of each frame, as `traceback` prints it), never as
`exc_info`. Handed `exc_info`, structlog's default `ConsoleRenderer` with `rich` installed
prints every frame's local variables (a tool's arguments, secrets it read, the user's query),
and so does `dict_tracebacks` in a JSON set-up; a string is rendered as it is by every
renderer. The traceback stays because it is the one way to find the failing line of a tool or
hook; the values in its frames never reach a log.
"""

from __future__ import annotations

import logging
import sys
import traceback
from types import TracebackType
from typing import Any

import structlog

from pes_agent.errors import UsageError

__all__ = ["configure_logging", "enabled_for", "get_logger"]

_HANDLER_NAME = "pes_agent.console"


class _StdlibLevelLogger(structlog.BoundLoggerBase):
    """A bound logger that asks the stdlib logger's level first (when structlog is unset)."""

    _logger: logging.Logger

    def enabled_for(self, level: int) -> bool:
        """Whether an event at `level` would be emitted: a hot path asks before building one
        (an event dropped still costs its arguments and two calls)."""
        return structlog.is_configured() or self._logger.isEnabledFor(level)

    def _emit(self, level: int, method: str, event: str | None, **kw: Any) -> Any:
        if not structlog.is_configured() and not self._logger.isEnabledFor(level):
            return None
        if "exc_info" in kw:
            kw.update(_failure_fields(kw.pop("exc_info")))
        return self._proxy_to_logger(method, event, **kw)

    def debug(self, event: str | None = None, **kw: Any) -> Any:
        return self._emit(logging.DEBUG, "debug", event, **kw)

    def info(self, event: str | None = None, **kw: Any) -> Any:
        return self._emit(logging.INFO, "info", event, **kw)

    def warning(self, event: str | None = None, **kw: Any) -> Any:
        return self._emit(logging.WARNING, "warning", event, **kw)

    def error(self, event: str | None = None, **kw: Any) -> Any:
        return self._emit(logging.ERROR, "error", event, **kw)

    def exception(self, event: str | None = None, **kw: Any) -> Any:
        kw.setdefault("exc_info", True)
        return self._emit(logging.ERROR, "error", event, **kw)


def _failure_fields(exc_info: object) -> dict[str, str]:
    """`exc_info` (True, an exception or a `sys.exc_info()` triple) as type, message and a
    traceback without frame locals; nothing when there is no exception."""
    error: object = exc_info
    if exc_info is True:
        error = sys.exc_info()[1]
    elif isinstance(exc_info, tuple) and len(exc_info) == 3:
        error = exc_info[1]
    if not isinstance(error, BaseException):
        return {}
    frames: TracebackType | None = error.__traceback__
    return {
        "error_type": type(error).__name__,
        "error": str(error),
        "exception": "".join(traceback.format_exception(type(error), error, frames)).rstrip(),
    }


def enabled_for(logger: logging.Logger, level: int) -> bool:
    """Whether an event at `level` from `get_logger(logger.name)` would be emitted, as its
    `enabled_for` says, without binding a structlog logger first (the lazy proxy
    `get_logger` returns builds one on each use): for the hot paths.

    Args:
        logger: The stdlib logger of the structlog logger asked about.
        level: A `logging` level.

    Returns:
        True when structlog is configured (its processors decide) or `logger` emits `level`.
    """
    return structlog.is_configured() or logger.isEnabledFor(level)


def get_logger(name: str) -> Any:
    """A structlog logger for `name` whose output goes to `logging.getLogger(name)`."""
    return structlog.wrap_logger(logging.getLogger(name), wrapper_class=_StdlibLevelLogger)


def configure_logging(level: int | str = logging.WARNING) -> None:
    """Show pes-agent's structured logs from `level` up on stderr (default: warnings only).

    The library logs through structlog into stdlib `logging` under the `pes_agent` logger,
    with `thread_id` and `trace_id` bound, and never configures logging by itself: until an
    application does (this function, `logging.basicConfig`, or its own handlers), only
    warnings and errors reach stderr. Calling this again changes the level.

    Args:
        level: The lowest level shown: a `logging` level or its name in any case (`"info"`).

    Raises:
        UsageError: `level` names no log level.
    """
    numeric = logging.getLevelName(level.upper()) if isinstance(level, str) else level
    if not isinstance(numeric, int):
        raise UsageError(f"unknown log level {level!r}; use e.g. 'INFO' or logging.DEBUG")
    logger = logging.getLogger("pes_agent")
    logger.setLevel(numeric)
    if not any(handler.get_name() == _HANDLER_NAME for handler in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.set_name(_HANDLER_NAME)
        logger.addHandler(handler)
        # Our handler prints them; the root logger's handlers must not print them again.
        logger.propagate = False
