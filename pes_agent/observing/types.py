"""The typed records a run leaves behind for UIs and logs."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler
from pydantic_core import CoreSchema, core_schema

__all__ = ["Observation", "ObservationType", "new_id"]


class ObservationType(StrEnum):
    """What an observation is about."""

    INTENT = "INTENT"
    TITLE = "TITLE"
    PLAN = "PLAN"
    THOUGHTS = "THOUGHTS"
    TOOL_CALL = "TOOL_CALL"
    TOOL_EXECUTION = "TOOL_EXECUTION"
    SYNTHESIS = "SYNTHESIS"
    ERROR = "ERROR"
    FINAL_RESPONSE = "FINAL_RESPONSE"
    STATE_UPDATE = "STATE_UPDATE"
    LLM_STREAM_START = "LLM_STREAM_START"
    LLM_STREAM_METADATA = "LLM_STREAM_METADATA"
    LLM_STREAM_END = "LLM_STREAM_END"
    LLM_STREAM_ERROR = "LLM_STREAM_ERROR"
    #: A planned call needs a person's approval (one per call; the run may pause).
    APPROVAL_REQUESTED = "APPROVAL_REQUESTED"
    #: A decision about a call that needed approval (approve, deny, or expired as a denial).
    APPROVAL_DECIDED = "APPROVAL_DECIDED"
    RETRIEVAL = "RETRIEVAL"


def new_id() -> str:
    """A new observation id: 32 random hex digits, as `uuid.uuid4().hex` but a tenth of its
    cost (a run records one for every step it takes): drawn from `os.urandom` a batch at a
    time, and the batch left behind in a forked child, so no two processes share an id."""
    try:
        return _ids.pop()
    except IndexError:
        digits = os.urandom(16 * _BATCH).hex()
        # A list, not a generator: one call per batch rather than one resumption per id.
        _ids.extend([digits[start : start + 32] for start in range(32, len(digits), 32)])
        return digits[:32]


_BATCH = 64
_ids: list[str] = []
if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=_ids.clear)


def _now() -> datetime:
    return datetime.now(UTC)


class _WrittenAsItsText:
    """Marks a `StrEnum` field to be written to JSON as the member's own text, which for a
    `StrEnum` is its value: the JSON is the same, without pydantic's enum serializer reading
    `.value` (a Python-level property in Python 3.11: 0.2 of the 1.4 us an observation's JSON
    took, and a run writes one per step). Validation, `model_dump()` (which keeps the member)
    and the JSON schema (both modes) are those of the plain enum field; tests check all of
    them."""

    def __get_pydantic_core_schema__(
        self, source: type[Any], handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        # A copy: the enum's own schema (or the reference to it) is shared with other fields.
        return {**handler(source), "serialization": core_schema.simple_ser_schema("str")}


class Observation(BaseModel):
    """One typed event of a run: `content` holds the payload, `metadata` extra context."""

    model_config = ConfigDict(frozen=True)

    id: str = Field(default_factory=new_id)
    thread_id: str
    trace_id: str
    timestamp: datetime = Field(default_factory=_now)
    type: Annotated[ObservationType, _WrittenAsItsText()]
    title: str
    content: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] | None = None
    parent_id: str | None = None
