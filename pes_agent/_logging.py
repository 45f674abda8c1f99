"""How the library gets its loggers: structlog events delivered through stdlib `logging`.

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
from typing import Any

import structlog

__all__ = ["get_logger"]


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
