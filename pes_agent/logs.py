"""Logging set-up for applications and scripts that have not configured structlog themselves."""

from __future__ import annotations

import logging

import structlog

__all__ = ["configure_logging"]


def configure_logging(level: int | str = logging.WARNING) -> None:
    """Show pes-agent's structured logs from `level` up (default: warnings and errors only).

    The library logs through structlog with `thread_id` and `trace_id` bound and never
    configures logging itself; call this, or configure structlog your own way, in your app.
    """
    numeric = logging.getLevelName(level.upper()) if isinstance(level, str) else level
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}; use e.g. 'INFO' or logging.DEBUG")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(numeric))
