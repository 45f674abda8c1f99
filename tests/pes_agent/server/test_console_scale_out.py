"""The web console of one `pes-agent serve` process showing runs that another one executes.

Two real serve processes share one PostgreSQL schema (issue 16 item 3: "a browser connected
to worker A sees a run executing on worker B live"). Their model is the wire-compatible model
server of the scale-out tests, their tool a slow weather lookup imported with `--tools`, so a
run lasts long enough to be watched while it goes on.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx2 as httpx
import pytest

from tests.pes_agent.providers.model_server import ModelServer, RecordedRequest, Reply
from tests.pes_agent.storage.conftest import POSTGRES_URL

from .test_console_browser import RECORDER, WAIT_MS, Chromium, chromium, wait_for_status
from .test_scale_out import _text, model_server, pg_schema, serve

__all__ = ["chromium", "model_server", "pg_schema"]  # the fixtures, for the tests below

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

LOOKUP_SECONDS = 2.0
TOOLS_MODULE = f'''
import asyncio

from pes_agent.tools import tool


@tool
async def slow_weather(city: str) -> dict:
    """Today's weather in Lisbon or Porto, slowly."""
    await asyncio.sleep({LOOKUP_SECONDS})
    return {{"city": city, "celsius": {{"Lisbon": 24, "Porto": 19}}[city]}}


TOOLS = [slow_weather]
'''
WEATHER_QUERY = "Lisbon or Porto, which is warmer?"
ANSWER = "Lisbon is warmer: 24 °C against 19 °C in Porto."


def weather_model(request: RecordedRequest) -> Reply:
    """Plans both lookups side by side for the weather query (no call for any other), then
    streams the answer."""
    messages = request.body["messages"]
    if "# Tools" in _text(messages[0]):  # the planning prompt
        calls = []
        if WEATHER_QUERY in _text(messages[-1]):
            calls = [
                {"callId": f"call_{n}", "toolName": "slow_weather", "arguments": {"city": city}}
                for n, city in enumerate(("Lisbon", "Porto"), start=1)
            ]
        plan = {"title": "Warmer city", "intent": "compare", "plan": "1. look up both"}
        return Reply(json.dumps({**plan, "toolCalls": calls}))
    return Reply(ANSWER, chunk_chars=4, chunk_delay_s=0.02)


async def test_console_on_worker_a_draws_a_run_executing_on_worker_b(
    chromium: Chromium, model_server: ModelServer, pg_schema: str, tmp_path: Path
) -> None:
    """A console open on worker A follows a thread; a run a client starts on worker B (another
    process) is drawn on A while it runs (its plan, both lookups running side by side), then
    its answer and status when it ends."""
    model_server.default = weather_model
    (tmp_path / "slowtools.py").write_text(TOOLS_MODULE)
    db = f"{POSTGRES_URL}?schema={pg_schema}"
    tools = ("--tools", "slowtools:TOOLS")
    async with (
        serve(2, db, model_server, tmp_path, *tools) as (worker_a, worker_b),
        httpx.AsyncClient(base_url=worker_b.url, timeout=120) as b,
    ):
        first = await b.post("/v1/threads/trip/runs", json={"query": "hello"})
        assert first.status_code == 200, first.text
        try:
            page = await chromium.open(worker_a.url + "/")
            await page.get_by_role("button", name="trip", exact=True).click()
            await page.wait_for_selector("#runs li", timeout=WAIT_MS)
            await page.wait_for_selector("#live:not([hidden])", timeout=WAIT_MS)
            await page.evaluate(RECORDER)

            on_b = asyncio.create_task(
                b.post("/v1/threads/trip/runs", json={"query": WEATHER_QUERY})
            )
            running = 'tr[data-call="call_2"][data-status="running"]'
            await page.wait_for_selector(running, timeout=WAIT_MS)
            assert not on_b.done(), "A drew the lookups only after B's run ended"
            done = await on_b
            assert done.status_code == 200, done.text
            trace_id = done.json()["metadata"]["trace_id"]
            await wait_for_status(page, "success")

            seen = await page.evaluate("() => window.__seen")
            assert seen["planWhileRunning"]
            assert "call_1,call_2" in seen["running"], seen["running"]
            meta = await page.locator(".run-meta").text_content()
            assert trace_id in meta
            assert "started by another client" in meta
            assert await page.locator(".plan-title").text_content() == "Warmer city"
            rows = page.locator("tr[data-call]")
            assert await rows.count() == 2
            assert {await row.get_attribute("data-status") for row in await rows.all()} == {"done"}
            lisbon = await page.locator('tr[data-call="call_1"] .result').text_content()
            assert '"celsius":24' in lisbon
            # Tokens stay on the worker executing the run: A shows the answer the run saved.
            assert await page.locator("#answer").text_content() == ANSWER
            status = await page.locator("#run-status").text_content()
            assert "2 LLM calls · 2 tool calls" in status
            await page.wait_for_selector(f'#runs li[data-trace="{trace_id}"]', timeout=WAIT_MS)
            assert await page.locator("#messages li").count() == 4
        finally:
            await chromium.close_pages()
