"""The check that pydantic-evals is installed, with the command that installs it."""

from __future__ import annotations

import importlib.util
from typing import Final

__all__ = ["EXTRA", "require_pydantic_evals"]

EXTRA: Final = "pip install 'pes-agent[evals]'"


def require_pydantic_evals() -> None:
    """Raise an `ImportError` naming the extra unless pydantic-evals can be imported."""
    if importlib.util.find_spec("pydantic_evals") is None:
        raise ImportError(f"pes_agent.evals' evaluators need pydantic-evals: {EXTRA}")
