"""Every Python snippet in README.md runs as written, against the loopback model server."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path

import pytest

from tests.pes_agent.providers.model_server import ModelServer, RecordedRequest, Reply

README = Path(__file__).resolve().parents[1] / "README.md"
SNIPPETS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)

# The README's quickstart tools, and calls the scripted model plans for them.
KNOWN_CALLS = {
    "get_weather": {"city": "Paris"},
    "calculator": {"expression": "12 * 7"},
}


def _respond(request: RecordedRequest) -> Reply:
    """Plan a call to every known tool the prompt lists, as the structured plan schema asks;
    answer the synthesis plainly."""
    prompt = json.dumps(request.body)
    if "# Tools" not in prompt:
        return Reply("Sunny in Paris, and 12 * 7 = 84.")
    calls = [
        {"tool": name, "args": json.dumps(arguments), "after": []}
        for name, arguments in KNOWN_CALLS.items()
        if f"{name}(" in prompt
    ]
    return Reply(json.dumps({"calls": calls, "intent": "answer"}))


def test_readme_has_python_snippets() -> None:
    """The README shows code (else the parametrised test below would run nothing)."""
    assert SNIPPETS


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[f"snippet-{i}" for i in range(len(SNIPPETS))])
async def test_readme_snippet_runs(snippet: str, tmp_path: Path) -> None:
    """The snippet exits 0 against a wire-compatible OpenAI server, with no traceback."""
    script = tmp_path / "snippet.py"
    script.write_text(snippet, encoding="utf-8")
    async with ModelServer(default=_respond) as server:
        env = {
            **os.environ,
            "OPENAI_API_KEY": "sk-readme-test",
            "OPENAI_BASE_URL": server.openai_base_url,
            # For the snippets that name both vendors (fallbacks): the server speaks both.
            "ANTHROPIC_API_KEY": "sk-ant-readme-test",
            "ANTHROPIC_BASE_URL": server.anthropic_base_url,
        }
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(script),
            cwd=tmp_path,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, err.decode()[-3000:]
    assert b"Traceback" not in err
    if "process(" in snippet:
        assert server.requests, "the snippet's agent should have called the model"
        assert b"84" in out
