"""AG-UI's published JS client (`@ag-ui/client` from the npm registry, run by Node) against
POST /v1/agui: it takes a whole run, and an approval interrupt answered by its resume entries.

`.ci/run` installs the client (`npm ci` in tests/js/agui); elsewhere run that once. Missing
Node or the package fails the test rather than skipping it: a skipped client test proves
nothing."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

from .conftest import ANSWER, LOOP

pytestmark = LOOP

CLIENT = Path(__file__).resolve().parents[2] / "js" / "agui"


async def run_client(base_url: str, thread_id: str, query: str, *flags: str) -> dict[str, Any]:
    """What `run_agent.mjs` reports of its runs on `thread_id` (`--approve`: resume too)."""
    node = shutil.which("node")
    assert node is not None, "Node is needed for AG-UI's JS client (apt-get install nodejs)"
    assert (CLIENT / "node_modules" / "@ag-ui" / "client").is_dir(), (
        f"AG-UI's JS client is not installed: npm ci --prefix {CLIENT}"
    )
    command = await asyncio.create_subprocess_exec(
        node,
        str(CLIENT / "run_agent.mjs"),
        f"{base_url}/v1/agui",
        "alice-token",
        thread_id,
        query,
        *flags,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(command.communicate(), timeout=60)
    assert command.returncode == 0, err.decode()[-3000:]
    report: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return report


async def test_the_js_client_receives_a_whole_run(base_url: str) -> None:
    """The client's own verifier accepts the stream; its messages end with the tool calls,
    their results and the answer, as the run made them."""
    report = await run_client(base_url, "js-whole", "nap twice")
    (run,) = report["runs"]
    assert run["events"][0] == "RUN_STARTED"
    assert run["events"][-1] == "RUN_FINISHED"
    assert run["result"]["status"] == "success"
    messages = report["messages"]
    calls = [m for m in messages if m["role"] == "assistant" and m.get("toolCalls")]
    assert [call["toolCalls"][0]["function"]["name"] for call in calls] == ["nap", "nap"]
    results = [m["content"] for m in messages if m["role"] == "tool"]
    assert results == ["rested 0.3", "rested 0.3"]
    assert messages[-1] == {"id": messages[-1]["id"], "role": "assistant", "content": ANSWER}


async def test_the_js_client_resumes_an_interrupted_run(base_url: str) -> None:
    """The first run ends on the client's `pendingInterrupts`; resuming with them approved
    runs the paid call and answers."""
    report = await run_client(base_url, "js-approve", "pay please", "--approve")
    first, second = report["runs"]
    (interrupt,) = first["interrupts"]
    assert interrupt["reason"] == "tool_approval"
    assert interrupt["responseSchema"]["required"] == ["approved"]
    assert second["interrupts"] == []
    assert second["result"]["status"] == "success"
    tool = [m for m in report["messages"] if m["role"] == "tool"]
    assert tool == [
        {
            "id": tool[0]["id"],
            "toolCallId": interrupt["toolCallId"],
            "role": "tool",
            "content": "paid 5",
        }
    ]
