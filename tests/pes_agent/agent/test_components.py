"""The PES run components are plain data; live services live in the run's resources."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from pes_agent.pes import components

_COMPONENTS = [getattr(components, name) for name in components.__all__ if name != "Phase"]


@pytest.mark.parametrize("component", _COMPONENTS, ids=lambda c: c.__name__)
def test_each_run_component_is_a_slotted_dataclass_without_behaviour(component: type) -> None:
    """A run component is a @dataclass(slots=True) with no methods beyond plain properties."""
    assert dataclasses.is_dataclass(component)
    assert "__slots__" in vars(component)
    methods = [
        name
        for name, value in vars(component).items()
        if inspect.isfunction(value) and not name.startswith("__")
    ]
    assert methods == []


@pytest.mark.parametrize("component", _COMPONENTS, ids=lambda c: c.__name__)
def test_no_run_component_holds_a_model_caller_or_recorder(component: type) -> None:
    """No component field is typed as a live service (the model caller or the recorder)."""
    for field in dataclasses.fields(component):
        assert "RunModelCaller" not in str(field.type)
        assert "RunRecorder" not in str(field.type)
