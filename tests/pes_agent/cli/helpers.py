"""Running the real `pes-agent` command in a subprocess, with a clean environment.

Each test gets a private home and data directory, so nothing reads or writes the developer's
own store, and no key or base URL from the developer's shell reaches the command.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["REPO", "Completed", "cli_command", "cli_env", "lines", "run_cli", "run_cli_async"]

REPO = Path(__file__).resolve().parents[3]
_SCRIPT = Path(sys.executable).with_name("pes-agent")
_DROPPED_PREFIXES = ("OPENAI_", "ANTHROPIC_", "OLLAMA_", "PES_AGENT_")


def cli_command() -> list[str]:
    """The installed `pes-agent` console script, or `python -m pes_agent.cli` without one."""
    if _SCRIPT.exists():
        return [str(_SCRIPT)]
    return [sys.executable, "-m", "pes_agent.cli"]


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a user with an empty home at `home` and no API keys."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_DROPPED_PREFIXES)}
    env.update(
        {
            "HOME": str(home),
            "XDG_DATA_HOME": str(home / "data"),
            "COLUMNS": "120",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


@dataclass(frozen=True, slots=True)
class Completed:
    """What a finished `pes-agent` process left behind."""

    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def run_cli(*args: str, env: Mapping[str, str], cwd: Path = REPO, timeout: float = 60) -> Completed:
    """Run `pes-agent ARGS...` to completion."""
    done = subprocess.run(
        [*cli_command(), *args],
        capture_output=True,
        text=True,
        env=dict(env),
        cwd=cwd,
        timeout=timeout,
        check=False,
    )
    return Completed(done.returncode, done.stdout, done.stderr)


async def run_cli_async(
    *args: str, env: Mapping[str, str], cwd: Path = REPO, within_s: float = 60
) -> Completed:
    """Run `pes-agent ARGS...` without blocking the event loop (a test's model server runs
    on it)."""
    process = await asyncio.create_subprocess_exec(
        *cli_command(),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(env),
        cwd=cwd,
    )
    try:
        async with asyncio.timeout(within_s):
            stdout, stderr = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    return Completed(process.returncode, stdout.decode(), stderr.decode())


def lines(text: str) -> Sequence[str]:
    """The non-empty lines of `text`."""
    return [line for line in text.splitlines() if line.strip()]
