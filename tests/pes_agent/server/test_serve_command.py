"""`pes-agent serve`: uvicorn worker processes serving the demo agent on a SQLite file."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2 as httpx
import pytest

from pes_agent.cli.errors import CLIError
from pes_agent.cli.serve import SERVE_ENV_VAR, app_from_env
from tests.pes_agent.cli.helpers import cli_command, cli_env

from .sse import SSEStream
from .test_sse_uvicorn import free_port

STREAM = {"Accept": "text/event-stream"}
# How soon after SIGINT a server with no run executing must be gone.
SHUTDOWN_WITHIN_S = 10


def test_factory_without_the_command_says_how_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker factory outside `pes-agent serve` fails naming the command."""
    monkeypatch.delenv(SERVE_ENV_VAR, raising=False)
    with pytest.raises(CLIError, match="pes-agent serve"):
        app_from_env()


@pytest.mark.slow
def test_serve_with_two_workers_answers_runs(tmp_path: Path) -> None:
    """`pes-agent serve --demo --workers 2` answers a JSON run and requires the env token."""
    port = free_port()
    env = {**os.environ, "PES_AGENT_API_TOKEN": "s3cret"}
    command = [sys.executable, "-m", "pes_agent.cli", "serve", "--demo", "--workers", "2"]
    command += ["--db", str(tmp_path / "serve.db"), "--port", str(port)]
    server = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{url}/openapi.json", timeout=1)
                break
            except httpx.TransportError:
                assert server.poll() is None, server.stdout.read() if server.stdout else ""
                assert time.monotonic() < deadline, "the server never started"
                time.sleep(0.2)
        assert httpx.get(f"{url}/v1/threads").status_code == 401
        headers = {"Authorization": "Bearer s3cret"}
        response = httpx.post(
            f"{url}/v1/threads/d1/runs", json={"query": "weekend?"}, headers=headers, timeout=30
        )
        assert response.status_code == 200
        assert response.json()["metadata"]["status"] == "success"
        listed = httpx.get(f"{url}/v1/threads", headers=headers).json()
        assert listed == {"threads": ["d1"]}
    finally:
        server.send_signal(signal.SIGINT)
        try:
            output, _ = server.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            output, _ = server.communicate()
    assert "s3cret" not in output


@asynccontextmanager
async def serving_command(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> AsyncIterator[tuple[str, asyncio.subprocess.Process, Path]]:
    """`pes-agent serve --demo ARGS` on a SQLite file, until it answers; yields its URL, the
    process and its log. Killed afterwards if still running."""
    port = free_port()
    log = tmp_path / "serve.log"
    command = [*cli_command(), "serve", "--demo", "--db", str(tmp_path / "serve.db")]
    command += ["--port", str(port), *args]
    with log.open("wb") as out:  # a file, not a pipe nobody reads: it never fills up
        process = await asyncio.create_subprocess_exec(
            *command,
            env=env or cli_env(tmp_path),
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(timeout=2) as client:
            for _ in range(300):
                try:
                    await client.get(f"{url}/openapi.json")
                    break
                except httpx.TransportError:
                    assert process.returncode is None, log.read_text()
                    await asyncio.sleep(0.1)
            else:
                pytest.fail(f"the server never started:\n{log.read_text()}")
        yield url, process, log
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
async def test_an_open_thread_feed_does_not_hold_up_shutdown(tmp_path: Path, workers: str) -> None:
    """SIGINT to `pes-agent serve` while a client follows a thread's feed: the feed ends (the
    client reconnects elsewhere with Last-Event-ID) and the server exits at once, instead of
    waiting for a stream that never ends."""
    async with (
        serving_command(tmp_path, "--workers", workers) as (url, process, log),
        httpx.AsyncClient(base_url=url, timeout=30) as client,
        client.stream("GET", "/v1/threads/t/events", headers=STREAM) as feed,
    ):
        events = SSEStream(feed)
        assert [e.name for e in await events.read(until=lambda e: True)] == ["subscribed"]
        process.send_signal(signal.SIGINT)
        try:
            async with asyncio.timeout(SHUTDOWN_WITHIN_S):
                assert await events.read() == []  # the stream ends, with nothing more
                code = await process.wait()
        except TimeoutError:
            pytest.fail(f"still serving {SHUTDOWN_WITHIN_S} s after SIGINT:\n{log.read_text()}")
    output = log.read_text()
    assert code == 0, output
    assert "Traceback" not in output, output


@pytest.mark.slow
async def test_the_server_log_shows_the_library_warnings(tmp_path: Path) -> None:
    """`pes-agent serve` shows pes-agent's own warnings and errors (what an API error's "the
    server log has details" points at), not only uvicorn's lines: here a thread configured
    with a tool the agent does not have."""
    async with (
        serving_command(tmp_path) as (url, process, log),
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        config = await client.put("/v1/threads/w/config", json={"enabled_tools": ["no_such"]})
        assert config.status_code == 200, config.text
        ran = await client.post("/v1/threads/w/runs", json={"query": "weekend?"})
        assert ran.status_code == 200, ran.text
        process.send_signal(signal.SIGINT)
        await asyncio.wait_for(process.wait(), SHUTDOWN_WITHIN_S)
    output = log.read_text()
    assert "enabled_tools_not_registered" in output, output
    assert "no_such" in output


@pytest.mark.slow
async def test_serve_without_its_database_fails_at_once_in_one_line(tmp_path: Path) -> None:
    """A PostgreSQL server that cannot be reached stops `pes-agent serve` before any worker
    starts, with one line naming it (password hidden) and exit code 2, instead of workers
    answering every request with a 500 and a traceback. The password given on the command
    line draws a warning first."""
    port = free_port()  # nothing listens there
    db = f"postgresql://postgres:hunter2@127.0.0.1:{port}/test"
    command = [*cli_command(), "serve", "--db", db, "--port", str(free_port()), "--demo"]
    process = await asyncio.create_subprocess_exec(
        *command,
        env=cli_env(tmp_path),
        cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), 30)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 2, (stdout, stderr)
    warning, error = stderr.decode().strip().splitlines()
    # A password on the command line is there for `ps` to show: said, and not repeated.
    assert warning.startswith("pes-agent: warning: the --db URL holds a password"), warning
    assert "PES_AGENT_DB" in warning
    assert error.startswith("pes-agent: error: cannot reach PostgreSQL at postgresql://"), error
    assert f"127.0.0.1:{port}" in error
    assert b"hunter2" not in stdout + stderr
    assert b"Uvicorn running" not in stdout + stderr
