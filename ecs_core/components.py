"""Components every ecs_core application shares: termination and per-entity failure."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

__all__ = ["ErrorComponent", "TerminalComponent"]


@dataclass(slots=True)
class TerminalComponent:
    """Marks an entity as finished; `Runner` stops once every entity it watches carries one."""

    reason: str


@dataclass(slots=True)
class ErrorComponent:
    """Records that a system failed while working on this particular entity.

    The executor reports a system that raises as an `ErrorOccurredEvent`; a system that can
    tell *which* entity it failed on attaches this component to that entity instead (or too),
    so the failure travels with the entity.
    """

    error: BaseException
    system_name: str
    timestamp: datetime = field(default_factory=lambda: datetime.now(UTC))
