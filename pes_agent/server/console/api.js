// api.js — talking to the pes-agent HTTP API from the console.
//
// Three things live here: the bearer token (kept in sessionStorage, sent in the Authorization
// header, never in a URL), JSON and text requests that turn the API's {"error": {...}}
// answers and lost connections into exceptions, and server-sent event streams read with
// fetch, because EventSource can neither POST a body nor send an Authorization header (nor
// a Last-Event-ID of the console's choosing).

const TOKEN_KEY = "pes-agent-console-token";

/** The server answered 401: the console asks for a token. */
export class Unauthorized extends Error {}

/** The connection to the server failed or dropped (no answer, or a stream cut short). */
export class ConnectionLost extends Error {}

/** Any other error answer: `status`, the API's error `type` and its message. */
export class ApiError extends Error {
  constructor(status, type, message) {
    super(message);
    this.status = status;
    this.type = type;
  }
}

/** The token the user gave in this tab, or "" when there is none. */
export function getToken() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

/** Keep `token` for this tab's requests (an empty token forgets it). */
export function setToken(token) {
  if (token) {
    sessionStorage.setItem(TOKEN_KEY, token);
  } else {
    sessionStorage.removeItem(TOKEN_KEY);
  }
}

/** Request headers with the token, if any, added to `extra`. */
function headers(extra = {}) {
  const all = new Headers(extra);
  const token = getToken();
  if (token) {
    all.set("Authorization", "Bearer " + token);
  }
  return all;
}

/** `response` when it is a success; else the API's error as an exception. */
async function check(response) {
  if (response.ok) {
    return response;
  }
  let type = "http_error";
  let message = response.status + " " + response.statusText;
  try {
    const body = await response.json();
    type = body.error.type;
    message = body.error.message;
  } catch {
    // Not the API's JSON error (a proxy's page?): keep the status line.
  }
  if (response.status === 401) {
    throw new Unauthorized(message);
  }
  throw new ApiError(response.status, type, message);
}

/**
 * `work()` (a fetch, or a read of its body), its network failure (a TypeError, as fetch
 * reports one) turned into ConnectionLost. An abort stays an AbortError: the console stopped
 * reading on purpose; a body that is not JSON stays a SyntaxError.
 */
async function network(work) {
  try {
    return await work();
  } catch (error) {
    if (!(error instanceof TypeError)) {
      throw error;
    }
    throw new ConnectionLost(`the connection to the server was lost (${error.message})`);
  }
}

/** GET `path` and parse its JSON body. */
export async function getJson(path) {
  const response = await check(await network(() => fetch(path, { headers: headers() })));
  return network(() => response.json());
}

/** GET `path` as text (the trace page). */
export async function getText(path) {
  const response = await check(await network(() => fetch(path, { headers: headers() })));
  return network(() => response.text());
}

/**
 * Read a server-sent event stream: GET `path`, or POST `body` as JSON to it, and call
 * `onEvent(name, data, id)` for each event (its data parsed as JSON; `id` its `id:` line, or
 * null) until the stream ends. `lastEventId` is sent as `Last-Event-ID`, to resume after it.
 * `signal` (an AbortSignal) stops reading; keep-alive comments are skipped. A connection
 * that fails or drops throws ConnectionLost.
 */
export async function stream(path, { body, signal, onEvent, lastEventId }) {
  const init = { headers: headers({ Accept: "text/event-stream" }), signal };
  if (body !== undefined) {
    init.method = "POST";
    init.headers.set("Content-Type", "application/json");
    init.body = JSON.stringify(body);
  }
  if (lastEventId) {
    init.headers.set("Last-Event-ID", lastEventId);
  }
  const response = await check(await network(() => fetch(path, init)));
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await network(() => reader.read());
    if (done) {
      return;
    }
    buffer += value.replace(/\r\n?/g, "\n");
    // An event ends with a blank line; a chunk may hold several events, or part of one.
    let end = buffer.indexOf("\n\n");
    while (end >= 0) {
      const event = parseEvent(buffer.slice(0, end));
      buffer = buffer.slice(end + 2);
      if (event) {
        onEvent(event.name, event.data, event.id);
      }
      end = buffer.indexOf("\n\n");
    }
  }
}

/** One event's `event:` name, `id:` and `data:` (JSON), or null for a comment-only block. */
function parseEvent(block) {
  let name = "message";
  let id = null;
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith(":")) {
      continue; // a comment: the server's keep-alive ping
    }
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) {
      value = value.slice(1);
    }
    if (field === "event") {
      name = value;
    } else if (field === "id") {
      id = value;
    } else if (field === "data") {
      data.push(value);
    }
  }
  if (data.length === 0) {
    return null;
  }
  return { name, id, data: JSON.parse(data.join("\n")) };
}

/** A path with each of `parts` URL-encoded: `path("/v1/threads", id, "runs")`. */
export function path(...parts) {
  return parts.map((part, i) => (i === 0 ? part : encodeURIComponent(part))).join("/");
}

/** 32 random hex digits: a trace id the console picks before it starts a run. */
export function newId() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join("");
}
