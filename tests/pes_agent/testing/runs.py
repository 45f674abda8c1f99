"""What the record/replay tests share: the real SDK providers on the loopback server, and
observations made comparable across two runs of the same conversation."""

from __future__ import annotations

from typing import Any

from pes_agent import ProviderConfig, tool
from pes_agent.observing.types import Observation
from pes_agent.providers import create_provider
from pes_agent.providers.base import LLMProvider
from tests.pes_agent.providers.model_server import ModelServer

__all__ = ["APIS", "CONFIG_KEY", "comparable", "get_weather", "multiply", "sdk_provider"]

APIS = ["openai", "anthropic"]
# Not shaped like an API key: only the cassette's own scrubbing can keep it out.
CONFIG_KEY = "ConfigSecret1234wxyzQR"

# What differs between two runs of the same conversation: ids, clocks and durations.
_VARYING = {"id", "message_id", "messageId", "trace_id", "traceId", "timestamp"}
_VARYING_SUFFIXES = ("_ms", "Ms", "_at", "At")


# The tools are async: they run on the loop, so calls started together end in the order they
# started, on the recording as on the replay (a sync tool's thread could finish either way).
@tool
async def get_weather(city: str) -> dict[str, Any]:
    """Current weather for a city."""
    return {"city": city, "sky": "sunny", "celsius": 18}


@tool
async def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def sdk_provider(server: ModelServer, api: str) -> LLMProvider:
    """The real SDK provider of `api` ("openai" or "anthropic") on the loopback server."""
    config = ProviderConfig(
        api, "test-model", api_key=CONFIG_KEY, base_url=server.base_url_for(api), max_retries=0
    )
    return create_provider(config)


def _without_ids_and_timings(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _without_ids_and_timings(v)
            for k, v in value.items()
            if k not in _VARYING and not k.endswith(_VARYING_SUFFIXES)
        }
    if isinstance(value, list):
        return [_without_ids_and_timings(item) for item in value]
    return value


def comparable(observations: list[Observation]) -> list[dict[str, Any]]:
    """Each observation whole (type, title, content, metadata) without its ids, timestamps and
    timings, its parent named by position, so the tree's shape is compared too."""
    position = {o.id: n for n, o in enumerate(observations)}
    found = []
    for o in observations:
        dumped = _without_ids_and_timings(o.model_dump(mode="json", exclude={"parent_id"}))
        dumped["parent"] = None if o.parent_id is None else position.get(o.parent_id, "outside")
        found.append(dumped)
    return found
