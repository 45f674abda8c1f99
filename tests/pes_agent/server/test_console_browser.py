"""The web console in real headless Chromium (Debian's `chromium`, driven by Playwright).

Each test starts uvicorn on 127.0.0.1 serving an app over the demo agent (the scripted model
of `pes-agent demo`: two parallel get_weather calls, then pick_warmest, then find_events) on
a SQLite file, and uses the console as a person would. Screenshots go to the test's tmp_path;
with `PES_AGENT_SCREENSHOTS=docs/screenshots` they are also written there (the committed ones).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
import uvicorn

from pes_agent import AgentCore, create_agent, tool
from pes_agent.cli import demo
from pes_agent.cli.demo import DEMO_QUERY, demo_model, demo_tools
from pes_agent.providers.base import LLMRequest
from pes_agent.server import create_app
from pes_agent.testing import ScriptedProvider

from ...helpers import free_port

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS_ENV = "PES_AGENT_SCREENSHOTS"
ANSWER_START = "Go to **Lisbon**"
# Generous: the machine is shared and slow; nothing here measures speed.
WAIT_MS = 30_000


def require_chromium() -> None:
    """Skips the test without Debian's chromium or Playwright's client, or fails it in CI."""
    problem = None
    if not CHROMIUM.exists():
        problem = f"{CHROMIUM} is missing (apt-get install chromium)"
    elif not _playwright_installed():
        problem = "Playwright's client is missing (pip install playwright)"
    if problem is not None:
        if os.environ.get("CI"):
            pytest.fail(f"{problem}: CI must run the browser tests", pytrace=False)
        pytest.skip(problem)


def _playwright_installed() -> bool:
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass
class Console:
    """A running server with the console, and a browser page on it."""

    url: str
    agent: AgentCore
    page: Any
    chromium: Chromium


@asynccontextmanager
async def running_server(
    db: Path,
    *,
    tokens: Sequence[str] = (),
    require_approval: list[str] | None = None,
    provider: Any = None,
    tools: Sequence[Any] | None = None,
) -> AsyncIterator[tuple[str, AgentCore]]:
    """uvicorn on a free local port serving an agent on the SQLite file `db`: the demo agent,
    unless given another `provider` and `tools`."""
    agent = create_agent(
        provider=provider or demo_model(),
        tools=list(demo_tools() if tools is None else tools),
        storage=f"sqlite:///{db}",
        require_approval=require_approval,
    )
    async with agent:
        port = free_port()
        config = uvicorn.Config(
            create_app(agent, tokens=list(tokens)),
            host="127.0.0.1",
            port=port,
            log_level="warning",
            # A test that fails with a page still open must not hang on its event stream.
            timeout_graceful_shutdown=5,
        )
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve())
        for _ in range(1000):
            if server.started:
                break
            await asyncio.sleep(0.01)
        try:
            yield f"http://127.0.0.1:{port}", agent
        finally:
            server.should_exit = True
            await task


class CuttableProxy:
    """A TCP proxy on 127.0.0.1 in front of a server, whose `cut()` drops every connection
    open through it (a network outage, as the browser sees one); new ones go through."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.url = ""
        self._open: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._connect, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self._open |= {writer, up_writer}

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except ConnectionError:
                pass
            finally:
                sink.close()
                self._open.discard(sink)

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def cut(self) -> None:
        """Reset every open connection, both ways."""
        for writer in list(self._open):
            writer.transport.abort()
        self._open.clear()

    async def aclose(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


@asynccontextmanager
async def cuttable_proxy(url: str) -> AsyncIterator[CuttableProxy]:
    """A `CuttableProxy` in front of the server at `url` while the block runs."""
    proxy = CuttableProxy(int(url.rsplit(":", 1)[1]))
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.aclose()


# What Chromium logs for an API answer of 4xx: the console handles those (a token prompt, an
# error line), so they are not errors of the page.
HANDLED = "the server responded with a status of 4"


def browser_errors(message: Any) -> list[str]:
    """A console message that is a script error or a refused resource (CSP), if it is one."""
    if message.type == "error" and HANDLED not in message.text:
        return [message.text]
    return []


class Chromium:
    """Headless Chromium: pages opened on a URL, each page's script errors and refused
    resources (CSP) collected in `errors`."""

    def __init__(self, browser: Any) -> None:
        self.browser = browser
        self.errors: list[str] = []
        #: Parts of browser errors a test causes on purpose (a refused request, a lost
        #: connection): those are left out of `unexpected_errors`.
        self.expected: list[str] = []
        self._pages: list[Any] = []

    def unexpected_errors(self) -> list[str]:
        """The errors the pages logged, but those the test expected."""
        return [e for e in self.errors if not any(part in e for part in self.expected)]

    async def open(self, url: str) -> Any:
        """A new page showing `url`."""
        page = await self.browser.new_page(viewport={"width": 1280, "height": 1000})
        self._pages.append(page)
        page.on("pageerror", lambda error: self.errors.append(str(error)))
        page.on("console", lambda message: self.errors.extend(browser_errors(message)))
        await page.goto(url)
        return page

    async def close_pages(self) -> None:
        """Close the pages: their open event streams end, so a server can stop at once."""
        for page in self._pages:
            await page.close()
        self._pages.clear()


@pytest.fixture
async def chromium() -> AsyncIterator[Chromium]:
    """Debian's chromium, headless; the test fails if a page logged a script error or a
    refused resource."""
    require_chromium()
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM))
        opened = Chromium(browser)
        try:
            yield opened
        finally:
            await browser.close()
    assert opened.unexpected_errors() == []


OpenConsole = Callable[..., Awaitable[Console]]


@pytest.fixture
async def open_console(tmp_path: Path, chromium: Chromium) -> AsyncIterator[OpenConsole]:
    """`await open_console(tokens=..., require_approval=...)`: a server and a page showing it."""
    async with AsyncExitStack() as stack:

        async def open_(**server_options: Any) -> Console:
            url, agent = await stack.enter_async_context(
                running_server(tmp_path / "console.db", **server_options)
            )
            # Last in, first out: the pages close before the server stops.
            stack.push_async_callback(chromium.close_pages)
            page = await chromium.open(url + "/")
            return Console(url, agent, page, chromium)

        yield open_


def screenshot_paths(tmp_path: Path, name: str) -> list[Path]:
    """Where a screenshot goes: the test's directory, and the docs' when asked."""
    paths = [tmp_path / "screenshots" / name]
    extra = os.environ.get(SCREENSHOTS_ENV)
    if extra:
        paths.append(Path(extra) / name)
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
    return paths


async def save_screenshot(locator: Any, tmp_path: Path, name: str) -> Path:
    """A PNG of `locator` (painted first: a frame may paint late), in every screenshot place."""
    await locator.scroll_into_view_if_needed()
    await locator.page.evaluate(
        "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"
    )
    paths = screenshot_paths(tmp_path, name)
    data = await locator.screenshot()
    for path in paths:
        path.write_bytes(data)
    assert data.startswith(b"\x89PNG")
    return paths[0]


# Records what the page showed over time, since the assertions are about moments that pass:
# which tool rows were running together, and how long the answer was each time it changed.
RECORDER = """() => {
  window.__seen = {running: [], answer: [], planWhileRunning: false};
  const look = () => {
    const running = [...document.querySelectorAll('tr[data-status="running"]')]
      .map((row) => row.dataset.call).sort().join(",");
    const seen = window.__seen;
    if (running && seen.running[seen.running.length - 1] !== running) seen.running.push(running);
    const answer = document.getElementById("answer");
    const length = answer ? answer.textContent.length : 0;
    if (length && seen.answer[seen.answer.length - 1] !== length) seen.answer.push(length);
    const plan = document.querySelector(".plan:not([hidden])");
    const status = document.getElementById("run-status");
    if (plan && status && status.classList.contains("running")) seen.planWhileRunning = true;
  };
  new MutationObserver(look).observe(document.body, {
    subtree: true, childList: true, characterData: true, attributes: true,
    attributeFilter: ["data-status", "class", "hidden"],
  });
}"""


async def unlabelled_controls(page: Any) -> list[str]:
    """The visible buttons, fields and frames that have no accessible name, and the buttons
    whose name does not contain the text they show (WCAG's "label in name": a person who
    says "click Show trace" to speech input must reach the button that shows it)."""
    found: list[str] = await page.evaluate(
        """() => [...document.querySelectorAll("button, input, textarea, select, iframe")]
          .filter((el) => {
            if (el.closest("[hidden]")) return false;
            const shown = el.textContent.trim();
            const name = el.getAttribute("aria-label") || shown;
            if (el.tagName === "BUTTON") {
              return !name || !name.toLowerCase().includes(shown.toLowerCase());
            }
            if (el.tagName === "IFRAME") return !el.title;
            return el.labels.length === 0;
          }).map((el) => el.outerHTML)"""
    )
    return found


# WCAG's contrast ratio of each visible element's own text against the first opaque
# background behind it (the console's colours are plain rgb ones).
LOW_CONTRAST = """() => {
  const rgb = (text) => {
    const [r, g, b, a = 1] = text.match(/rgba?\\(([^)]+)\\)/)[1].split(/,\\s*/).map(Number);
    return {r, g, b, a};
  };
  const channel = (v) => (v /= 255) <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
  const luminance = (c) => 0.2126 * channel(c.r) + 0.7152 * channel(c.g) + 0.0722 * channel(c.b);
  const behind = (el) => {
    for (let node = el; node; node = node.parentElement) {
      const colour = rgb(getComputedStyle(node).backgroundColor);
      if (colour.a > 0) return colour;
    }
    return {r: 255, g: 255, b: 255, a: 1};
  };
  const low = [];
  for (const el of document.querySelectorAll("body *")) {
    const text = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
    if (!text || el.closest("[hidden]") || el.getClientRects().length === 0) continue;
    const [light, dark] = [luminance(rgb(getComputedStyle(el).color)), luminance(behind(el))]
      .sort((a, b) => b - a);
    const ratio = (light + 0.05) / (dark + 0.05);
    if (ratio < 4.5) low.push(`${el.tagName}.${el.className} ${ratio.toFixed(2)}`);
  }
  return low;
}"""


async def low_contrast_text(page: Any) -> list[str]:
    """Visible text whose contrast with its background is under 4.5:1 (WCAG AA)."""
    found: list[str] = await page.evaluate(LOW_CONTRAST)
    return found


@pytest.fixture
def slow_lookups(monkeypatch: pytest.MonkeyPatch) -> None:
    """The weather lookups take 1.5 s instead of 0.5 s: on a busy machine too, the page has
    time to show them running before they end. Not when making the docs' screenshots, which
    show the demo as `pes-agent serve --demo` runs it."""
    if not os.environ.get(SCREENSHOTS_ENV):
        monkeypatch.setattr(demo, "LOOKUP_SECONDS", 1.5)


async def send_query(page: Any, query: str = DEMO_QUERY) -> None:
    await page.get_by_label("Message", exact=True).fill(query)
    await page.get_by_label("Message", exact=True).press("Enter")


async def wait_for_status(page: Any, status: str) -> None:
    await page.wait_for_selector(f"#run-status .badge.{status}", timeout=WAIT_MS)


async def test_live_run_shows_plan_parallel_calls_and_streaming_answer(
    open_console: OpenConsole, tmp_path: Path, slow_lookups: None
) -> None:
    """Sending a query draws the plan, both weather calls running at once, the answer as it
    streams, then status success with tokens and time."""
    console = await open_console()
    page = console.page
    await page.evaluate(RECORDER)
    await send_query(page)
    await page.wait_for_selector('tr[data-call="call_2"][data-status="running"]', timeout=WAIT_MS)
    await save_screenshot(page.locator("#run"), tmp_path, "console-live-run.png")
    await wait_for_status(page, "success")
    await save_screenshot(page.locator("#run"), tmp_path, "console-run-finished.png")
    seen = await page.evaluate("() => window.__seen")
    assert seen["planWhileRunning"]
    assert "call_1,call_2" in seen["running"], seen["running"]
    answer = await page.locator("#answer").text_content()
    assert answer.startswith(ANSWER_START)
    lengths = seen["answer"]
    assert any(0 < length < len(answer) for length in lengths), lengths
    assert lengths[-1] == len(answer)
    # The demo's plan is its calls alone (the compact protocol): they are the rows, and no
    # list of steps repeats them.
    assert await page.locator(".plan-steps").is_hidden()
    rows = page.locator("tr[data-call]")
    assert await rows.count() == 4
    assert {await row.get_attribute("data-status") for row in await rows.all()} == {"done"}
    # Arguments: the planned placeholders, then the values the call ran with.
    pick = page.locator('tr[data-call="call_3"]')
    assert "{step_1_result}" in await pick.locator(".planned").text_content()
    assert '"celsius":24' in await pick.locator(".args").text_content()
    # The two lookups' bars share the axis and overlap; the pick starts after both end.
    bars = {}
    for call in ("call_1", "call_2", "call_3"):
        bar = page.locator(f'tr[data-call="{call}"] .bar')
        bars[call] = (
            float(await bar.get_attribute("data-start-ms")),
            float(await bar.get_attribute("data-end-ms")),
        )
    (start_1, end_1), (start_2, end_2) = bars["call_1"], bars["call_2"]
    assert max(start_1, start_2) < min(end_1, end_2)
    assert bars["call_3"][0] >= max(end_1, end_2)
    status = await page.locator("#run-status").text_content()
    assert "success" in status
    assert "2 LLM calls · 4 tool calls" in status
    assert " tokens (" in status
    # The thread, its two messages and the run are listed afterwards.
    await page.wait_for_selector("#runs li", timeout=WAIT_MS)
    assert await page.locator("#messages li").count() == 2
    assert await page.locator("#threads button[aria-current=true]").count() == 1


async def test_trace_view_screenshot_shows_a_bar_per_call_overlapping_lookups(
    open_console: OpenConsole, tmp_path: Path
) -> None:
    """A past run's trace opens in a sandboxed frame: a bar per call, the two weather bars
    overlapping on the time axis, and its bars clickable (its script runs under the CSP)."""
    console = await open_console()
    async with httpx.AsyncClient(base_url=console.url, timeout=60) as client:
        done = await client.post("/v1/threads/trip/runs", json={"query": DEMO_QUERY})
    trace_id = done.json()["metadata"]["trace_id"]
    page = console.page
    await page.reload()
    await page.get_by_role("button", name="trip", exact=True).click()
    await page.locator(f'#runs li[data-trace="{trace_id}"] button').click()
    frame_element = page.locator("#trace-frame")
    assert await frame_element.get_attribute("sandbox") == "allow-scripts"
    frame = page.frame_locator("#trace-frame")
    await frame.locator(".bar.tool").nth(3).wait_for(timeout=WAIT_MS)
    shot = await save_screenshot(frame_element, tmp_path, "console-trace.png")
    assert shot.stat().st_size > 10_000
    labels = await frame.locator(".row .label").all_text_contents()
    assert [label for label in labels if "·" in label and label.startswith("call_")] == [
        "call_1 · get_weather",
        "call_2 · get_weather",
        "call_3 · pick_warmest",
        "call_4 · find_events",
    ]
    boxes = {}
    for label in ("call_1 · get_weather", "call_2 · get_weather", "call_3 · pick_warmest"):
        row = frame.locator(".row", has=frame.locator(".label", has_text=label))
        box = await row.locator(".bar").bounding_box()
        assert box is not None, label
        assert box["width"] > 0, label
        boxes[label.split(" ")[0]] = (box["x"], box["x"] + box["width"])
    (left_1, right_1), (left_2, right_2) = boxes["call_1"], boxes["call_2"]
    overlap = min(right_1, right_2) - max(left_1, left_2)
    assert overlap > 0.9 * min(right_1 - left_1, right_2 - left_2)
    assert boxes["call_3"][0] >= max(right_1, right_2) - 1
    await frame.locator(".bar.tool").first.click()
    details = await frame.locator("#details-body").text_content()
    assert '"city": "Lisbon"' in details


async def wait_for_message_back(page: Any) -> None:
    """Until the message box holds text again: a refused send puts its message back once the
    request has ended, a moment after the refusal shows."""
    from playwright.async_api import expect

    # Not wait_for_function with an expression: the console's CSP forbids eval, which
    # Playwright falls back to when the expression is not true at once.
    await expect(page.locator("#query")).not_to_have_value("", timeout=WAIT_MS)


async def test_approval_flow_approve_resumes_the_run(
    open_console: OpenConsole, tmp_path: Path
) -> None:
    """A gated call pauses the run; the console lists it with its arguments, and Approve
    resumes the run until its answer."""
    console = await open_console(require_approval=["find_events"])
    page = console.page
    await send_query(page)
    await wait_for_status(page, "awaiting_approval")
    pending = page.locator('#approvals .pending[data-call="call_4"]')
    await pending.wait_for(timeout=WAIT_MS)
    assert '{"city":"Lisbon"}' in await pending.locator(".args").text_content()
    assert await page.locator('tr[data-call="call_4"]').get_attribute("data-status") == ("approval")
    await save_screenshot(page.locator(".layout"), tmp_path, "console-approval.png")
    assert await unlabelled_controls(page) == []
    assert await low_contrast_text(page) == []
    # The thread takes no new run while one waits: the console says why.
    await send_query(page, "Something else?")
    await page.wait_for_selector("#chat-error:has-text('waiting for approval')", timeout=WAIT_MS)
    # Not sent: the message is back in the box, not in the thread's messages. The box is
    # filled once the refused request has ended, a moment after the error line shows.
    await wait_for_message_back(page)
    assert await page.get_by_label("Message", exact=True).input_value() == "Something else?"
    assert "Something else?" not in await page.locator("#messages").text_content()
    await page.get_by_role("button", name="Approve call_4 find_events").click()
    await wait_for_status(page, "success")
    assert "resumed after approval" in await page.locator(".run-meta").text_content()
    answer = await page.locator("#answer").text_content()
    assert answer.startswith(ANSWER_START)
    assert await page.locator('tr[data-call="call_4"]').get_attribute("data-status") == "done"
    await page.wait_for_selector("#approvals-empty:not([hidden])", timeout=WAIT_MS)
    assert await console.agent.pending_runs() == []


async def test_two_pending_calls_are_decided_together(open_console: OpenConsole) -> None:
    """With both lookups gated, one approval waits for the other decision; a denial with a
    reason then resumes the run: the denied call and those after it are skipped."""
    page = (await open_console(require_approval=["get_weather"])).page
    await send_query(page)
    await wait_for_status(page, "awaiting_approval")
    await page.locator('#approvals .pending[data-call="call_2"]').wait_for(timeout=WAIT_MS)
    await page.get_by_role("button", name="Approve call_1 get_weather").click()
    await page.wait_for_selector("#approvals :text('1 more call to decide')", timeout=WAIT_MS)
    await page.get_by_label("Reason if denied (call_2, optional)").fill("Porto is too far")
    await page.get_by_role("button", name="Deny call_2 get_weather").click()
    await page.wait_for_selector("#run-status .badge:not(.awaiting_approval)", timeout=WAIT_MS)
    statuses = {
        call: await page.locator(f'tr[data-call="{call}"]').get_attribute("data-status")
        for call in ("call_1", "call_2", "call_3", "call_4")
    }
    assert statuses == {
        "call_1": "done",
        "call_2": "skipped",
        "call_3": "skipped",
        "call_4": "skipped",
    }
    denied = await page.locator('tr[data-call="call_2"] .result').text_content()
    assert "Porto is too far" in denied
    assert await page.locator('tr[data-call="call_2"] .status').text_content() == (
        "skipped (denied)"
    )
    assert (await page.locator("#run-status").text_content()).startswith("partial")


async def test_keyboard_only_sends_a_query(open_console: OpenConsole) -> None:
    """Tab reaches the message box (through the skip link), Enter sends, focus is visible;
    every control has a label and all text a contrast of 4.5:1 at least."""
    page = (await open_console()).page
    await page.keyboard.press("Tab")
    focused = await page.evaluate("() => document.activeElement.textContent")
    assert focused == "Skip to the message box"
    await page.keyboard.press("Enter")
    assert await page.evaluate("() => document.activeElement.id") == "query"
    outline = await page.evaluate("() => getComputedStyle(document.activeElement).outlineStyle")
    assert outline != "none"
    await page.keyboard.type(DEMO_QUERY)
    await page.keyboard.press("Enter")
    await wait_for_status(page, "success")
    await page.wait_for_selector("#runs li", timeout=WAIT_MS)
    # Focus comes back to the message box; the next Tab goes to Send.
    assert await page.evaluate("() => document.activeElement.id") == "query"
    await page.keyboard.press("Tab")
    assert await page.evaluate("() => document.activeElement.id") == "send"
    assert await unlabelled_controls(page) == []
    assert await low_contrast_text(page) == []


async def test_token_prompt_when_auth_is_on(open_console: OpenConsole) -> None:
    """A 401 shows a labelled token field; a wrong token is refused, the right one is sent
    as a bearer header (never in a URL) and kept for the tab."""
    console = await open_console(tokens=["s3cret-token"])
    page = console.page
    urls: list[str] = []
    authorizations: set[str | None] = set()

    def on_request(request: Any) -> None:
        urls.append(request.url)
        if "/v1/" in request.url:
            authorizations.add(request.headers.get("authorization"))

    page.on("request", on_request)
    field = page.get_by_label("API token")
    await field.wait_for(timeout=WAIT_MS)
    await field.fill("wrong-token")
    await field.press("Enter")
    await page.wait_for_selector("#connection:has-text('refused')", timeout=WAIT_MS)
    await field.fill("s3cret-token")
    await page.get_by_role("button", name="Use token").click()
    await page.wait_for_selector("#token-form[hidden]", state="attached", timeout=WAIT_MS)
    await send_query(page)
    await wait_for_status(page, "success")
    assert "Bearer s3cret-token" in authorizations
    assert not any("s3cret" in url for url in urls)
    # Kept for the tab under one key (the selected thread has another); never in localStorage.
    stored = await page.evaluate("() => Object.entries(sessionStorage)")
    assert [key for key, value in stored if "s3cret" in value] == ["pes-agent-console-token"]
    assert await page.evaluate("() => localStorage.length") == 0
    await page.reload()
    await page.wait_for_selector("#threads button", timeout=WAIT_MS)
    assert await page.locator("#token-form").is_hidden()


@asynccontextmanager
async def run_watched_through_a_proxy(
    console: Console,
) -> AsyncIterator[tuple[CuttableProxy, Any, asyncio.Task[httpx.Response]]]:
    """The console loaded through a proxy that can cut its connections, following the thread
    "shared", on which another client has just started the demo run (the task answers it)."""
    console.chromium.expected.append(CONNECTION_LOST)
    async with (
        cuttable_proxy(console.url) as proxy,
        httpx.AsyncClient(base_url=console.url, timeout=60) as client,
    ):
        await console.page.goto(proxy.url + "/")
        page = await watch_thread(console, client, "shared")
        other = asyncio.create_task(
            client.post("/v1/threads/shared/runs", json={"query": DEMO_QUERY})
        )
        yield proxy, page, other


async def watch_thread(console: Console, client: httpx.AsyncClient, thread: str) -> Any:
    """The console's page on `thread` (made by a first run of `client`), once it follows the
    thread's live feed, with RECORDER noting what it shows."""
    await client.post(f"/v1/threads/{thread}/runs", json={"query": "first"})
    page = console.page
    await page.reload()
    await page.get_by_role("button", name=thread, exact=True).click()
    await page.wait_for_selector("#runs li", timeout=WAIT_MS)
    # Once the console is subscribed to the thread's feed, a run is seen from its start.
    await page.wait_for_selector("#live:not([hidden])", timeout=WAIT_MS)
    await page.evaluate(RECORDER)
    return page


async def test_a_run_from_another_client_is_shown_live(
    open_console: OpenConsole, slow_lookups: None
) -> None:
    """With a thread selected, a run another client starts on it is drawn from the live feed."""
    console = await open_console()
    async with httpx.AsyncClient(base_url=console.url, timeout=60) as client:
        page = await watch_thread(console, client, "shared")
        other = await client.post("/v1/threads/shared/runs", json={"query": DEMO_QUERY})
    assert other.json()["metadata"]["status"] == "success"
    await wait_for_status(page, "success")
    meta = await page.locator(".run-meta").text_content()
    assert "started by another client" in meta
    assert other.json()["metadata"]["trace_id"] in meta
    seen = await page.evaluate("() => window.__seen")
    assert "call_1,call_2" in seen["running"], seen["running"]
    assert (await page.locator("#answer").text_content()).startswith(ANSWER_START)
    status = await page.locator("#run-status").text_content()
    assert "4 tool calls" in status


async def test_a_watched_run_that_is_cancelled_ends_cancelled(
    open_console: OpenConsole, slow_lookups: None
) -> None:
    """A run of another client cancelled while its lookups run ends in the console as
    cancelled (it records no final response), and the past runs list it as ended."""
    console = await open_console()
    async with httpx.AsyncClient(base_url=console.url, timeout=60) as client:
        page = await watch_thread(console, client, "shared")
        body = {"query": DEMO_QUERY, "trace_id": "run-to-cancel"}
        other = asyncio.create_task(client.post("/v1/threads/shared/runs", json=body))
        running = 'tr[data-call="call_2"][data-status="running"]'
        await page.wait_for_selector(running, timeout=WAIT_MS)
        cancelled = await client.post("/v1/runs/run-to-cancel/cancel")
        assert cancelled.status_code == 200, cancelled.text
        assert (await other).json()["metadata"]["status"] == "cancelled"
    await wait_for_status(page, "cancelled")
    assert "cancelled" in await page.locator("#run .errors").text_content()
    assert await page.locator('tr[data-status="running"]').count() == 0
    # Listed again once it ended (the runs list calls a cancelled run's timeline "error").
    listed = page.locator('#runs li[data-trace="run-to-cancel"] .badge:not(.running)')
    await listed.wait_for(timeout=WAIT_MS)


async def test_a_watched_run_pauses_for_approval_and_resumes_when_another_client_decides(
    open_console: OpenConsole,
) -> None:
    """A run of another client that pauses for approval shows as awaiting approval, with its
    pending call listed for a decision; approved by that client, it goes on in the same view
    until its answer."""
    console = await open_console()
    async with httpx.AsyncClient(base_url=console.url, timeout=60) as client:
        page = await watch_thread(console, client, "shared")
        gated = {"require_approval": ["find_events"]}
        paused = await client.post(
            "/v1/threads/shared/runs", json={"query": DEMO_QUERY, "options": gated}
        )
        assert paused.json()["metadata"]["status"] == "awaiting_approval"
        trace_id = paused.json()["metadata"]["trace_id"]
        await wait_for_status(page, "awaiting_approval")
        await page.locator('#approvals .pending[data-call="call_4"]').wait_for(timeout=WAIT_MS)
        assert await page.locator('tr[data-call="call_4"]').get_attribute("data-status") == (
            "approval"
        )
        decisions = {"decisions": {"call_4": {"approve": True}}}
        done = await client.post(f"/v1/threads/shared/runs/{trace_id}/decisions", json=decisions)
        assert done.json()["metadata"]["status"] == "success"
    await wait_for_status(page, "success")
    assert trace_id in await page.locator(".run-meta").text_content()
    assert (await page.locator("#answer").text_content()).startswith(ANSWER_START)
    assert await page.locator('tr[data-call="call_4"]').get_attribute("data-status") == "done"
    assert await page.locator("tr[data-call]").count() == 4
    await page.wait_for_selector("#approvals-empty:not([hidden])", timeout=WAIT_MS)


# What Chromium logs for a request whose connection was reset.
CONNECTION_LOST = "net::ERR_"


async def test_a_run_whose_connection_drops_is_followed_again(
    open_console: OpenConsole, slow_lookups: None
) -> None:
    """The connection of a run sent from the page drops while its lookups run: the console
    says so, follows the run again from the last event it got, and draws it to its answer,
    each call once."""
    console = await open_console()
    console.chromium.expected.append(CONNECTION_LOST)
    async with cuttable_proxy(console.url) as proxy:
        page = console.page
        await page.goto(proxy.url + "/")
        await send_query(page)
        await page.wait_for_selector(
            'tr[data-call="call_2"][data-status="running"]', timeout=WAIT_MS
        )
        proxy.cut()
        await wait_for_status(page, "success")
        assert (await page.locator("#answer").text_content()).startswith(ANSWER_START)
        rows = page.locator("tr[data-call]")
        assert await rows.count() == 4
        assert {await row.get_attribute("data-status") for row in await rows.all()} == {"done"}
        assert await page.locator("#run .errors li").count() == 0
        assert await page.locator("#chat-error").text_content() == ""
        assert "2 LLM calls · 4 tool calls" in await page.locator("#run-status").text_content()


async def test_the_thread_feed_resumes_where_it_broke_off(
    open_console: OpenConsole, slow_lookups: None
) -> None:
    """The thread feed's connection drops while another client's run goes on: the console
    follows the feed again from the last observation it got (Last-Event-ID), so the calls
    that ended meanwhile show as done, and the answer is the one the run saved."""
    async with run_watched_through_a_proxy(await open_console()) as (proxy, page, other):
        await page.wait_for_selector(
            'tr[data-call="call_2"][data-status="running"]', timeout=WAIT_MS
        )
        proxy.cut()
        assert (await other).json()["metadata"]["status"] == "success"
        await wait_for_status(page, "success")
        rows = page.locator("tr[data-call]")
        assert await rows.count() == 4
        assert {await row.get_attribute("data-status") for row in await rows.all()} == {"done"}
        assert (await page.locator("#answer").text_content()).startswith(ANSWER_START)
        await page.wait_for_selector("#live:not([hidden]):not(.error)", timeout=WAIT_MS)


async def test_a_thread_feed_that_fails_says_so_and_recovers(open_console: OpenConsole) -> None:
    """A thread feed the server refuses (503) is not dropped in silence: the live line says
    that live updates stopped and why; once the server answers again the feed is followed."""
    console = await open_console()
    console.chromium.expected.append("status of 503")
    async with httpx.AsyncClient(base_url=console.url, timeout=60) as client:
        await client.post("/v1/threads/shared/runs", json={"query": "first"})
    page = console.page
    refusal = '{"error": {"type": "busy", "message": "the store is busy"}}'

    async def refuse(route: Any) -> None:
        await route.fulfill(status=503, content_type="application/json", body=refusal)

    await page.route("**/v1/threads/shared/events", refuse)
    await page.reload()
    await page.get_by_role("button", name="shared", exact=True).click()
    live = page.locator("#live")
    await page.wait_for_selector("#live.error:not([hidden])", timeout=WAIT_MS)
    assert "the store is busy" in await live.text_content()
    assert await live.get_attribute("role") == "status"
    await page.unroute("**/v1/threads/shared/events")
    await page.wait_for_selector("#live:not(.error):not([hidden])", timeout=WAIT_MS)
    assert "Following this thread live" in await live.text_content()


async def test_a_reloaded_page_shows_the_run_still_going(
    open_console: OpenConsole, slow_lookups: None
) -> None:
    """Reloaded while its run goes on, the page comes back to the thread and follows the run
    from its start: plan, calls, answer and status."""
    page = (await open_console()).page
    await send_query(page)
    await page.wait_for_selector('tr[data-call="call_2"][data-status="running"]', timeout=WAIT_MS)
    title = await page.locator("#thread-title").text_content()
    await page.reload()
    await wait_for_status(page, "success")
    assert await page.locator("#thread-title").text_content() == title
    assert await page.locator(".plan-steps li").count() == 0
    rows = page.locator("tr[data-call]")
    assert await rows.count() == 4
    assert {await row.get_attribute("data-status") for row in await rows.all()} == {"done"}
    assert (await page.locator("#answer").text_content()).startswith(ANSWER_START)


# Model, tool and user text that would add elements (and run script) if put in as HTML.
MARKUP = (
    "<img src=x id=xss-img onerror='window.__xss=1'><b id=xss-b>bold</b>"
    "<script>window.__xss=2</script>"
)
INJECTED = "() => document.querySelectorAll('#xss-img, #xss-b').length + (window.__xss || 0)"


def markup_model(request: LLMRequest) -> str:
    """Plans one `echo` of MARKUP (title, intent and step in markup too); answers in markup."""
    if request.phase == "planning":
        call = {"callId": "call_1", "toolName": "echo", "arguments": {"text": MARKUP}}
        plan = {"title": MARKUP, "intent": MARKUP, "plan": "1. " + MARKUP, "toolCalls": [call]}
        return json.dumps(plan)
    return "Here it is: " + MARKUP


@tool
async def echo(text: str) -> str:
    """Give the text back."""
    return text


async def test_model_tool_and_user_text_is_shown_as_text_never_as_html(
    open_console: OpenConsole,
) -> None:
    """Markup in the query, the plan, a paused call's arguments, the tool's result and the
    answer shows as the text it is, in the run view, the approval card, the messages, the
    past runs and the trace: no element is added, no script runs."""
    console = await open_console(
        provider=ScriptedProvider([markup_model] * 10, chunk_size=7),
        tools=[echo],
        require_approval=["echo"],
    )
    page = console.page
    await send_query(page, "Echo this: " + MARKUP)
    await wait_for_status(page, "awaiting_approval")
    pending = page.locator('#approvals .pending[data-call="call_1"]')
    await pending.wait_for(timeout=WAIT_MS)
    assert MARKUP in await pending.locator(".args").text_content()
    assert MARKUP in await page.locator(".approval").text_content()
    await page.get_by_role("button", name="Approve call_1 echo").click()
    await wait_for_status(page, "success")
    await page.wait_for_selector("#messages li.ai", timeout=WAIT_MS)
    assert await page.locator(".plan-title").text_content() == MARKUP
    assert MARKUP in await page.locator(".intent").text_content()
    assert await page.locator(".plan-steps li").text_content() == MARKUP
    assert MARKUP in await page.locator('tr[data-call="call_1"] .result').text_content()
    assert await page.locator("#answer").text_content() == "Here it is: " + MARKUP
    assert MARKUP in await page.locator("#messages li.user").text_content()
    assert MARKUP in await page.locator("#messages li.ai").text_content()
    await page.locator("#runs li button").click()
    frame = page.frame_locator("#trace-frame")
    await frame.locator(".bar.tool").first.wait_for(timeout=WAIT_MS)
    assert MARKUP in await frame.locator(".qa").text_content()
    assert await frame.locator("#xss-img, #xss-b").count() == 0
    assert await page.evaluate(INJECTED) == 0


async def test_deciding_by_keyboard_keeps_focus_in_the_run(open_console: OpenConsole) -> None:
    """Approve pressed with the keyboard takes its card away: focus moves to the resumed
    run's status (not lost to the page), and the next Tab goes on from there."""
    page = (await open_console(require_approval=["find_events"])).page
    await send_query(page)
    await wait_for_status(page, "awaiting_approval")
    approve = page.get_by_role("button", name="Approve call_4 find_events")
    await approve.focus()
    await page.keyboard.press("Enter")
    focused = "() => document.activeElement.closest('#run') !== null"
    assert await page.evaluate(focused)
    await wait_for_status(page, "success")
    assert await page.evaluate("() => document.activeElement.id") == "run-status"
    await page.keyboard.press("Tab")
    assert await page.evaluate("() => document.activeElement.tagName") != "BODY"


async def test_a_token_refused_mid_session_keeps_the_message(open_console: OpenConsole) -> None:
    """When the server stops taking the tab's token (it was changed), sending asks for a new
    one: the run view says why nothing ran, the message stays in the box, and with the new
    token Enter sends it."""
    console = await open_console(tokens=["s3cret-token"])
    page = console.page
    field = page.get_by_label("API token")
    await field.wait_for(timeout=WAIT_MS)
    await field.fill("s3cret-token")
    await field.press("Enter")
    await page.wait_for_selector("#token-form[hidden]", state="attached", timeout=WAIT_MS)
    await page.evaluate("() => sessionStorage.setItem('pes-agent-console-token', 'old-token')")
    await send_query(page, "Still there?")
    await page.wait_for_selector("#connection:has-text('refused')", timeout=WAIT_MS)
    await wait_for_status(page, "error")
    assert "asks for an API token" in await page.locator("#run .errors").text_content()
    box = page.get_by_label("Message", exact=True)
    await wait_for_message_back(page)
    assert await box.input_value() == "Still there?"
    assert "Still there?" not in await page.locator("#messages").text_content()
    await field.fill("s3cret-token")
    await field.press("Enter")
    await page.wait_for_selector("#token-form[hidden]", state="attached", timeout=WAIT_MS)
    await box.press("Enter")
    await wait_for_status(page, "success")
    await page.wait_for_selector("#messages li.ai", timeout=WAIT_MS)
    assert "Still there?" in await page.locator("#messages li.user").text_content()


async def test_picking_another_thread_leaves_no_watched_run_frozen(
    open_console: OpenConsole, slow_lookups: None
) -> None:
    """A run of another client watched on one thread is taken off the screen when another
    thread is picked (its feed closes, so it would stay 'running' for ever)."""
    console = await open_console()
    async with httpx.AsyncClient(base_url=console.url, timeout=60) as client:
        await client.post("/v1/threads/elsewhere/runs", json={"query": "first"})
        page = await watch_thread(console, client, "shared")
        other = asyncio.create_task(
            client.post("/v1/threads/shared/runs", json={"query": DEMO_QUERY})
        )
        running = 'tr[data-call="call_2"][data-status="running"]'
        await page.wait_for_selector(running, timeout=WAIT_MS)
        await page.get_by_role("button", name="elsewhere", exact=True).click()
        await page.wait_for_selector("#run", state="hidden", timeout=WAIT_MS)
        assert (await other).json()["metadata"]["status"] == "success"
    assert await page.locator("#run").is_hidden()


async def test_an_answer_cut_short_by_a_lost_feed_shows_as_saved(
    open_console: OpenConsole,
) -> None:
    """The thread feed drops while another client's run streams its answer (tokens are not
    replayed): once the run ends, the console shows the answer as the run saved it, whole."""
    async with run_watched_through_a_proxy(await open_console()) as (proxy, page, other):
        streaming = """() => document.getElementById("answer")?.textContent.length > 0
            && document.getElementById("run-status").classList.contains("running")"""
        await page.wait_for_function(streaming, timeout=WAIT_MS, polling=10)
        proxy.cut()
        done = (await other).json()
        await wait_for_status(page, "success")
    assert await page.locator("#answer").text_content() == done["response"]["content"]
