"""How the library gets its loggers: structlog events delivered through stdlib `logging`.

structlog's processors (the application's, if it configured structlog) render each event; the
result goes to the `logging` logger of the same name. So, as with any well-behaved library,
nothing shows below WARNING until the application configures logging — and `logging`'s levels
and handlers, or `pes_agent.configure_logging`, decide what does.
"""

from __future__ import annotations

import logging
from typing import Any

import structlog

__all__ = ["get_logger"]


def get_logger(name: str) -> Any:
    """A structlog logger for `name` whose output goes to `logging.getLogger(name)`."""
    return structlog.wrap_logger(logging.getLogger(name))
