"""Observation's `type` is written to JSON without pydantic's enum serializer: the JSON, the
Python dump and the JSON schema must stay exactly those of a plain `ObservationType` field."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import JsonSchemaMode

from pes_agent.observing import types
from pes_agent.observing.types import Observation, ObservationType
from pes_agent.storage._codec import dump_observation


class _PlainObservation(BaseModel):
    """One typed event of a run: `content` holds the payload, `metadata` extra context."""

    model_config = ConfigDict(frozen=True, title="Observation")

    id: str = Field(default_factory=types.new_id)
    thread_id: str
    trace_id: str
    timestamp: datetime = Field(default_factory=types._now)
    type: ObservationType
    title: str
    content: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] | None = None
    parent_id: str | None = None


def _fields(kind: ObservationType) -> dict[str, Any]:
    return {
        "id": "0123456789abcdef0123456789abcdef",
        "thread_id": "thread-1",
        "trace_id": "trace-1",
        "timestamp": datetime(2026, 1, 2, 3, 4, 5, 678, tzinfo=timezone(timedelta(hours=2))),
        "type": kind,
        "title": f"About {kind}",
        # An ObservationType inside content is written by inference, as before.
        "content": {"kind": kind, "nested": [1, {"x": None}], "text": 'é "quoted"\n'},
        "metadata": {"source": "test"},
        "parent_id": "parent-1",
    }


@pytest.mark.parametrize("kind", list(ObservationType))
def test_json_of_every_type_is_the_plain_enum_fields_json(kind: ObservationType) -> None:
    observation = Observation(**_fields(kind))
    plain = _PlainObservation(**_fields(kind))
    expected = plain.model_dump_json()
    assert observation.model_dump_json() == expected
    assert observation.model_dump_json(indent=2) == plain.model_dump_json(indent=2)
    assert dump_observation(observation) == expected
    assert observation.model_dump(mode="json") == plain.model_dump(mode="json")
    assert type(observation.model_dump(mode="json")["type"]) is str
    assert f'"type":"{kind.value}"' in expected


def test_json_of_an_observation_is_pinned() -> None:
    """The stored text, byte for byte: stores written before and after must read alike."""
    observation = Observation(**_fields(ObservationType.TOOL_CALL))
    assert dump_observation(observation) == (
        '{"id":"0123456789abcdef0123456789abcdef","thread_id":"thread-1","trace_id":"trace-1",'
        '"timestamp":"2026-01-02T03:04:05.000678+02:00","type":"TOOL_CALL",'
        '"title":"About TOOL_CALL","content":{"kind":"TOOL_CALL","nested":[1,{"x":null}],'
        '"text":"é \\"quoted\\"\\n"},"metadata":{"source":"test"},"parent_id":"parent-1"}'
    )


@pytest.mark.parametrize("kind", list(ObservationType))
def test_python_dump_keeps_the_enum_member(kind: ObservationType) -> None:
    dumped = Observation(**_fields(kind)).model_dump()
    assert dumped["type"] is kind
    assert dumped == _PlainObservation(**_fields(kind)).model_dump()


@pytest.mark.parametrize("mode", ["validation", "serialization"])
def test_json_schema_is_the_plain_enum_fields_schema(mode: JsonSchemaMode) -> None:
    schema = Observation.model_json_schema(mode=mode)
    assert schema == _PlainObservation.model_json_schema(mode=mode)
    assert schema["properties"]["type"] == {"$ref": "#/$defs/ObservationType"}
    assert schema["$defs"]["ObservationType"]["enum"] == [kind.value for kind in ObservationType]


def test_the_type_still_validates_as_the_enum() -> None:
    fields = _fields(ObservationType.PLAN)
    assert Observation(**{**fields, "type": "PLAN"}).type is ObservationType.PLAN
    assert Observation.model_validate_json(Observation(**fields).model_dump_json()).type is (
        ObservationType.PLAN
    )
    with pytest.raises(ValueError, match="type"):
        Observation(**{**fields, "type": "NOT_A_TYPE"})


def test_a_now_is_written_as_before() -> None:
    """Timestamps from the default factory (UTC, microseconds) write as the plain field's."""
    fields = {**_fields(ObservationType.INTENT), "timestamp": datetime.now(UTC)}
    assert Observation(**fields).model_dump_json() == _PlainObservation(**fields).model_dump_json()
