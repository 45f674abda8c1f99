"""Tools the CLI tests import with `--tools tests.pes_agent.cli.cli_tools:ATTR`."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from pes_agent import tool

__all__ = [
    "LEDGER_ENV",
    "TOOLS",
    "fail",
    "get_weather",
    "multiply",
    "raw_html",
    "record",
    "slow",
    "transfer_money",
]

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
