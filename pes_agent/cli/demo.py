"""`pes-agent demo`: a whole run offline, on a scripted model and a few built-in tools.

The scripted model plans four tool calls as a DAG:

```
call_1 get_weather(Lisbon) ─┐
                            ├─> call_3 pick_warmest([{step_1_result}, {step_2_result}])
call_2 get_weather(Porto)  ─┘        └─> call_4 find_events({step_3_result.city})
```

The two lookups sleep half a second each and run side by side; `pick_warmest` receives both
results whole (a placeholder that is the whole value keeps its type); `find_events` reaches into
the pick with `{step_3_result.city}`. Streaming is paced so the live view has something to show;
the whole run takes about two seconds. No API key, no network.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from pes_agent.providers.base import LLMRequest, ProviderEvent, TokenDelta
from pes_agent.testing import ScriptedProvider, ScriptedResponse
from pes_agent.tools import tool

__all__ = [
    "DEMO_QUERY",
    "DEMO_THREAD",
    "PacedProvider",
    "demo_model",
    "demo_tools",
    "find_events",
    "get_weather",
    "pick_warmest",
]

DEMO_QUERY = "Lisbon or Porto for the weekend? Pick the warmer one and tell me what is on there."
DEMO_THREAD = "demo"

# Fixed demo data: the demo must give the same answer on every machine, offline.
_WEATHER: dict[str, dict[str, Any]] = {
    "Lisbon": {"sky": "sunny", "celsius": 24},
    "Porto": {"sky": "cloudy", "celsius": 19},
}
_EVENTS: dict[str, list[str]] = {
    "Lisbon": ["Fado night in Alfama (Sat 21:00)", "Sunset at Miradouro da Senhora do Monte"],
    "Porto": ["Port cellar tour in Gaia (Sat 15:00)", "Concert at Casa da Música (Sun 18:00)"],
}

# The pace of the lookups: slow enough that their overlap is visible in the live view.
LOOKUP_SECONDS = 0.5
EVENTS_SECONDS = 0.3


@tool
async def get_weather(city: str) -> dict[str, Any]:
    """Today's weather for a city (demo data for Lisbon and Porto)."""
    await asyncio.sleep(LOOKUP_SECONDS)
    if city not in _WEATHER:
        raise ValueError(f"no demo weather for {city!r}; try Lisbon or Porto")
    return {"city": city, **_WEATHER[city]}


@tool
def pick_warmest(forecasts: list[dict[str, Any]]) -> dict[str, Any]:
    """The warmest of several forecasts (each with `city` and `celsius`) and its lead in °C."""
    ranked = sorted(forecasts, key=lambda forecast: forecast["celsius"], reverse=True)
    lead = ranked[0]["celsius"] - ranked[1]["celsius"] if len(ranked) > 1 else 0
    return {"city": ranked[0]["city"], "celsius": ranked[0]["celsius"], "lead_celsius": lead}


@tool
async def find_events(city: str) -> list[str]:
    """What is on this weekend in a city (demo data for Lisbon and Porto)."""
    await asyncio.sleep(EVENTS_SECONDS)
    return list(_EVENTS.get(city, []))


def demo_tools() -> list[Any]:
    """The demo's tools, in the order the plan uses them."""
    return [get_weather, pick_warmest, find_events]


_THINKING = (
    "Two forecasts are needed and they do not depend on each other, so both lookups can run "
    "at once. The comparison needs both results; the events lookup needs only the winner."
)

# The compact planning protocol: the calls, one per line, then the intent. The two lookups start
# while the rest of the plan is still being written (streaming dispatch).
_PLAN = (
    '1. get_weather(city="Lisbon")\n'
    '2. get_weather(city="Porto")\n'
    '3. pick_warmest(forecasts=["{step_1_result}", "{step_2_result}"])\n'
    '4. find_events(city="{step_3_result.city}")\n'
    "Intent: the warmer of Lisbon and Porto this weekend, and what is on there\n"
)

_ANSWER = (
    "Go to **Lisbon**: it is sunny and 24 °C there, 5 °C warmer than cloudy Porto (19 °C). "
    "This weekend you can catch a fado night in Alfama on Saturday at 21:00, and watch the "
    "sunset from the Miradouro da Senhora do Monte."
)


@dataclass(slots=True)
class PacedProvider:
    """A provider that passes on another one's stream, pausing between pieces of text.

    `ScriptedProvider` waits once before a response and then streams it at once; pacing each
    piece makes the stream visible to a person watching the live view. The answer is paced
    more slowly than the plan, as a model writing prose would be.
    """

    inner: ScriptedProvider
    delay_s: float = 0.008
    answer_delay_s: float = 0.025

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def model(self) -> str:
        return self.inner.model

    async def stream(self, request: LLMRequest) -> AsyncIterator[ProviderEvent]:
        """Stream the inner provider's response, one paced piece at a time."""
        delay = self.answer_delay_s if request.phase == "synthesis" else self.delay_s
        async for event in self.inner.stream(request):
            if isinstance(event, TokenDelta) and delay:
                await asyncio.sleep(delay)
            yield event

    async def aclose(self) -> None:
        """Close the inner provider."""
        await self.inner.aclose()


def _demo_response(request: LLMRequest) -> ScriptedResponse | str:
    # By phase, not by position: the server runs many demo runs at once on one model.
    if request.phase == "planning":
        return ScriptedResponse(_PLAN, thinking=[_THINKING])
    return _ANSWER


def demo_model() -> PacedProvider:
    """The demo's scripted model: for every run, a plan (after a thinking block), then the
    answer; any number of runs, concurrent ones too (`pes-agent serve --demo`)."""
    scripted = ScriptedProvider(
        [_demo_response],
        repeat=True,
        latency_s=0.1,
        chunk_size=16,
        name="scripted",
        model="demo-model",
    )
    return PacedProvider(scripted)
