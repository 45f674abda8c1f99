"""MCP test helpers: the calc server's command line, plan builders and process checks."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from pes_agent import testing

from ...helpers import free_port

pytest.importorskip("mcp")

CALC_SERVER = str(Path(__file__).resolve().parent / "servers" / "calc_server.py")


plan_json = partial(testing.plan_json, title="t")
"""A planning answer in the JSON protocol with the given tool calls (and a title)."""

call = testing.plan_call


def alive(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie waiting to be reaped counts as gone)."""
    stat = Path(f"/proc/{pid}/stat")
    if stat.parent.parent.is_dir() and Path("/proc/self").exists():
        try:
            state = stat.read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return False
        return state not in ("Z", "X")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_gone(pids: list[int], within_s: float) -> list[int]:
    """Wait up to `within_s` for every pid to be gone; the ones still alive."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not any(alive(pid) for pid in pids):
            return []
        time.sleep(0.05)
    return [pid for pid in pids if alive(pid)]


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    """The calc server (named "remote") over streamable HTTP on a free 127.0.0.1 port."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, CALC_SERVER, "--http", str(port), "--name", "remote"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the HTTP MCP server did not start")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait()
