"""`json_patch`: the STATE_DELTA of a state change, which applied to the state before gives
the state after."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from ag_ui.core import StateDeltaEvent

from pes_agent.interop.agui import json_patch


def apply(document: Any, patch: list[dict[str, Any]]) -> Any:
    """RFC 6902 add/remove/replace on objects, as a client applies a delta."""
    for op in patch:
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]]
        if not tokens:
            document = op["value"]
            continue
        parent = document
        for token in tokens[:-1]:
            parent = parent[token]
        if op["op"] == "remove":
            del parent[tokens[-1]]
        else:
            parent[tokens[-1]] = op["value"]
    return document


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ({}, {"notes": ["hi"]}),
        ({"a": 1, "b": {"c": 2, "d": 3}}, {"b": {"c": 2, "d": 4}, "e/f~g": True}),
        ({"n": 1}, {"n": 1.0}),
        ({"flag": True}, {"flag": 1}),
        ({"list": [1, 2]}, {"list": [2]}),
        ({"x": 1}, ["not", "an", "object"]),
    ],
)
def test_the_patch_turns_the_state_before_into_the_state_after(before: Any, after: Any) -> None:
    """Applied to a copy of `before`, the patch gives `after`, types included, and it is a
    valid AG-UI STATE_DELTA."""
    patch = json_patch(before, after)
    StateDeltaEvent.model_validate({"delta": patch})
    result = apply(copy.deepcopy(before), patch)
    assert result == after
    assert [type(v) for v in _leaves(result)] == [type(v) for v in _leaves(after)]


def test_an_unchanged_state_has_an_empty_patch() -> None:
    """Nothing changed: no operation (the run sends no STATE_DELTA)."""
    assert json_patch({"a": [1, {"b": None}]}, {"a": [1, {"b": None}]}) == []


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for key in sorted(value) for leaf in _leaves(value[key])]
    if isinstance(value, list):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]
