// runview.js — the live view of one run, drawn from its events as they arrive, like
// `pes-agent run` draws it in a terminal (pes_agent/cli/live.py): the thinking and the plan,
// one row per tool call with its status, arguments and a timing bar on a shared time axis
// (calls that ran side by side overlap), the answer as it streams, then status and usage.
//
// Event name -> view update (RunView.apply):
//   LLM_STREAM_START           the stage: planning, or writing the answer
//   thinking                   thinking text, streamed while the model plans
//   token (planning phases)    the plan as the model writes it
//   THOUGHTS                   a finished thinking block
//   TITLE, INTENT              the plan's heading and intent
//   PLAN ready                 the plan's steps; a "planned" row per call, placeholders shown
//   PLAN revised/kept/...      a revision: replaced rows struck out, new rows added
//   PLAN discarded             an unusable plan whose calls had started: rows struck out
//   TOOL_CALL                  the row runs: resolved arguments, its bar starts (it may come
//                              before PLAN ready: calls start while the plan streams)
//   TOOL_EXECUTION             the row is done, failed or skipped: result, duration, bar ends
//   APPROVAL_REQUESTED         the row waits for a person (a watched run pauses here)
//   APPROVAL_DECIDED           the row is approved or denied
//   token (synthesis)          the answer grows
//   stream (restart)           a restarted model stream: its text so far is dropped
//   LLM_STREAM_METADATA        tokens used, added up (runs watched on the thread feed)
//   ERROR                      an error line (a watched run ends here, but for a failed search)
//   FINAL_RESPONSE             the answer, if none streamed here (the run executes on another
//                              worker); the run's status (runs watched on the thread feed)
//   final                      status and usage from the final response's metadata
//   error                      the server could not run it
//
// Everything the model or a tool wrote is put in the page as text (textContent), never HTML.

const PLAN_PHASES = new Set(["planning", "repair"]);
// PLAN statuses of a re-evaluation's end.
const REEVALUATED = new Set(["revised", "kept", "unusable", "failed"]);
const EXECUTION_PHASES = new Set(["reevaluation", "language_step"]);
// {step_N_result...} or <step_N_result...>: a planned call waits for call N.
const PLACEHOLDER = /[{<]step_(\d+)_result/g;
// Row states that can still change.
const OPEN = new Set(["planned", "running", "approval"]);
const STATUS_TEXT = {
  planned: "planned",
  running: "running",
  approval: "waiting for approval",
  done: "done",
  error: "error",
  skipped: "skipped",
  replaced: "replaced",
  discarded: "discarded",
  cancelled: "cancelled",
};
const STAGE_TEXT = {
  starting: "starting…",
  planning: "planning…",
  executing: "running tools…",
  reevaluating: "re-evaluating the plan…",
  synthesizing: "writing the answer…",
  finishing: "saving…",
};

/** Make an element: `el("p", {className: "x"}, "text", child)`; strings become text nodes. */
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "dataset") {
      Object.assign(node.dataset, value);
    } else if (key.startsWith("aria-") || key === "role") {
      node.setAttribute(key, value);
    } else {
      node[key] = value;
    }
  }
  node.append(...children.filter((child) => child !== null && child !== undefined));
  return node;
}

/** `value` as one line of JSON, cut to `limit` characters. */
export function compactJson(value, limit = 300) {
  let text;
  try {
    text = JSON.stringify(value);
  } catch {
    text = String(value);
  }
  if (text === undefined) {
    text = "null";
  }
  return text.length > limit ? text.slice(0, limit - 1) + "…" : text;
}

/** A duration for people: `820 ms`, `1.42 s`, `2 m 05 s`. */
export function formatDuration(ms) {
  if (ms === null || ms === undefined) {
    return "";
  }
  if (ms < 1000) {
    return Math.round(ms) + " ms";
  }
  const seconds = ms / 1000;
  if (seconds < 60) {
    return seconds.toFixed(2) + " s";
  }
  const minutes = Math.floor(seconds / 60);
  return minutes + " m " + String(Math.floor(seconds % 60)).padStart(2, "0") + " s";
}

/** "1,234": a count for people. */
function count(n) {
  return Number(n || 0).toLocaleString("en-US");
}

/** "1 tool call", "4 tool calls". */
function plural(n, what) {
  return `${n} ${what}${n === 1 ? "" : "s"}`;
}

/** "1,208 tokens (935 in / 273 out)". */
function tokens(total, input, output) {
  return `${count(total)} tokens (${count(input)} in / ${count(output)} out)`;
}

/**
 * The view of one run inside `container` (emptied first). `origin` says how the console
 * follows it: "own" (sent from this page), "resumed" (approved here), "watched" (another
 * client's run, seen on the thread's live feed) or "attached" (a run already going when the
 * page came to it, followed from its start).
 */
export function createRunView(container, { traceId, threadId, origin, query }) {
  return new RunView(container, { traceId, threadId, origin, query });
}

class RunView {
  constructor(container, { traceId, threadId, origin, query }) {
    this.traceId = traceId;
    this.threadId = threadId;
    this.origin = origin;
    // "stream": the run's own event stream, which ends with `final`, `error` or `end`;
    // "feed": the thread feed, where the run ends with its last observation.
    this.source = origin === "watched" ? "feed" : "stream";
    this.seen = new Set(); // observation ids: one replayed again is not drawn twice
    this.events = 0;
    this.stage = "starting";
    this.rows = []; // one per planned call, in plan order (revisions appended)
    // Where the rows of the plan being written begin: its calls start while it streams (their
    // rows come before the plan), and a discarded plan's rows stay above its repair's.
    this.planRows = 0;
    this.steps = []; // call ids by step number - 1: placeholders name steps
    this.answer = "";
    this.usage = { input: 0, output: 0, total: 0, llmCalls: 0 };
    this.firstMs = null; // server time of the first and last observations
    this.lastMs = null;
    this.skew = Infinity; // browser clock minus server clock, at best (see serverNow)
    this.ended = false;
    this.endStatus = null; // the status it ended with
    this.timer = null;
    this.build(container, threadId, query);
  }

  // -- the page structure ---------------------------------------------------------------

  /** The run's elements; later updates only change their text, classes and bars. */
  build(container, threadId, query) {
    const who = {
      own: "sent from this page",
      resumed: "resumed after approval",
      watched: "started by another client",
      attached: "followed from its start",
    }[this.origin];
    this.meta = el("p", { className: "run-meta muted" });
    this.meta.textContent = `thread ${threadId} · trace ${this.traceId} · ${who}`;
    this.queryLine = el("p", { className: "run-query" });
    this.setQuery(query);
    this.thinking = el("p", { className: "thinking", hidden: true });
    this.planTitle = el("h3", { className: "plan-title" }, "Plan");
    this.intent = el("p", { className: "intent", hidden: true });
    this.planSteps = el("ol", { className: "plan-steps" });
    this.planStream = el("pre", { className: "plan-stream", hidden: true });
    this.plan = el(
      "div",
      { className: "plan", hidden: true },
      this.planTitle,
      this.intent,
      this.planSteps,
    );
    this.axisLabel = el("span", { className: "muted" });
    this.callRows = el("tbody");
    this.calls = el(
      "table",
      { className: "calls", hidden: true },
      el("caption", {}, "Tool calls"),
      el(
        "thead",
        {},
        el(
          "tr",
          {},
          el("th", { scope: "col" }, "call"),
          el("th", { scope: "col" }, "tool, arguments → result"),
          el("th", { scope: "col" }, "status"),
          el("th", { scope: "col" }, "time"),
          el("th", { scope: "col", className: "timeline-head" }, "timeline ", this.axisLabel),
        ),
      ),
      this.callRows,
    );
    this.notes = el("ul", { className: "notes" });
    // Announced as it grows (polite: a screen reader finishes what it is saying first).
    this.answerText = el("div", {
      className: "answer",
      id: "answer",
      "aria-live": "polite",
      "aria-atomic": "false",
    });
    this.answerBox = el(
      "div",
      { className: "answer-box", hidden: true },
      el("h3", {}, "Answer"),
      this.answerText,
    );
    this.errors = el("ul", { className: "errors" });
    this.status = el("p", {
      className: "run-status",
      id: "run-status",
      role: "status",
      tabIndex: -1, // focused after a decision, whose buttons go away
    });
    container.replaceChildren(
      el("h2", { id: "run-title" }, "Run"),
      this.meta,
      this.queryLine,
      this.thinking,
      this.planStream,
      this.plan,
      this.calls,
      this.notes,
      this.answerBox,
      this.errors,
      this.status,
    );
    container.hidden = false;
    this.showStage();
  }

  /** The question the run answers, when the console knows it. */
  setQuery(query) {
    this.queryLine.replaceChildren();
    if (query) {
      this.queryLine.append(el("b", {}, "query "), query);
    }
  }

  // -- events -------------------------------------------------------------------------

  /** Whether any event of the run came (a request the server refused brings none). */
  get started() {
    return this.events > 0;
  }

  /** Update the view for one event of the run (see the table at the top of this file). */
  apply(name, data) {
    this.events += 1;
    if (name === "token" || name === "thinking" || name === "stream") {
      this.onStream(name, data);
    } else if (name === "final") {
      this.finish(data);
    } else if (name === "error") {
      this.fail(data.message || "the run failed");
    } else if (name === "gap") {
      this.note(`${data.missed} events were missed (the server keeps a run's latest only)`);
    } else if (name === "end") {
      // Another worker's stream of the run: its last observation came before.
      if (!this.ended) {
        this.finishWatched(data.status);
      }
    } else if (data && data.content && data.timestamp && !this.seen.has(data.id)) {
      this.seen.add(data.id);
      this.onObservation(name, data);
    }
  }

  /** Streamed text: thinking, the plan being written, or the answer. */
  onStream(name, data) {
    if (data.kind === "restart") {
      if (data.phase === "synthesis") {
        this.answer = "";
        this.answerText.textContent = "";
      } else if (PLAN_PHASES.has(data.phase)) {
        this.planStream.textContent = "";
      }
      this.thinking.textContent = "";
    } else if (name === "thinking") {
      if (!this.thinking.textContent) {
        this.thinking.textContent = "thinking: ";
      }
      this.thinking.hidden = false;
      this.thinking.textContent += data.text;
    } else if (name === "token" && data.phase === "synthesis") {
      this.answerBox.hidden = false;
      this.answer += data.text;
      this.answerText.append(data.text); // a text node per piece: the live region's additions
    } else if (name === "token" && PLAN_PHASES.has(data.phase)) {
      this.planStream.hidden = false;
      this.planStream.textContent += data.text;
    }
  }

  /** An observation: what the run did, with the server's timestamp. */
  onObservation(type, observation) {
    const at = Date.parse(observation.timestamp);
    const later = at > this.lastMs;
    if (this.endStatus === "awaiting_approval" && type !== "APPROVAL_REQUESTED" && later) {
      // Recorded after the pause: the run was resumed (by a decision here or elsewhere).
      this.ended = false;
      this.endStatus = null;
      this.stage = "executing";
    }
    this.firstMs = this.firstMs === null ? at : Math.min(this.firstMs, at);
    this.lastMs = this.lastMs === null ? at : Math.max(this.lastMs, at);
    this.skew = Math.min(this.skew, Date.now() - at);
    const content = observation.content;
    if (type === "LLM_STREAM_START") {
      this.onModelCall(content.phase);
    } else if (type === "LLM_STREAM_METADATA") {
      const usage = content.usage || {};
      this.usage.input += usage.input_tokens || 0;
      this.usage.output += usage.output_tokens || 0;
      this.usage.total += usage.total_tokens || 0;
      this.usage.llmCalls += 1;
    } else if (type === "THOUGHTS") {
      this.thinking.hidden = false;
      this.thinking.textContent = "thinking: " + (content.text || "");
    } else if (type === "TITLE") {
      this.planTitle.textContent = content.title || "Plan";
    } else if (type === "INTENT") {
      // The compact plan's one line of intent is its title too: shown once.
      this.intent.hidden = !content.intent || content.intent === this.planTitle.textContent;
      this.intent.textContent = content.intent ? "intent: " + content.intent : "";
    } else if (type === "PLAN" && content.status === "ready") {
      this.showPlan(content);
    } else if (type === "PLAN" && content.status === "discarded") {
      this.discard(content);
    } else if (type === "PLAN" && REEVALUATED.has(content.status)) {
      this.revise(content);
    } else if (type === "TOOL_CALL") {
      this.callStarted(content, at);
    } else if (type === "TOOL_EXECUTION") {
      this.callEnded(content, at);
    } else if (type === "APPROVAL_REQUESTED") {
      const row = this.row(content.callId, content.toolName);
      row.arguments = content.arguments; // resolved: what the call would run with
      this.showArguments(row);
      this.setRowStatus(row, "approval");
      // A paused run stops here (its calls wait in the store): no FINAL_RESPONSE follows.
      if (this.source === "feed" && content.mode === "paused" && !this.ended) {
        this.finishWatched("awaiting_approval");
      }
    } else if (type === "APPROVAL_DECIDED") {
      const row = this.row(content.callId, content.toolName);
      row.approval = content.decision === "approve" ? "approved" : "denied";
      this.setRowStatus(row, "planned");
    } else if (type === "ERROR") {
      this.errors.append(el("li", {}, "✗ " + (content.error || observation.title)));
      // A failed search leaves the run going; any other error ends it, with no FINAL_RESPONSE.
      if (this.source === "feed" && content.phase !== "retrieval") {
        this.finishWatched(content.phase === "cancelled" ? "cancelled" : "error");
      }
    } else if (type === "FINAL_RESPONSE") {
      this.stage = "finishing";
      // Tokens stream only from the worker executing the run: a run followed from another
      // worker shows the answer it saved.
      this.showSavedAnswer(content.message, content.status);
      // The thread feed sends no `final` event: this is where the run ends.
      if (this.source === "feed") {
        this.finishWatched(content.status || "success");
      }
    }
    if (!this.ended) {
      this.showStage();
    }
  }

  /** A model call began: planning (again), writing the answer, or a call during the tools. */
  onModelCall(phase) {
    if (EXECUTION_PHASES.has(phase)) {
      if (phase === "reevaluation") {
        this.stage = "reevaluating";
      }
      return;
    }
    if (phase === "synthesis") {
      this.stage = "synthesizing";
      this.answerBox.hidden = false;
    } else {
      this.stage = "planning";
      this.planStream.textContent = "";
    }
  }

  /** The plan is ready: its steps, and a planned row per call. */
  showPlan(content) {
    this.stage = "executing";
    this.planStream.hidden = true;
    this.plan.hidden = false;
    const lines = String(content.plan || "")
      .split("\n")
      .map((line) => line.trim())
      .filter(Boolean);
    // "1. Look up…" becomes an item of the numbered list; a plan that is its calls alone
    // (the compact protocol) has no steps beside the calls' rows.
    const items = lines.map((line) => el("li", {}, line.replace(/^\d+\.\s*/, "")));
    this.planSteps.replaceChildren(...items);
    this.planSteps.hidden = items.length === 0;
    this.addRows(content.toolCalls || [], 0);
  }

  /** A plan was discarded while its calls ran (it is being repaired): its rows struck out,
   *  the repaired plan's rows below them. */
  discard(content) {
    const calls = new Set((content.calls || []).map(String));
    for (const row of this.rows.slice(this.planRows)) {
      if (calls.has(row.callId) || OPEN.has(row.status)) {
        this.setRowStatus(row, "discarded");
      }
    }
    this.planRows = this.rows.length;
    this.note("✗ plan discarded: " + (content.reason || "unusable"));
  }

  /** A re-evaluation ended: replaced rows struck out and new ones added, or a note. */
  revise(content) {
    this.stage = "executing";
    if (content.status !== "revised") {
      const why = content.reason && content.status !== "kept" ? ": " + content.reason : "";
      this.note("↺ plan kept" + why);
      return;
    }
    const replaced = new Set((content.replaced || []).map(String));
    for (const row of this.rows) {
      if (replaced.has(row.callId) && row.status === "planned") {
        this.setRowStatus(row, "replaced");
      }
    }
    const gone = replaced.size ? " · replaced " + [...replaced].join(", ") : "";
    this.note(`↻ plan revised (${content.revision})${gone}`);
    this.addRows(content.toolCalls || [], content.revision || 0);
  }

  /** A call started: it runs with its resolved arguments. */
  callStarted(content, at) {
    const row = this.row(content.callId, content.toolName);
    row.arguments = content.arguments;
    row.startMs = at;
    this.setRowStatus(row, "running");
    this.showArguments(row);
    this.startTicking();
  }

  /** A call ended: done, failed, or skipped (it never started: a dependency failed, or denied). */
  callEnded(content, at) {
    const row = this.row(content.callId, content.toolName);
    const started = row.startMs !== null;
    row.endMs = at;
    if (!started) {
      row.startMs = at;
    }
    row.durationMs = content.durationMs;
    row.el.time.textContent = started ? formatDuration(row.durationMs) : "";
    if (content.status === "error") {
      row.el.result.className = "result error";
      row.el.result.textContent = "→ " + (content.error || "failed");
      this.setRowStatus(row, started ? "error" : "skipped");
    } else {
      row.el.result.className = "result ok";
      row.el.result.textContent = "→ " + compactJson(content.output);
      this.setRowStatus(row, "done");
    }
    this.drawBars();
  }

  // -- rows -----------------------------------------------------------------------------

  /** Planned rows for `calls` (as a PLAN observation lists them), numbered on as steps. */
  addRows(calls, revision) {
    const first = this.steps.length;
    for (const call of calls) {
      this.steps.push(String(call.call_id));
    }
    calls.forEach((call, offset) => {
      const instruction = call.instruction;
      const args = instruction ? { instruction } : call.arguments || {};
      const after = (call.depends_on || []).map(String);
      for (const match of compactJson(args, Infinity).matchAll(PLACEHOLDER)) {
        const step = this.steps[Number(match[1]) - 1];
        if (step && Number(match[1]) - 1 !== first + offset && !after.includes(step)) {
          after.push(step);
        }
      }
      const label = instruction ? "language step" : call.tool_name;
      const callId = this.steps[first + offset];
      // A call that started while the plan streamed has its row already: keep its state.
      const started =
        revision === 0 && this.rows.slice(this.planRows).find((row) => row.callId === callId);
      if (started) {
        started.planned = args;
        started.after = after;
        this.showArguments(started);
        return;
      }
      const row = this.newRow(callId, label);
      row.planned = args;
      row.arguments = args;
      row.after = after;
      row.revision = revision;
      this.showArguments(row);
      this.setRowStatus(row, "planned");
    });
  }

  /** The open row of `callId`, or a new one when the plan did not list it. */
  row(callId, toolName) {
    const id = String(callId);
    const open = this.rows.find((row) => row.callId === id && OPEN.has(row.status));
    return open || this.newRow(id, toolName || "?");
  }

  /** A row in the calls table, with its cells kept for updates. */
  newRow(callId, toolName) {
    const cells = {
      args: el("code", { className: "args" }),
      planned: el("div", { className: "planned muted", hidden: true }),
      result: el("div", { className: "result" }),
      status: el("td", { className: "status" }),
      time: el("td", { className: "time" }),
      bar: el("div", { className: "bar" }),
    };
    const tr = el(
      "tr",
      { dataset: { call: callId } },
      el("th", { scope: "row", className: "call" }, callId),
      el(
        "td",
        { className: "detail" },
        el("b", {}, toolName),
        " ",
        cells.args,
        cells.planned,
        cells.result,
      ),
      cells.status,
      cells.time,
      el("td", { className: "track" }, cells.bar),
    );
    const row = {
      callId,
      toolName,
      arguments: {},
      planned: null,
      after: [],
      status: "planned",
      approval: null,
      revision: 0,
      startMs: null,
      endMs: null,
      durationMs: null,
      el: { tr, ...cells },
    };
    this.rows.push(row);
    this.callRows.append(tr);
    this.calls.hidden = false;
    return row;
  }

  /** The arguments as the call ran them; the planned ones (placeholders) below when they differ. */
  showArguments(row) {
    const shown = compactJson(row.arguments);
    row.el.args.textContent = shown;
    const planned = row.planned === null ? shown : compactJson(row.planned);
    row.el.planned.hidden = planned === shown;
    row.el.planned.textContent = "planned: " + planned;
  }

  /** A row's status: its text, and `data-status` for the styles (and the tests). */
  setRowStatus(row, status) {
    row.status = status;
    row.el.tr.dataset.status = status;
    let text = STATUS_TEXT[status];
    if (status === "planned" && row.approval) {
      text = row.approval;
    } else if (status === "skipped" && row.approval === "denied") {
      text = "skipped (denied)";
    } else if (status === "planned" && row.after.length) {
      text = "after " + row.after.join(", ");
    }
    row.el.status.textContent = text;
  }

  /** A line under the calls: a revision, a plan kept, missed events. */
  note(text) {
    this.notes.append(el("li", {}, text));
  }

  // -- time -----------------------------------------------------------------------------

  /** Now on the server's clock, as well as the browser can tell: the smallest gap seen
   * between an observation's timestamp and its arrival is the clock difference at most. */
  serverNow() {
    return Date.now() - (Number.isFinite(this.skew) ? this.skew : 0);
  }

  /** Every bar on one axis, from the first call's start to the last end (or now). */
  drawBars() {
    const timed = this.rows.filter((row) => row.startMs !== null);
    if (timed.length === 0) {
      return;
    }
    const now = this.ended ? this.lastMs : this.serverNow();
    const origin = Math.min(...timed.map((row) => row.startMs));
    const end = Math.max(...timed.map((row) => (row.endMs === null ? now : row.endMs)));
    const span = Math.max(end - origin, 1);
    this.axisLabel.textContent = "(0 – " + formatDuration(span) + ")";
    for (const row of timed) {
      const stop = row.endMs === null ? Math.max(now, row.startMs) : row.endMs;
      const bar = row.el.bar;
      bar.style.left = ((row.startMs - origin) / span) * 100 + "%";
      bar.style.width = ((stop - row.startMs) / span) * 100 + "%";
      bar.dataset.startMs = String(row.startMs - origin);
      bar.dataset.endMs = String(stop - origin);
      bar.title = `${row.callId} ${row.toolName}: ${formatDuration(stop - row.startMs)}`;
      if (row.endMs === null) {
        row.el.time.textContent = ((stop - row.startMs) / 1000).toFixed(1) + " s";
      }
    }
  }

  /** Redraw the running bars ten times a second until no call runs. */
  startTicking() {
    if (this.timer === null) {
      this.timer = setInterval(() => {
        this.drawBars();
        // Stopped too once another view took the page's place (this one is off the page).
        const gone = !this.status.isConnected;
        if (gone || this.ended || !this.rows.some((row) => row.status === "running")) {
          clearInterval(this.timer);
          this.timer = null;
        }
      }, 100);
    }
    this.drawBars();
  }

  // -- the end ----------------------------------------------------------------------------

  /** The stage line while the run goes on (the status region, announced politely). */
  showStage() {
    this.status.className = "run-status running";
    this.status.textContent = STAGE_TEXT[this.stage] || this.stage;
  }

  /** The connection to the run dropped (`why`): the console is following it again. The next
   * event shows the stage again. */
  reconnecting(why) {
    if (!this.ended) {
      this.status.className = "run-status running reconnecting";
      this.status.textContent = `${why}: following the run again…`;
    }
  }

  /** The answer as the run saved it, when what streamed here differs: none streamed (a
   * synthesizer that does not stream, a run executing on another worker) or some was missed
   * (a connection dropped; tokens are not replayed). */
  showSavedAnswer(message, status) {
    const saved = message && message.content;
    if (!saved || saved === this.answer || status === "awaiting_approval" || status === "error") {
      return;
    }
    if (this.answer && status !== "success" && status !== "partial") {
      return; // a cancelled run keeps what it wrote before it stopped
    }
    this.answerBox.hidden = false;
    this.answer = saved;
    this.answerText.textContent = saved;
  }

  /** The run's final response (`final` event): status, calls, tokens and time. */
  finish(response) {
    const meta = response.metadata;
    this.showSavedAnswer(response.response, meta.status);
    const usage = meta.usage || {};
    this.end(meta.status, [
      plural(meta.llm_calls, "LLM call"),
      plural(meta.tool_calls, "tool call"),
      tokens(usage.total_tokens, usage.input_tokens, usage.output_tokens),
      formatDuration(meta.total_duration_ms),
    ]);
    if (meta.error && meta.status !== "success") {
      this.errors.append(el("li", {}, "✗ " + meta.error));
    }
  }

  /** A watched run's end (its FINAL_RESPONSE, last ERROR or pause), with the usage its
   * model calls reported. */
  finishWatched(status) {
    const tools = this.rows.filter((row) => row.endMs !== null).length;
    this.end(status, [
      plural(this.usage.llmCalls, "LLM call"),
      plural(tools, "tool call"),
      tokens(this.usage.total, this.usage.input, this.usage.output),
      formatDuration(this.lastMs - this.firstMs),
    ]);
  }

  /** The server could not run it (an `error` event, or the request failed). */
  fail(message) {
    this.errors.append(el("li", {}, "✗ " + message));
    this.end("error", []);
  }

  /** Stop the clock, draw the bars as they ended, and show the status line. */
  end(status, parts) {
    this.ended = true;
    this.endStatus = status;
    if (this.timer !== null) {
      clearInterval(this.timer);
      this.timer = null;
    }
    if (status !== "awaiting_approval") {
      for (const row of this.rows) {
        if (row.status === "running") {
          this.setRowStatus(row, "cancelled");
        }
      }
    }
    this.drawBars();
    this.status.className = "run-status " + status;
    this.status.replaceChildren(
      el("span", { className: "badge " + status }, status.replace("_", " ")),
      parts.length ? "  " + parts.join(" · ") : "",
    );
  }

  // -- a run resumed after approval -------------------------------------------------------------

  /** Start from a paused run as `GET /v1/approvals` lists it: its plan, the calls that
   * finished before the pause, and those waiting for a decision. */
  restore(paused) {
    const planning = paused.planning || {};
    this.setQuery(paused.props && paused.props.query);
    if (planning.title) {
      this.planTitle.textContent = planning.title;
    }
    if (planning.intent) {
      this.intent.hidden = false;
      this.intent.textContent = "intent: " + planning.intent;
    }
    this.showPlan({ plan: planning.plan, toolCalls: paused.calls || [] });
    const replaced = new Set(paused.replaced_steps || []);
    const pending = new Map((paused.pending || []).map((call) => [call.call_id, call]));
    this.rows.forEach((row, index) => {
      const step = index + 1;
      const result = (paused.results || {})[String(step)];
      if (replaced.has(step)) {
        this.setRowStatus(row, "replaced");
      } else if (result) {
        const ok = result.status === "success";
        row.el.result.className = "result " + (ok ? "ok" : "error");
        row.el.result.textContent = "→ " + (ok ? compactJson(result.output) : result.error);
        row.el.time.textContent = formatDuration(result.duration_ms);
        this.setRowStatus(row, ok ? "done" : "error");
      } else if (pending.has(row.callId)) {
        row.arguments = pending.get(row.callId).arguments;
        this.showArguments(row);
        this.setRowStatus(row, "approval");
      }
    });
    this.showStage();
  }
}
