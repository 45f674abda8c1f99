"""`pes-agent trace --html`: a self-contained, escaped HTML timeline of one run."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from pes_agent import Observation, ObservationType
from pes_agent.cli.trace import build_timeline, embed_json, render_html
from tests.pes_agent.providers.helpers import API_KEY
from tests.pes_agent.providers.model_server import ModelServer, Reply

from .conftest import DemoStore
from .helpers import cli_env, lines, run_cli, run_cli_async


class _Page(HTMLParser):
    """Collects the embedded trace data, the script elements and every URL-bearing attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.data_text: str | None = None
        self.scripts: list[dict[str, str | None]] = []
        self.urls: list[str] = []
        self.bars: list[dict[str, str | None]] = []
        self._in_data = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "script":
            self.scripts.append(attributes)
            self._in_data = attributes.get("id") == "trace-data"
            if self._in_data:
                self.data_text = ""
        for name in ("src", "href"):
            if attributes.get(name):
                self.urls.append(str(attributes[name]))
        if "bar" in (attributes.get("class") or "").split():
            self.bars.append(attributes)

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_data = False

    def handle_data(self, data: str) -> None:
        if self._in_data and self.data_text is not None:
            self.data_text += data


def _parse(path: Path) -> tuple[_Page, dict[str, Any], str]:
    text = path.read_text(encoding="utf-8")
    page = _Page()
    page.feed(text)
    assert page.data_text is not None, "no <script id=trace-data>"
    return page, json.loads(page.data_text), text


@pytest.mark.slow
def test_trace_of_the_demo_has_every_tool_call_with_its_timing(
    demo_store: DemoStore, tmp_path: Path
) -> None:
    """The latest demo run's timeline holds its two LLM calls and four tool calls, each with a
    start and an end, the two lookups overlapping in time."""
    out = tmp_path / "trace.html"
    result = run_cli(
        "trace", "demo", "--html", str(out), "--db", str(demo_store.db), env=demo_store.env
    )
    assert result.code == 0, result.stderr
    assert f"wrote {out}" in result.stdout
    page, data, _ = _parse(out)
    observations = run_cli(
        "observations", "demo", "--json", "--db", str(demo_store.db), env=demo_store.env
    ).json()
    assert data["trace_id"] == observations[-1]["trace_id"], "the latest run by default"
    assert data["status"] == "success"
    tools = {span["call_id"]: span for span in data["spans"] if span["kind"] == "tool"}
    assert sorted(tools) == ["call_1", "call_2", "call_3", "call_4"]
    for span in tools.values():
        assert span["status"] == "success"
        assert 0 <= span["start_ms"] < span["end_ms"] <= data["duration_ms"]
        assert span["details"]["arguments"] is not None
        assert "output" in span["details"]
    one, two = tools["call_1"], tools["call_2"]
    assert one["start_ms"] < two["end_ms"]
    assert two["start_ms"] < one["end_ms"]
    assert tools["call_3"]["start_ms"] >= max(one["end_ms"], two["end_ms"])
    assert tools["call_3"]["details"]["arguments"]["forecasts"][0]["city"] == "Lisbon"
    llm = [span for span in data["spans"] if span["kind"] == "llm"]
    assert [span["name"] for span in llm] == ["planning", "synthesis"]
    assert llm[0]["details"]["usage"]["output_tokens"] > 0
    assert llm[0]["details"]["thoughts"]
    assert data["query"].startswith("Lisbon or Porto")
    assert data["answer"].startswith("Go to **Lisbon**")
    assert len(page.bars) == len(data["spans"])
    assert {bar["data-span"] for bar in page.bars} == {span["id"] for span in data["spans"]}


@pytest.mark.slow
def test_trace_html_has_no_external_assets(demo_store: DemoStore, tmp_path: Path) -> None:
    """The page loads nothing from anywhere: no src/href URLs, no http(s):// at all."""
    out = tmp_path / "trace.html"
    assert (
        run_cli(
            "trace", "demo", "--html", str(out), "--db", str(demo_store.db), env=demo_store.env
        ).code
        == 0
    )
    page, _, text = _parse(out)
    assert page.urls == []
    assert not re.search(r"https?://", text)
    assert "@import" not in text
    assert [script.get("src") for script in page.scripts] == [None, None]


@pytest.mark.slow
def test_trace_id_picks_an_earlier_run_by_prefix(demo_store: DemoStore, tmp_path: Path) -> None:
    """`--trace-id` with the start of an id draws that run, not the latest."""
    observations = run_cli(
        "observations", "demo", "--json", "--db", str(demo_store.db), env=demo_store.env
    ).json()
    first = observations[0]["trace_id"]
    assert first != observations[-1]["trace_id"]
    out = tmp_path / "first.html"
    result = run_cli(
        "trace",
        "demo",
        "--trace-id",
        first[:10],
        "--html",
        str(out),
        "--db",
        str(demo_store.db),
        env=demo_store.env,
    )
    assert result.code == 0, result.stderr
    assert _parse(out)[1]["trace_id"] == first


@pytest.mark.slow
def test_unknown_trace_id_is_an_error(demo_store: DemoStore, tmp_path: Path) -> None:
    """A trace id the thread does not have is a one-line error, exit 2, no file written."""
    out = tmp_path / "none.html"
    result = run_cli(
        "trace",
        "demo",
        "--trace-id",
        "zzz",
        "--html",
        str(out),
        "--db",
        str(demo_store.db),
        env=demo_store.env,
    )
    assert result.code == 2
    [line] = lines(result.stderr)
    assert "no run with trace id 'zzz'" in line
    assert not out.exists()


@pytest.mark.slow
async def test_model_and_tool_text_is_escaped_in_the_page(
    model_server: ModelServer, tmp_path: Path
) -> None:
    """Markup in the query, the model's answer and a tool's output is shown as text: it never
    becomes an element of the page (or rich markup in the terminal), and the embedded JSON
    gives it back unchanged."""
    evil = "</script><script>alert(1)</script><img src=x onerror=alert(2)>"
    plan = {
        "intent": "<b>bold</b> intent",
        "plan": "1. echo",
        "toolCalls": [{"callId": "c1", "toolName": "raw_html", "arguments": {"text": evil}}],
    }
    model_server.script(Reply(json.dumps(plan)), Reply(f"Answer: {evil} & done"))
    db = tmp_path / "run.db"
    env = cli_env(tmp_path, OPENAI_API_KEY=API_KEY, OPENAI_BASE_URL=model_server.openai_base_url)
    run = await run_cli_async(
        "run",
        f"Echo [red]{evil}",
        "-p",
        "openai:test-model",
        "--tools",
        "tests.pes_agent.cli.cli_tools:raw_html",
        "--thread",
        "evil",
        "--db",
        str(db),
        env=env,
    )
    assert run.code == 0, run.stderr
    out = tmp_path / "evil.html"
    result = await run_cli_async("trace", "evil", "--html", str(out), "--db", str(db), env=env)
    assert result.code == 0, result.stderr
    page, data, text = _parse(out)
    assert len(page.scripts) == 2, "only the data and the page's own script"
    assert "<script>alert" not in text
    assert "<img" not in text
    assert "<b>bold" not in text
    assert page.urls == []
    assert data["answer"] == f"Answer: {evil} & done"
    assert data["query"] == f"Echo [red]{evil}"
    [tool] = [span for span in data["spans"] if span["kind"] == "tool"]
    assert tool["details"]["output"] == evil
    assert "&lt;/script&gt;&lt;script&gt;alert(1)" in text, "visible, escaped, in the page"
    threads = await run_cli_async("threads", "--db", str(db), env=env)
    assert "Echo [red]</script>" in threads.stdout, "shown as text, not read as rich markup"


def _observation(
    kind: ObservationType, at_ms: float, content: dict[str, Any], **fields: Any
) -> Observation:
    start = datetime(2025, 1, 1, tzinfo=UTC)
    return Observation(
        thread_id="t",
        trace_id=fields.pop("trace_id", "r1"),
        timestamp=start + timedelta(milliseconds=at_ms),
        type=kind,
        title=kind.value,
        content=content,
        **fields,
    )


def test_a_retried_stream_and_a_skipped_call_are_drawn() -> None:
    """An interrupted LLM stream is a `retried` span followed by a new one; a call that never
    started (its dependency failed) still gets a span, ending when it was skipped."""
    llm = {"phase": "planning", "provider": "openai", "model": "m"}
    started = _observation(
        ObservationType.TOOL_CALL, 40, {"callId": "a", "toolName": "t", "arguments": {}}
    )
    observations = [
        _observation(ObservationType.LLM_STREAM_START, 0, llm),
        _observation(ObservationType.LLM_STREAM_ERROR, 10, {**llm, "retrying": True, "error": "x"}),
        _observation(ObservationType.LLM_STREAM_START, 11, llm),
        _observation(ObservationType.LLM_STREAM_END, 30, llm),
        started,
        _observation(
            ObservationType.TOOL_EXECUTION,
            60,
            {"callId": "a", "toolName": "t", "status": "error", "error": "boom", "durationMs": 20},
            parent_id=started.id,
        ),
        _observation(
            ObservationType.TOOL_EXECUTION,
            61,
            {"callId": "b", "toolName": "t", "status": "error", "error": "a failed"},
        ),
        _observation(ObservationType.LLM_STREAM_START, 0, llm, trace_id="other-run"),
    ]
    timeline = build_timeline(observations, "r1")
    shapes = [(s.kind, s.status, s.start_ms, s.end_ms) for s in timeline.spans]
    assert shapes == [
        ("llm", "retried", 0, 10),
        ("llm", "success", 11, 30),
        ("tool", "error", 40, 60),
        ("tool", "error", 61, 61),
    ]
    assert timeline.spans[3].details["started"] is False
    page = render_html(timeline)
    assert page.count('class="bar ') == 4


def test_embedded_json_cannot_close_the_script_element() -> None:
    """`embed_json` writes <, > and & as JSON escapes, which parse back to the same text."""
    value = {"text": "</script><!-- & -->"}
    embedded = embed_json(value)
    assert "<" not in embedded
    assert ">" not in embedded
    assert "&" not in embedded
    assert json.loads(embedded) == value
