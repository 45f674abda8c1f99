"""The agent as an MCP server over real transports, with the protocol's own clients: the `mcp`
SDK's client over stdio (`pes-agent mcp-serve --demo`) and over streamable HTTP (`serve()` in
a server process on 127.0.0.1), and the MCP Inspector's CLI (npm, run by Node) over both.

.ci/run installs the Inspector (`npm ci` in tests/pes_agent/mcp/inspector); without it (or
without Node) its tests skip, except in CI, where they fail.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from pes_agent.cli.demo import DEMO_QUERY

from ...helpers import free_port
from .test_server import answer_of, error_text

pytestmark = pytest.mark.slow

AGENT_SERVER = str(Path(__file__).resolve().parent / "servers" / "agent_server.py")
INSPECTOR = Path(__file__).resolve().parent / "inspector"
CLI = [sys.executable, "-m", "pes_agent.cli", "mcp-serve"]


def child_env() -> dict[str, str]:
    """What a server process needs beyond the SDK's few variables: this checkout's path."""
    path = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": path} if path else {}


def wait_listening(process: subprocess.Popen[bytes], port: int) -> None:
    """Wait until `process` accepts connections on 127.0.0.1:`port`."""
    deadline = time.monotonic() + 30
    while True:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the MCP server did not start (exit code {process.poll()})")
        time.sleep(0.05)


@contextmanager
def echo_server(**env: str) -> Iterator[str]:
    """The tests' echo agent served by `pes_agent.mcp.serve` over streamable HTTP (with `env`
    added to the server's environment); its URL."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, AGENT_SERVER, str(port)], env={**os.environ, **child_env(), **env}
    )
    try:
        wait_listening(process, port)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait()


@pytest.fixture
def echo_url() -> Iterator[str]:
    """The echo agent's MCP endpoint, without auth."""
    with echo_server() as url:
        yield url


async def test_stdio_serves_the_demo_agent_with_its_threads(tmp_path: Path) -> None:
    """Over stdio, `mcp-serve --demo` lists ask, answers twice on one thread, keeps both turns
    in the thread's resource, and answers a bad argument with a tool error."""
    server = StdioServerParameters(
        command=CLI[0], args=[*CLI[1:], "--demo", "--db", str(tmp_path / "a.db")], env=child_env()
    )
    async with Client(server) as client:
        [ask] = (await client.list_tools()).tools
        first = answer_of(await client.call_tool("ask", {"query": DEMO_QUERY}))
        second = answer_of(
            await client.call_tool("ask", {"query": "And on Sunday?", "thread_id": first.thread_id})
        )
        bad = error_text(await client.call_tool("ask", {"question": "?"}))
        [template] = (await client.list_resource_templates()).resource_templates
        [resource] = (await client.list_resources()).resources
        [contents] = (await client.read_resource(resource.uri)).contents
    assert ask.name == "ask"
    assert ask.input_schema["required"] == ["query"]
    assert (first.status, second.status) == ("success", "success")
    assert "Lisbon" in first.answer
    assert second.thread_id == first.thread_id
    assert "query: Field required" in bad
    assert template.uri_template == "pes-agent://threads/{thread_id}"
    assert resource.name == first.thread_id
    history = json.loads(contents.text)  # type: ignore[union-attr]
    users = [m["content"] for m in history["messages"] if m["role"] == "USER"]
    assert users == [DEMO_QUERY, "And on Sunday?"]
    assert len(history["messages"]) == 4


async def test_streamable_http_shares_a_thread_between_calls(echo_url: str) -> None:
    """Over streamable HTTP, the second ask on a thread is planned with the first turn (the
    echo model answers with the user turns it saw), and its history reads back."""
    async with Client(echo_url) as client:
        [ask] = (await client.list_tools()).tools
        first = answer_of(await client.call_tool("ask", {"query": "my name is Ada"}))
        second = answer_of(
            await client.call_tool(
                "ask", {"query": "what is my name?", "thread_id": first.thread_id}
            )
        )
        bad = error_text(await client.call_tool("ask", {"query": ["not", "a", "string"]}))
        [contents] = (await client.read_resource(f"pes-agent://threads/{first.thread_id}")).contents
    assert ask.input_schema["properties"]["query"]["type"] == "string"
    assert first.answer == "heard: my name is Ada"
    assert second.answer == "heard: my name is Ada | what is my name?"
    assert "query: Input should be a valid string" in bad
    history = json.loads(contents.text)  # type: ignore[union-attr]
    assert [m["content"] for m in history["messages"]][::2] == [
        "my name is Ada",
        "what is my name?",
    ]


async def test_streamable_http_takes_the_api_token_from_the_environment() -> None:
    """With PES_AGENT_API_TOKEN set, a request without the token is a 401 asking for a bearer
    token, and the SDK's client sending it is served."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    with echo_server(PES_AGENT_API_TOKEN="s3cret") as url:
        async with httpx2.AsyncClient() as http:
            refused = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        headers = {"Authorization": "Bearer s3cret"}
        async with (
            httpx2.AsyncClient(headers=headers) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            [ask] = (await client.list_tools()).tools
            answered = answer_of(await client.call_tool("ask", {"query": "hello"}))
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"] == "Bearer"
    assert refused.json()["error"]["type"] == "unauthorized"
    assert ask.name == "ask"
    assert answered.answer == "heard: hello"


def inspector() -> list[str]:
    """The command that runs the MCP Inspector (its launcher, by Node); skips the test
    without it, or fails it in CI."""
    node = shutil.which("node")
    package = INSPECTOR / "node_modules" / "@modelcontextprotocol" / "inspector"
    problem = None
    if node is None:
        problem = "Node is missing (the Inspector runs on it)"
    elif not (package / "package.json").exists():
        problem = f"the MCP Inspector is not installed: npm ci --prefix {INSPECTOR}"
    if problem is not None:
        # Never skipped: `.ci/run` installs it, and a checkout runs the same command once.
        pytest.fail(f"{problem} (.ci/run does this)", pytrace=False)
    assert node is not None
    launcher = json.loads((package / "package.json").read_text())["bin"]["mcp-inspector"]
    return [node, str(package / launcher), "--cli"]


def run_inspector(arguments: list[str], home: Path) -> dict[str, object]:
    """Run the Inspector's CLI with `arguments`; its JSON answer."""
    env = {
        **os.environ,
        # The Inspector keeps a catalog of servers in the home folder: not the user's.
        "HOME": str(home),
        "MCP_CATALOG_PATH": str(home / "mcp.json"),
    }
    done = subprocess.run(
        [*inspector(), *arguments], env=env, capture_output=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    answer: dict[str, object] = json.loads(done.stdout)
    return answer


def test_inspector_lists_ask_over_stdio(tmp_path: Path) -> None:
    """The MCP Inspector's CLI starts `mcp-serve --demo` and lists ask with its schema."""
    environment = [part for item in child_env().items() for part in ("-e", "=".join(item))]
    server = [*CLI, "--demo", "--db", str(tmp_path / "a.db")]
    answer = run_inspector([*environment, *server, "--method", "tools/list"], tmp_path)
    [ask] = answer["tools"]  # type: ignore[misc]
    assert ask["name"] == "ask"
    assert ask["inputSchema"]["required"] == ["query"]
    assert set(ask["inputSchema"]["properties"]) == {"query", "thread_id"}


def test_inspector_calls_ask_over_streamable_http(tmp_path: Path) -> None:
    """`mcp-serve --transport streamable-http` serves the Inspector's calls: the tool list, an
    ask, the thread's resource; it then stops on SIGTERM with exit code 0."""
    port = free_port()
    options = ["--transport", "streamable-http", "--port", str(port)]
    process = subprocess.Popen(
        [*CLI, "--demo", "--db", str(tmp_path / "a.db"), *options],
        env={**os.environ, **child_env()},
        stderr=subprocess.PIPE,
    )
    try:
        wait_listening(process, port)
        url = f"http://127.0.0.1:{port}/mcp"
        listed = run_inspector([url, "--method", "tools/list"], tmp_path)
        called = run_inspector(
            [url, "--method", "tools/call", "--tool-name", "ask", "--tool-arg", "query=hello"],
            tmp_path,
        )
        thread_id = called["structuredContent"]["thread_id"]  # type: ignore[index]
        uri = f"pes-agent://threads/{thread_id}"
        read = run_inspector([url, "--method", "resources/read", "--uri", uri], tmp_path)
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    assert [tool["name"] for tool in listed["tools"]] == ["ask"]  # type: ignore[attr-defined]
    assert called["isError"] is False
    assert called["structuredContent"]["status"] == "success"  # type: ignore[index]
    history = json.loads(read["contents"][0]["text"])  # type: ignore[index]
    assert history["messages"][0]["content"] == "hello"
    assert process.returncode == 0, stderr.decode()[-3000:]
    assert f"http://127.0.0.1:{port}/mcp" in stderr.decode()


def test_stdio_writes_only_protocol_to_stdout_and_stops_on_sigterm(tmp_path: Path) -> None:
    """`mcp-serve` over stdio answers on stdout with JSON-RPC alone, and SIGTERM stops it with
    exit code 0."""
    process = subprocess.Popen(
        [*CLI, "--demo", "--db", str(tmp_path / "a.db")],
        env={**os.environ, **child_env()},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
    try:
        process.stdin.write(json.dumps(initialize).encode() + b"\n")
        process.stdin.flush()
        answer = json.loads(process.stdout.readline())
    finally:
        process.send_signal(signal.SIGTERM)
        rest, stderr = process.communicate(timeout=30)
    assert answer["id"] == 1
    assert answer["result"]["serverInfo"]["name"] == "pes-agent"
    assert rest == b""
    assert process.returncode == 0, stderr.decode()[-3000:]
