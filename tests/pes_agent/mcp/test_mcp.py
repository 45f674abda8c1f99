"""MCP servers as tools: real SDK servers over stdio and streamable HTTP, crashes, no orphans."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections import deque
from pathlib import Path
from typing import Any

import pytest

from pes_agent import AgentProps, ObservationType, ToolSourceError, create_agent, tool
from pes_agent.mcp import MCPServer
from pes_agent.testing import ScriptedProvider

from .conftest import CALC_SERVER, alive, call, plan_json, wait_gone

pytestmark = pytest.mark.slow


@tool
def double(x: int) -> int:
    """Double an integer."""
    return 2 * x


def calc(*extra: str, **options: Any) -> MCPServer:
    return MCPServer.stdio(sys.executable, CALC_SERVER, *extra, name="calc", **options)


async def results(agent: Any, thread_id: str) -> dict[str, dict[str, Any]]:
    """Each call's TOOL_EXECUTION content by call id, for the runs on `thread_id`."""
    found = await agent.observations.get_observations(
        thread_id, types=[ObservationType.TOOL_EXECUTION]
    )
    return {o.content["callId"]: o.content for o in found}


_QUEUES: dict[int, deque[str]] = {}


def scripted(*responses: str) -> ScriptedProvider:
    """A scripted model answering `responses`, then whatever `run` queues for it."""
    queue = deque(responses)
    model = ScriptedProvider([lambda request: queue.popleft()], repeat=True)
    _QUEUES[id(model)] = queue
    return model


async def run(agent: Any, thread_id: str, *calls: dict[str, Any]) -> Any:
    """One run on `thread_id` whose plan is `calls`."""
    _QUEUES[id(agent._parts.provider)].extend([plan_json(*calls), "done"])
    return await agent.process(AgentProps("go", thread_id))


async def test_stdio_plan_chains_results_between_mcp_and_local_tools() -> None:
    """An MCP result feeds a local tool whose result feeds the MCP server again."""
    model = scripted(
        plan_json(
            call(1, "add", a=2, b=3),
            call(2, "double", x="{step_1_result}"),
            call(3, "multiply", a="{step_2_result}", b=10),
        ),
        "done",
    )
    async with create_agent(provider=model, tools=[double, calc()]) as agent:
        schema = next(s for s in agent.tools.schemas() if s.name == "add")
        assert schema.input_schema["required"] == ["a", "b"]
        response = await agent.process(AgentProps("go", "t"))
        done = await results(agent, "t")
    assert response.metadata.status == "success", response.metadata.error
    assert [done[f"call_{n}"]["output"] for n in (1, 2, 3)] == [5, 10, 100]


async def test_http_server_tools_run_in_a_plan(http_url: str) -> None:
    """Tools of a streamable-HTTP server are listed on the first run and called."""
    server = MCPServer.http(http_url, headers={"Authorization": "Bearer secret-token"})
    assert "secret-token" not in repr(server)
    model = scripted(
        plan_json(call(1, "add", a=40, b=2), call(2, "double", x="{step_1_result}")), "done"
    )
    agent = create_agent(provider=model, tools=[double, server])
    try:
        response = await agent.process(AgentProps("go", "t"))
        done = await results(agent, "t")
    finally:
        await agent.aclose()
    assert response.metadata.status == "success", response.metadata.error
    assert done["call_2"]["output"] == 84


async def test_tool_error_is_an_error_result_naming_the_server() -> None:
    """A tool's isError result becomes an error result with the server's name and message."""
    model = scripted(plan_json(call(1, "divide", a=1, b=0)), "done")
    async with create_agent(provider=model, tools=[calc()]) as agent:
        response = await agent.process(AgentProps("go", "t"))
        done = await results(agent, "t")
    assert response.metadata.status == "partial"
    assert "'calc'" in done["call_1"]["error"]
    assert "division by zero" in done["call_1"]["error"]


async def test_clashing_names_are_prefixed_with_the_server_name(http_url: str) -> None:
    """A name taken twice is `<server>__<tool>` for every server; a local tool keeps its own."""

    @tool
    def add(a: int, b: int) -> int:
        """Add locally (off by one on purpose)."""
        return a + b + 1

    model = scripted(
        plan_json(call(1, "add", a=1, b=1), call(2, "calc__add", a=1, b=1)),
        "done",
    )
    remote = MCPServer.http(http_url, name="remote")
    async with create_agent(provider=model, tools=[add, calc(), remote]) as agent:
        names = set(agent.tools.names)
        response = await agent.process(AgentProps("go", "t"))
        done = await results(agent, "t")
    assert {"add", "calc__add", "remote__add", "calc__multiply", "remote__multiply"} <= names
    assert "multiply" not in names
    assert response.metadata.status == "success", response.metadata.error
    assert (done["call_1"]["output"], done["call_2"]["output"]) == (3, 2)


async def test_killed_server_gives_an_error_result_then_the_next_run_restarts_it() -> None:
    """SIGKILL of the server mid-call fails that call naming the server; the next run works."""
    async with create_agent(provider=scripted(), tools=[calc()]) as agent:
        await run(agent, "a", call(1, "pids"))
        first = (await results(agent, "a"))["call_1"]["output"]

        async def kill_soon() -> None:
            await asyncio.sleep(0.5)
            os.kill(first["pid"], signal.SIGKILL)

        killer = asyncio.create_task(kill_soon())
        crashed = await run(agent, "b", call(1, "nap", seconds=20))
        await killer
        error = (await results(agent, "b"))["call_1"]["error"]
        recovered = await run(agent, "c", call(1, "pids"))
        second = (await results(agent, "c"))["call_1"]["output"]
    assert crashed.metadata.status == "partial"
    assert "'calc'" in error
    assert "crashed" in error
    assert recovered.metadata.status == "success"
    assert second["pid"] != first["pid"]
    assert wait_gone([first["pid"], first["parent"], second["pid"], second["parent"]], 5) == []


async def test_restarts_are_bounded_then_calls_say_the_server_keeps_crashing() -> None:
    """Past `max_restarts` in the window, a call fails at once saying the server keeps crashing."""
    async with create_agent(provider=scripted(), tools=[calc(max_restarts=1)]) as agent:
        for thread in ("a", "b"):
            await run(agent, thread, call(1, "pids"))
            pid = (await results(agent, thread))["call_1"]["output"]["pid"]
            os.kill(pid, signal.SIGKILL)
            assert wait_gone([pid], 5) == []
            await asyncio.sleep(0.3)  # the connection notices the closed pipe
        response = await run(agent, "c", call(1, "pids"))
        error = (await results(agent, "c"))["call_1"]["error"]
    assert response.metadata.status == "partial"
    assert "keeps crashing" in error
    assert "'calc'" in error


async def test_no_server_process_remains_after_aclose() -> None:
    """aclose() stops the server and its guard before it returns."""
    agent = create_agent(provider=scripted(), tools=[calc()])
    await run(agent, "t", call(1, "pids"))
    pids = (await results(agent, "t"))["call_1"]["output"]
    assert alive(pids["pid"])
    assert alive(pids["parent"])
    await agent.aclose()
    assert wait_gone([pids["pid"], pids["parent"]], 0.5) == []


async def test_cancelled_connect_leaves_no_server_process(tmp_path: Path) -> None:
    """Cancelling a run while a slow server starts stops that server."""
    pid_file = tmp_path / "pid"
    server = calc("--slow", "30", "--pid-file", str(pid_file))
    agent = create_agent(provider=scripted(plan_json(), "done"), tools=[server])
    task = asyncio.create_task(agent.process(AgentProps("go", "t")))
    for _ in range(200):
        if pid_file.exists() and pid_file.read_text():
            break
        await asyncio.sleep(0.05)
    pid = int(pid_file.read_text())
    assert alive(pid)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert wait_gone([pid], 1.0) == []
    await agent.aclose()


async def test_connect_timeout_is_an_error_run_and_leaves_no_server_process(
    tmp_path: Path,
) -> None:
    """A server that does not answer in time fails the run naming it, and is stopped."""
    pid_file = tmp_path / "pid"
    server = calc("--slow", "30", "--pid-file", str(pid_file), connect_timeout_s=2)
    async with create_agent(provider=scripted(), tools=[double]) as agent:
        agent.tools.add(server)
        response = await agent.process(AgentProps("go", "t"))
        pid = int(pid_file.read_text())
        assert wait_gone([pid], 1.0) == []
    assert response.metadata.status == "error"
    assert "'calc'" in (response.metadata.error or "")
    assert "did not answer within 2 s" in (response.metadata.error or "")


async def test_a_server_that_cannot_start_fails_async_with_naming_it() -> None:
    """`async with agent` raises ToolSourceError naming a server whose command is missing."""
    server = MCPServer.stdio("pes-no-such-command-here", name="ghost")
    with pytest.raises(ToolSourceError, match=r"'ghost'.*not found"):
        async with create_agent(provider=scripted(), tools=[server]):
            pass


WORKER = textwrap.dedent(
    """
    import asyncio, json, sys
    from pes_agent.mcp import MCPServer

    async def main():
        server = MCPServer.stdio(sys.executable, sys.argv[1], "--stubborn", name="calc")
        async with server.connect() as connection:
            pids = next(t for t in connection.tools if t.schema.name == "pids")
            print(json.dumps(await pids.execute({}, None)), flush=True)
            await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


def test_server_stops_within_5_s_of_sigkill_of_the_process_that_owned_it() -> None:
    """When the agent's process is SIGKILLed, its stdio server (and guard) are gone in 5 s,
    even a server that does not exit when its stdin closes."""
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, CALC_SERVER],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout is not None
        line = worker.stdout.readline()
        pids = json.loads(line)
        assert alive(pids["pid"])
        assert pids["parent"] != worker.pid
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        if worker.stdout is not None:
            worker.stdout.close()
    assert wait_gone([pids["pid"], pids["parent"]], 5.0) == []
