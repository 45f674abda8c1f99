// console.js — the console page: threads, messages, the chat box, the live run view, runs
// waiting for approval, past runs and their traces, and the token prompt.
//
// What happens when:
//   page load                  -> threads and approvals listed (a 401 shows the token prompt);
//                                 the thread picked before a reload of this tab picked again
//   a thread is picked         -> its messages and runs listed; its live feed followed; a run
//                                 still going there followed from its start
//   Send (or Enter)            -> POST .../runs as an event stream, drawn by a RunView
//   an event on the live feed  -> a run of another client, drawn by a RunView
//   Approve / Deny             -> POST .../decisions as an event stream; the resumed run drawn
//   Show trace                 -> the run's HTML trace in a sandboxed iframe
//   a run ends                 -> messages, runs, threads and approvals listed again
//   a connection drops         -> a run's stream is followed again from its last event (GET
//                                 /v1/runs/{trace_id}/events), the thread feed from its last
//                                 observation (Last-Event-ID); the live line says what failed

import * as api from "./api.js";
import { compactJson, createRunView, el, formatDuration } from "./runview.js";

const $ = (id) => document.getElementById(id);

// The selected thread, kept for this tab so that a reload comes back to it (session storage,
// like the token; it is not secret).
const THREAD_KEY = "pes-agent-console-thread";
// Waits before following a dropped stream again, one per attempt in a row.
const RETRY_MS = [500, 1000, 2000, 4000, 8000, 15000, 30000];
const FOLLOWING =
  "Following this thread live: runs other clients start here show below as they happen.";

const sleep = (ms) => new Promise((done) => setTimeout(done, ms));

const state = {
  thread: null, // the selected thread id (it exists on the server once a run started on it)
  view: null, // the RunView on screen
  ownTraces: new Set(), // runs this page streams itself (sent, resumed, attached): feed skips them
  feed: null, // the AbortController of the followed thread feed
  following: null, // the thread whose feed is open
  sending: false,
};

// -- errors and the token prompt ------------------------------------------------------------

/** Run `work`; a 401 shows the token prompt, any other failure the error line. */
async function guarded(work, where = $("chat-error")) {
  try {
    return await work();
  } catch (error) {
    if (error instanceof api.Unauthorized) {
      askForToken();
    } else if (error.name !== "AbortError") {
      where.textContent = error.message;
    }
    return undefined;
  }
}

/** The server wants a token: show the labelled field (and say so if one was refused). */
function askForToken() {
  const refused = api.getToken() !== "";
  $("connection").textContent = refused
    ? "The server refused the token: enter another one."
    : "This server needs an API token.";
  $("token-form").hidden = false;
  $("forget-token").hidden = !refused;
  $("token").focus();
}

function onTokenSubmit(event) {
  event.preventDefault();
  const input = $("token");
  api.setToken(input.value.trim());
  input.value = "";
  $("token-form").hidden = true;
  $("connection").textContent = "";
  $("forget-token").hidden = !api.getToken();
  refreshAll().then(() => {
    if (state.thread) {
      follow(state.thread);
    } else {
      restoreThread();
    }
  });
}

function onForgetToken() {
  api.setToken("");
  $("forget-token").hidden = true;
  refreshAll();
}

// -- threads and messages ---------------------------------------------------------------

/** The thread list, the selected thread marked (aria-current). */
async function loadThreads() {
  const { threads } = await api.getJson("/v1/threads");
  $("connection").textContent = "";
  $("forget-token").hidden = !api.getToken();
  const list = $("threads");
  list.replaceChildren(
    ...threads.map((id) => {
      const props = { type: "button", className: "thread", dataset: { thread: id } };
      const button = el("button", props, id);
      if (id === state.thread) {
        button.setAttribute("aria-current", "true");
      }
      button.addEventListener("click", () => selectThread(id));
      return el("li", {}, button);
    }),
  );
  $("threads-empty").hidden = threads.length > 0;
}

/** Show thread `id`: its messages and runs, and follow its live feed. */
function selectThread(id, { fresh = false } = {}) {
  state.thread = id;
  sessionStorage.setItem(THREAD_KEY, id);
  $("thread-title").textContent = fresh ? `New thread (${id})` : `Thread ${id}`;
  for (const button of $("threads").querySelectorAll("button")) {
    if (button.dataset.thread === id) {
      button.setAttribute("aria-current", "true");
    } else {
      button.removeAttribute("aria-current");
    }
  }
  $("trace").hidden = true;
  const view = state.view;
  if (view && view.threadId !== id && view.source === "feed" && !view.ended) {
    // Its thread's feed closes now: left on screen, the run would look stuck.
    $("run").hidden = true;
    state.view = null;
  }
  $("messages").replaceChildren();
  $("runs").replaceChildren();
  $("runs-empty").hidden = false;
  if (!fresh) {
    guarded(loadMessages);
    guarded(loadRuns);
  }
  follow(id);
}

/** A new thread id (the thread is created by its first run). */
function newThread() {
  const id = "thread-" + api.newId().slice(0, 8);
  selectThread(id, { fresh: true });
  $("query").focus();
}

/** The selected thread's messages, oldest first. */
async function loadMessages() {
  if (!state.thread) {
    return;
  }
  const thread = state.thread;
  const { messages } = await api.getJson(api.path("/v1/threads", thread, "messages"));
  if (thread !== state.thread) {
    return;
  }
  $("messages").replaceChildren(...messages.map((m) => messageItem(m.role, m.content)));
}

/** One message: who wrote it and its text. */
function messageItem(role, content) {
  const who = { USER: "You", AI: "Agent", SYSTEM: "System", TOOL: "Tool" }[role] || role;
  return el(
    "li",
    { className: "msg " + role.toLowerCase() },
    el("span", { className: "role" }, who),
    el("div", { className: "content" }, content),
  );
}

// -- the live feed of the selected thread ---------------------------------------------------------

/** The live line under the thread title: following, or why not (`error`); null hides it. */
function setLive(text, error = false) {
  const live = $("live");
  live.hidden = text === null;
  live.textContent = text || "";
  live.classList.toggle("error", error);
  live.classList.toggle("muted", !error);
}

/**
 * Follow GET /v1/threads/{id}/events: runs other clients start there are drawn live. A feed
 * that drops or fails is followed again, from the last observation it sent (Last-Event-ID),
 * so that nothing recorded meanwhile is missed; the live line says what went wrong.
 */
function follow(thread) {
  if (state.feed) {
    state.feed.abort();
  }
  const feed = new AbortController();
  state.feed = feed;
  state.following = thread;
  setLive(null);
  const current = () => state.feed === feed && !feed.signal.aborted;
  let lastId = null;
  let failures = 0;
  const onEvent = (name, data, id) => {
    if (id) {
      lastId = id; // an observation's id (or, on `subscribed`, the one the feed goes on after)
    }
    if (name === "subscribed") {
      failures = 0;
      setLive(FOLLOWING); // from now on nothing recorded on the thread is missed
    }
    onFeedEvent(name, data);
  };
  const read = async () => {
    let problem = "the server closed it";
    try {
      await api.stream(api.path("/v1/threads", thread, "events"), {
        signal: feed.signal,
        lastEventId: lastId,
        onEvent,
      });
    } catch (error) {
      if (error.name === "AbortError" || !current()) {
        return; // another thread was picked
      }
      if (error instanceof api.Unauthorized) {
        setLive(null);
        askForToken(); // a token given follows the thread again
        return;
      }
      if (error instanceof api.ApiError && error.status === 404) {
        // Not there yet: its first run creates it, and afterRun follows it then.
        state.following = null;
        setLive(null);
        return;
      }
      problem = error.message;
    }
    if (!current()) {
      return;
    }
    const delay = RETRY_MS[Math.min(failures, RETRY_MS.length - 1)];
    failures += 1;
    setLive(`Live updates stopped: ${problem}. Trying again in ${delay / 1000} s.`, true);
    setTimeout(() => current() && read(), delay);
  };
  read();
}

/** An event on the thread feed: a run this page does not stream itself is drawn live. */
function onFeedEvent(name, data) {
  const trace = data && data.trace_id;
  if (name === "subscribed" || !trace || state.ownTraces.has(trace)) {
    return;
  }
  let view = state.view;
  if (view && view.traceId === trace) {
    if (view.ended && (name === "token" || name === "thinking" || name === "stream")) {
      return; // text of a run already drawn to its end, arriving late on the feed
    }
    // A run this page streamed until it ended (paused?) goes on elsewhere: the feed has it.
    view.source = "feed";
  } else {
    view = createRunView($("run"), { traceId: trace, threadId: state.thread, origin: "watched" });
    state.view = view;
  }
  const ended = view.ended;
  view.apply(name, data);
  // It ended (answered, failed, cancelled or paused for approval): list what it changed.
  if (!ended && view.ended) {
    afterRun();
  }
}

/**
 * Draw the events of `view`'s run, from `open(onEvent)` (the request that started it, say),
 * until the run's last event. A connection that drops before it is followed again with GET
 * /v1/runs/{trace_id}/events from the last event drawn; the view skips what it already has.
 */
async function followRun(view, open) {
  let lastId = null;
  let progressed = false;
  const onEvent = (name, data, id) => {
    if (id) {
      lastId = id;
    }
    progressed = true;
    view.apply(name, data);
  };
  state.ownTraces.add(view.traceId);
  try {
    let request = () => open(onEvent);
    for (let attempt = 0; ; attempt += 1) {
      let lost = null;
      progressed = false;
      try {
        await request();
        if (view.ended) {
          return;
        }
        lost = new api.ConnectionLost("the run's event stream ended before the run did");
      } catch (error) {
        if (!(error instanceof api.ConnectionLost)) {
          throw error;
        }
        lost = error;
      }
      if (progressed) {
        attempt = 0; // it dropped again, but after new events: keep following
      }
      if (attempt >= RETRY_MS.length) {
        throw lost;
      }
      view.reconnecting(lost.message);
      await sleep(RETRY_MS[attempt]);
      const events = api.path("/v1/runs", view.traceId, "events");
      request = () => api.stream(events, { onEvent, lastEventId: lastId });
    }
  } finally {
    state.ownTraces.delete(view.traceId);
  }
}

// -- sending a query ----------------------------------------------------------------------------

/** Send the chat box's text as a run on the selected thread (a new one if none is). */
async function send(event) {
  event.preventDefault();
  const box = $("query");
  const query = box.value.trim();
  if (!query || state.sending) {
    return;
  }
  if (!state.thread) {
    newThread();
  }
  const thread = state.thread;
  $("thread-title").textContent = `Thread ${thread}`;
  // Chosen here, so that the live feed knows this run as ours before its first event.
  const traceId = api.newId();
  state.ownTraces.add(traceId);
  $("chat-error").textContent = "";
  box.value = "";
  const shown = messageItem("USER", query);
  $("messages").append(shown);
  setSending(true);
  const view = createRunView($("run"), { traceId, threadId: thread, origin: "own", query });
  state.view = view;
  await runStream(view, api.path("/v1/threads", thread, "runs"), { query, trace_id: traceId });
  setSending(false);
  if (!view.started) {
    // The server took no run (it refused, asked for a token, or could not be reached): the
    // message was not sent, and is back in the box to send again.
    shown.remove();
    if (!box.value) {
      box.value = query;
    }
  }
  box.focus();
}

/** POST `body` to `path` as an event stream and draw its run in `view`. */
function runStream(view, path, body) {
  return drawRun(view, (onEvent) => api.stream(path, { body, onEvent }));
}

/** Draw a run in `view` until it ends (see followRun), its failure shown there and in the
 * error line, then list what it changed. */
async function drawRun(view, open) {
  await guarded(async () => {
    try {
      await followRun(view, open);
    } catch (error) {
      const why = error instanceof api.Unauthorized ? "the server asks for an API token" : "";
      view.fail(why || error.message);
      throw error;
    }
  });
  await afterRun();
}

function setSending(sending) {
  state.sending = sending;
  $("send").disabled = sending;
  $("send").textContent = sending ? "Running…" : "Send";
}

/** Enter sends; Shift+Enter (or Enter while composing text) starts a new line. */
function onQueryKey(event) {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    $("chat").requestSubmit();
  }
}

/** A run ended: what it changed is listed again. */
async function afterRun() {
  if (state.thread && state.following !== state.thread) {
    follow(state.thread);
  }
  await guarded(async () => {
    await Promise.all([loadThreads(), loadApprovals(), loadMessages(), loadRuns()]);
  });
}

// -- approvals --------------------------------------------------------------------------

/** The runs waiting for a person, each pending call with Approve and Deny buttons. */
async function loadApprovals() {
  const { runs } = await api.getJson("/v1/approvals");
  $("approvals").replaceChildren(...runs.map(approvalCard));
  $("approvals-empty").hidden = runs.length > 0;
}

/**
 * One paused run: its thread and query, and its pending calls. The API resumes a run once
 * every pending call is decided, so each choice is kept (shown by aria-pressed) until the
 * last one is made; then all are sent together.
 */
function approvalCard(run) {
  const chosen = {};
  const left = el("p", { className: "muted", "aria-live": "polite" });
  const choose = (call, decision, buttons) => {
    chosen[call.call_id] = decision;
    buttons.approve.setAttribute("aria-pressed", String(decision.approve));
    buttons.deny.setAttribute("aria-pressed", String(!decision.approve));
    const missing = run.pending.length - Object.keys(chosen).length;
    if (missing === 0) {
      decide(run, chosen);
    } else {
      const calls = missing === 1 ? "1 more call" : `${missing} more calls`;
      left.textContent = `${calls} to decide before the run resumes`;
    }
  };
  const calls = run.pending.map((call) => {
    const reasonId = `reason-${run.trace_id}-${call.call_id}`;
    const buttons = {
      approve: el("button", { type: "button", className: "approve" }, "Approve"),
      deny: el("button", { type: "button", className: "deny" }, "Deny"),
    };
    buttons.approve.setAttribute("aria-label", `Approve ${call.call_id} ${call.tool_name}`);
    buttons.deny.setAttribute("aria-label", `Deny ${call.call_id} ${call.tool_name}`);
    const reason = el("input", { id: reasonId, type: "text", className: "reason" });
    buttons.approve.addEventListener("click", () => choose(call, { approve: true }, buttons));
    buttons.deny.addEventListener("click", () =>
      choose(call, { approve: false, reason: reason.value.trim() || null }, buttons),
    );
    return el(
      "li",
      { className: "pending", dataset: { call: call.call_id } },
      el("b", {}, `${call.call_id} ${call.tool_name}`),
      el("code", { className: "args" }, compactJson(call.arguments)),
      el("label", { htmlFor: reasonId }, `Reason if denied (${call.call_id}, optional)`),
      reason,
      el("div", { className: "buttons" }, buttons.approve, buttons.deny),
    );
  });
  return el(
    "article",
    { className: "approval", dataset: { trace: run.trace_id } },
    el("p", {}, el("b", {}, "thread " + run.thread_id), " · run " + run.trace_id.slice(0, 8)),
    el("p", { className: "muted" }, (run.props && run.props.query) || ""),
    el("ul", {}, ...calls),
    left,
  );
}

/** Send a paused run's decisions and draw the resumed run until it ends (or pauses again). */
async function decide(run, decisions) {
  if (state.thread !== run.thread_id) {
    selectThread(run.thread_id);
  }
  state.ownTraces.add(run.trace_id);
  for (const button of $("approvals").querySelectorAll("button")) {
    button.disabled = true;
  }
  const view = createRunView($("run"), {
    traceId: run.trace_id,
    threadId: run.thread_id,
    origin: "resumed",
  });
  view.restore(run);
  state.view = view;
  // The buttons just pressed are disabled, then gone: focus goes where the run goes on.
  $("run-status").focus();
  const path = api.path("/v1/threads", run.thread_id, "runs", run.trace_id, "decisions");
  await runStream(view, path, { decisions });
}

// -- past runs and their traces -------------------------------------------------------------

/** The selected thread's runs, newest first, each with a button showing its trace. */
async function loadRuns() {
  if (!state.thread) {
    return;
  }
  const thread = state.thread;
  const { runs } = await api.getJson(api.path("/v1/threads", thread, "runs"));
  if (thread !== state.thread) {
    return;
  }
  const items = runs.reverse().map((run) => {
    const when = new Date(run.started_at).toLocaleString();
    const button = el("button", { type: "button" }, "Show trace");
    // The name starts with the text shown (speech input) and tells the runs apart.
    button.setAttribute("aria-label", `Show trace of run ${run.trace_id.slice(0, 8)}, ${when}`);
    button.addEventListener("click", () => showTrace(thread, run.trace_id));
    return el(
      "li",
      { dataset: { trace: run.trace_id } },
      el("span", { className: "badge " + run.status }, run.status.replace("_", " ")),
      ` ${when} · ${formatDuration(run.duration_ms)} · `,
      el("span", { className: "run-query" }, run.query || "(no query recorded)"),
      " ",
      button,
    );
  });
  $("runs").replaceChildren(...items);
  $("runs-empty").hidden = items.length > 0;
  attachRunning(thread, runs);
}

/**
 * A run still going on the thread that this page does not stream (the page was reloaded, or
 * the thread picked, while it ran) is followed from its start with GET
 * /v1/runs/{trace_id}/events; a view the live feed began mid-run gives way to it.
 */
function attachRunning(thread, runs) {
  const run = runs.find((each) => each.status === "running");
  if (!run || state.ownTraces.has(run.trace_id)) {
    return;
  }
  const shown = state.view && state.view.traceId === run.trace_id ? state.view : null;
  if (shown && (shown.source !== "feed" || shown.ended)) {
    return;
  }
  const view = createRunView($("run"), {
    traceId: run.trace_id,
    threadId: thread,
    origin: "attached",
    query: run.query,
  });
  state.view = view;
  const events = api.path("/v1/runs", run.trace_id, "events");
  drawRun(view, (onEvent) => api.stream(events, { onEvent }));
}

/** A run's trace page in the sandboxed iframe (scripts run, but in an origin of their own). */
async function showTrace(thread, traceId) {
  await guarded(async () => {
    const html = await api.getText(api.path("/v1/threads", thread, "runs", traceId, "trace"));
    const section = $("trace");
    $("trace-title").textContent = "Trace of run " + traceId.slice(0, 8);
    $("trace-frame").srcdoc = html;
    section.hidden = false;
    $("trace-title").focus();
  });
}

// -- start -------------------------------------------------------------------------------------

async function refreshAll() {
  await guarded(async () => {
    await Promise.all([loadThreads(), loadApprovals()]);
    if (state.thread) {
      await Promise.all([loadMessages(), loadRuns()]);
    }
  });
}

function start() {
  $("token-form").addEventListener("submit", onTokenSubmit);
  $("forget-token").addEventListener("click", onForgetToken);
  $("new-thread").addEventListener("click", newThread);
  $("chat").addEventListener("submit", send);
  $("query").addEventListener("keydown", onQueryKey);
  refreshAll().then(restoreThread);
}

/** Back to the thread this tab showed before a reload, if the server lists it. */
function restoreThread() {
  const before = sessionStorage.getItem(THREAD_KEY);
  const listed = before && $("threads").querySelector(`[data-thread="${CSS.escape(before)}"]`);
  if (listed && !state.thread) {
    selectThread(before);
  }
}

start();
