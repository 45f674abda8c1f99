"""`pes-agent serve`: uvicorn worker processes serving the demo agent on a SQLite file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx2 as httpx
import pytest

from pes_agent.cli.errors import CLIError
from pes_agent.cli.serve import SERVE_ENV_VAR, app_from_env

from .test_sse_uvicorn import free_port


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
