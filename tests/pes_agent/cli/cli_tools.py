"""Tools the CLI tests import with `--tools tests.pes_agent.cli.cli_tools:ATTR`."""

from __future__ import annotations

import asyncio
from typing import Any

from pes_agent import tool

__all__ = ["TOOLS", "fail", "get_weather", "multiply", "raw_html", "slow"]


@tool
async def get_weather(city: str) -> dict[str, Any]:
    """Current weather for a city."""
    await asyncio.sleep(0.05)
    return {"city": city, "sky": "sunny", "celsius": 18}


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


@tool
def fail(reason: str) -> str:
    """Always fails, with `reason`."""
    raise RuntimeError(reason)


@tool
async def slow(seconds: float) -> str:
    """Sleep for `seconds`, then say so."""
    await asyncio.sleep(seconds)
    return f"slept {seconds} s"


@tool
def raw_html(text: str) -> str:
    """Return `text` unchanged (tests put markup in it)."""
    return text


TOOLS = [get_weather, multiply, fail, slow, raw_html]
