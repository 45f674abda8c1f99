"""Tools the CLI tests import with `--tools tests.pes_agent.cli.cli_tools:ATTR`."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from pes_agent import tool

__all__ = [
    "ANSWER",
    "LEDGER_ENV",
    "PLAN",
    "TOOLS",
    "fail",
    "get_weather",
    "multiply",
    "raw_html",
    "record",
    "slow",
    "transfer_money",
]

#: A scripted model's plan for "Weather in Paris, and 12*7?" (two independent calls) and its
#: answer, as the run tests script them.
PLAN = json.dumps(
    {
        "title": "Weather and arithmetic",
        "intent": "weather and a product",
        "plan": "1. look up Paris\n2. multiply",
        "toolCalls": [
            {"callId": "call_1", "toolName": "get_weather", "arguments": {"city": "Paris"}},
            {"callId": "call_2", "toolName": "multiply", "arguments": {"a": 12, "b": 7}},
        ],
    }
)
ANSWER = "It is sunny and 18 °C in Paris, and 12 × 7 = 84."

#: The file (named by this environment variable) where `transfer_money` and `record` write a
#: line each time they run, so a test can count side effects across processes.
LEDGER_ENV = "PES_TEST_LEDGER"


def _write(line: str) -> None:
    ledger = os.environ.get(LEDGER_ENV)
    if ledger:
        with Path(ledger).open("a", encoding="utf-8") as file:
            file.write(line + "\n")


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


@tool(requires_approval=True)
def transfer_money(amount: int, to: str) -> str:
    """Send `amount` euros to `to` (needs a person's approval)."""
    _write(f"transfer {amount} {to}")
    return f"sent {amount} EUR to {to}"


@tool
def record(text: str) -> str:
    """Write `text` down."""
    _write(f"record {text}")
    return f"recorded {text!r}"


TOOLS = [get_weather, multiply, fail, slow, raw_html, transfer_money, record]
