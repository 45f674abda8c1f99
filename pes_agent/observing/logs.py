"""Logging: how the library gets its loggers, and `configure_logging` for applications.

The library's events are structlog events delivered through stdlib `logging`.

structlog's processors (the application's, if it configured structlog) render each event; the
result goes to the `logging` logger of the same name. So, as with any well-behaved library,
nothing shows below WARNING until the application configures logging — and `logging`'s levels
and handlers, or `pes_agent.configure_logging`, decide what does.

While nobody has configured structlog, an event below the stdlib logger's level is dropped
before any processor runs: rendering an event nobody will see would cost more than the run's
own work on the hot path.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

from pes_agent.errors import UsageError

__all__ = ["configure_logging", "get_logger"]

_HANDLER_NAME = "pes_agent.console"


class _StdlibLevelLogger(structlog.BoundLoggerBase):
    """A bound logger that asks the stdlib logger's level first (when structlog is unset)."""

    _logger: logging.Logger

    def _emit(self, level: int, method: str, event: str | None, **kw: Any) -> Any:
        if not structlog.is_configured() and not self._logger.isEnabledFor(level):
            return None
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


def get_logger(name: str) -> Any:
    """A structlog logger for `name` whose output goes to `logging.getLogger(name)`."""
    return structlog.wrap_logger(logging.getLogger(name), wrapper_class=_StdlibLevelLogger)


def configure_logging(level: int | str = logging.WARNING) -> None:
    """Show pes-agent's structured logs from `level` up on stderr (default: warnings only).

    The library logs through structlog into stdlib `logging` under the `pes_agent` logger,
    with `thread_id` and `trace_id` bound, and never configures logging by itself: until an
    application does (this function, `logging.basicConfig`, or its own handlers), only
    warnings and errors reach stderr. Calling this again changes the level.
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
