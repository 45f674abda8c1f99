"""PhaseSystem: a phase's type arguments are both what it is queried for and what `run` takes."""

from __future__ import annotations

import inspect
from typing import get_type_hints

import pytest

from pes_agent.pes.base import PhaseSystem
from pes_agent.pes.components import Executed, Paused, Planned, Synthesized
from pes_agent.pes.finalization import FinalizationSystem
from pes_agent.pes.pausing import PauseSystem
from pes_agent.pes.plan_phase import PlanPhaseSystem
from pes_agent.pes.retrieval import RetrievalSystem
from pes_agent.pes.synthesis import SynthesisSystem
from pes_agent.pes.tool_system import ToolSystem

PHASES: list[tuple[type[PhaseSystem[*tuple[object, ...]]], tuple[type, ...]]] = [
    (RetrievalSystem, ()),
    (PlanPhaseSystem, ()),
    (ToolSystem, (Planned,)),
    (SynthesisSystem, (Planned, Executed)),
    (PauseSystem, (Planned, Paused)),
    (FinalizationSystem, (Executed, Synthesized)),
]


@pytest.mark.parametrize(("system", "inputs"), PHASES, ids=lambda p: getattr(p, "__name__", ""))
def test_requires_are_the_type_arguments(
    system: type[PhaseSystem[*tuple[object, ...]]], inputs: tuple[type, ...]
) -> None:
    """Each phase system queries the world for exactly the components it is parameterized with."""
    assert system.requires == inputs


@pytest.mark.parametrize(("system", "inputs"), PHASES, ids=lambda p: getattr(p, "__name__", ""))
def test_run_takes_the_required_components_typed_in_order(
    system: type[PhaseSystem[*tuple[object, ...]]], inputs: tuple[type, ...]
) -> None:
    """Each phase's `run` takes the run and then one typed parameter per required component."""
    hints = get_type_hints(system.run)
    parameters = list(inspect.signature(system.run).parameters)[2:]  # after self and run
    assert tuple(hints[name] for name in parameters) == system.requires == inputs
