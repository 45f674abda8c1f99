"""A model call's usage observation: the usage as `model_dump()` gives it, whatever its class."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict

from pes_agent.pes.llm_call import _dumped
from pes_agent.usage import Usage


class _WithExtra(Usage):
    model_config = ConfigDict(extra="allow")
    cost_usd: float = 0.0


class _Renamed(Usage):
    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        return {"tokens": self.total_tokens}


def test_the_usage_is_recorded_as_model_dump_gives_it() -> None:
    """A plain usage, a subclass with fields and extras, and one overriding `model_dump` are
    recorded exactly as `model_dump()` returns them, keys in the same order."""
    usages = [
        Usage(input_tokens=3, output_tokens=4, total_tokens=7, requests=1),
        _WithExtra(input_tokens=1, cost_usd=0.5, region="eu"),  # type: ignore[call-arg]
        _Renamed(total_tokens=9),
    ]
    for usage in usages:
        assert list(_dumped(usage).items()) == list(usage.model_dump().items())
    assert _dumped(usages[1])["region"] == "eu"
    assert _dumped(usages[2]) == {"tokens": 9}
