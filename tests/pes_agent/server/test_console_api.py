"""The console's endpoints over httpx's ASGI transport: runs, traces, and the page itself."""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

from pes_agent.observing.timeline import script_csp_source
from pes_agent.server.console import CONSOLE_FILES

from .conftest import ClientFactory
from .test_runs_control import start_napping_run


async def run(client: Any, thread: str, query: str = "hello") -> Any:
    response = await client.post(f"/v1/threads/{thread}/runs", json={"query": query})
    assert response.status_code == 200
    return response.json()


async def test_runs_lists_each_run_of_the_thread_oldest_first(client_for: ClientFactory) -> None:
    """GET .../runs gives every run's trace id, status, start, duration, query and counts."""
    client = client_for("admin-token")
    first = await run(client, "t1", "first question")
    second = await run(client, "t1", "second question")
    await run(client, "other", "not this thread")
    response = await client.get("/v1/threads/t1/runs")
    assert response.status_code == 200
    runs = response.json()["runs"]
    assert [r["trace_id"] for r in runs] == [
        first["metadata"]["trace_id"],
        second["metadata"]["trace_id"],
    ]
    assert [r["query"] for r in runs] == ["first question", "second question"]
    assert {r["status"] for r in runs} == {"success"}
    assert runs[0]["started_at"] <= runs[1]["started_at"]
    assert all(r["duration_ms"] > 0 for r in runs)
    assert (runs[0]["llm_calls"], runs[0]["tool_calls"]) == (2, 1)


async def test_a_paused_run_is_listed_as_awaiting_approval(client_for: ClientFactory) -> None:
    """A run waiting for a person's decision shows that status in the run list."""
    client = client_for("admin-token")
    paused = await run(client, "p", "pay please")
    runs = (await client.get("/v1/threads/p/runs")).json()["runs"]
    assert [(r["trace_id"], r["status"], r["query"]) for r in runs] == [
        (paused["metadata"]["trace_id"], "awaiting_approval", "pay please")
    ]


async def test_runs_of_an_unknown_thread_is_an_empty_list(client_for: ClientFactory) -> None:
    """An unscoped caller asking about a thread with no runs gets none."""
    response = await client_for("admin-token").get("/v1/threads/nothing/runs")
    assert response.json() == {"runs": []}


async def test_trace_is_the_runs_html_timeline(client_for: ClientFactory) -> None:
    """GET .../runs/{trace_id}/trace is the HTML page `pes-agent trace` writes, sandboxed."""
    client = client_for("admin-token")
    trace_id = (await run(client, "t1", "look <b>this</b> up"))["metadata"]["trace_id"]
    response = await client.get(f"/v1/threads/t1/runs/{trace_id}/trace")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    page = response.text
    assert page.startswith("<!DOCTYPE html>")
    assert trace_id in page
    assert "call_1 · look" in page
    assert "look &lt;b&gt;this&lt;/b&gt; up" in page
    assert "<b>this</b>" not in page
    policy = response.headers["content-security-policy"]
    assert policy.startswith("sandbox allow-scripts;")
    assert "allow-same-origin" not in policy
    assert script_csp_source() in policy


async def test_trace_of_a_run_not_on_that_thread_is_404(client_for: ClientFactory) -> None:
    """Unknown trace ids, and runs of another thread, are 404 run_not_found."""
    client = client_for("admin-token")
    trace_id = (await run(client, "t1"))["metadata"]["trace_id"]
    for path in ["/v1/threads/t1/runs/nope/trace", f"/v1/threads/t2/runs/{trace_id}/trace"]:
        response = await client.get(path)
        assert response.status_code == 404, path
        assert response.json()["error"]["type"] == "run_not_found"


async def test_runs_and_traces_need_a_token_and_stay_with_their_user(
    client_for: ClientFactory,
) -> None:
    """Without a token both are 401; another user's thread looks absent (404), unread."""
    alice = client_for("alice-token")
    trace_id = (await run(alice, "a1", "alice's secret"))["metadata"]["trace_id"]
    paths = ["/v1/threads/a1/runs", f"/v1/threads/a1/runs/{trace_id}/trace"]
    for path in paths:
        assert (await client_for().get(path)).status_code == 401
        refused = await client_for("bob-token").get(path)
        assert refused.status_code == 404, path
        assert "secret" not in refused.text
        assert (await alice.get(path)).status_code == 200


async def test_openapi_describes_runs_and_trace(client_for: ClientFactory) -> None:
    """The OpenAPI document lists the run list and the trace page with their schemas."""
    document = (await client_for().get("/openapi.json")).json()
    runs = document["paths"]["/v1/threads/{thread_id}/runs"]
    assert {"get", "post"} <= set(runs)
    listed = runs["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert listed == {"$ref": "#/components/schemas/RunList"}
    assert {"RunList", "RunSummary"} <= set(document["components"]["schemas"])
    trace = document["paths"]["/v1/threads/{thread_id}/runs/{trace_id}/trace"]["get"]
    assert "text/html" in trace["responses"]["200"]["content"]


async def test_console_page_is_served_at_root_without_a_token(client_for: ClientFactory) -> None:
    """GET / is the console (static: its data needs the token), under a strict policy."""
    response = await client_for().get("/")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    page = response.text
    assert '<script type="module" src="/console/console.js"></script>' in page
    # No inline script in the console itself: every <script> has a src.
    assert re.findall(r"<script(?![^>]*\ssrc=)[^>]*>", page) == []
    header = response.headers["content-security-policy"]
    policy = dict(part.strip().split(" ", 1) for part in header.split(";"))
    assert policy["default-src"] == "'self'"
    # Only this origin's scripts, and the trace page's one inline script by its hash.
    assert policy["script-src"] == f"'self' {script_csp_source()}"
    assert policy["connect-src"] == "'self'"
    assert policy["frame-ancestors"] == "'none'"
    assert response.headers["x-content-type-options"] == "nosniff"


async def test_console_files_are_served_with_their_types(client_for: ClientFactory) -> None:
    """Each console file is served under /console/ with its media type; others are 404."""
    client = client_for()
    for name, media_type in CONSOLE_FILES.items():
        if name == "index.html":
            continue
        response = await client.get(f"/console/{name}")
        assert response.status_code == 200, name
        assert response.headers["content-type"] == media_type
        assert response.content
    for name in ["index.html", "nope.js", "..%2Fapp.py"]:
        missing = await client.get(f"/console/{name}")
        assert missing.status_code == 404, name
        assert missing.json()["error"]["type"] == "not_found"


async def test_console_can_be_turned_off(client_for: ClientFactory) -> None:
    """create_app(console=False) serves the API only."""
    client = client_for(console=False)
    assert (await client.get("/")).status_code == 404
    assert (await client.get("/console/console.js")).status_code == 404


def test_console_files_ship_inside_the_package() -> None:
    """The files are package data, read through importlib.resources (so they are in the wheel)."""
    folder = resources.files("pes_agent.server").joinpath("console")
    shipped = {item.name for item in folder.iterdir() if item.is_file()}
    assert set(CONSOLE_FILES) <= shipped
    for name in CONSOLE_FILES:
        assert folder.joinpath(name).read_text(encoding="utf-8").strip()


def test_console_scripts_never_insert_html() -> None:
    """The console puts model and tool text in the page as text: no HTML sinks, no eval."""
    folder = resources.files("pes_agent.server").joinpath("console")
    sinks = re.compile(
        r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|Function\("
    )
    for name in CONSOLE_FILES:
        if name.endswith(".js"):
            source = folder.joinpath(name).read_text(encoding="utf-8")
            assert not sinks.search(source), name
            assert "textContent" in source or name == "api.js"


async def test_a_cancelled_run_is_listed_and_traced_as_cancelled(client_for: ClientFactory) -> None:
    """A run cancelled through the API is `cancelled` in the run list and its trace, not `error`."""
    client = client_for("admin-token")
    running = await start_napping_run(client, "tr-c")
    assert (await client.post("/v1/runs/tr-c/cancel")).status_code == 200
    assert (await running).json()["metadata"]["status"] == "cancelled"
    runs = (await client.get("/v1/threads/t/runs")).json()["runs"]
    assert [(r["trace_id"], r["status"]) for r in runs] == [("tr-c", "cancelled")]
    page = (await client.get("/v1/threads/t/runs/tr-c/trace")).text
    assert '<span class="badge cancelled">cancelled</span>' in page
