"""Showing pes-agent's logs: `configure_logging("INFO")` in a script or an app."""

from __future__ import annotations

import logging
import sys

from pes_agent.exceptions import UsageError

__all__ = ["configure_logging"]

_HANDLER_NAME = "pes_agent.console"


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
