// api.js — talking to the pes-agent HTTP API from the console.
//
// Three things live here: the bearer token (kept in sessionStorage, sent in the Authorization
// header, never in a URL), JSON and text requests that turn the API's {"error": {...}}
// answers into exceptions, and server-sent event streams read with fetch, because
// EventSource can neither POST a body nor send an Authorization header.

const TOKEN_KEY = "pes-agent-console-token";

/** The server answered 401: the console asks for a token. */
export class Unauthorized extends Error {}

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

/** GET `path` and parse its JSON body. */
export async function getJson(path) {
  const response = await check(await fetch(path, { headers: headers() }));
  return response.json();
}

/** GET `path` as text (the trace page). */
export async function getText(path) {
  const response = await check(await fetch(path, { headers: headers() }));
  return response.text();
}

/**
 * Read a server-sent event stream: GET `path`, or POST `body` as JSON to it, and call
 * `onEvent(name, data)` for each event (its data parsed as JSON) until the stream ends.
 * `signal` (an AbortSignal) stops reading; keep-alive comments are skipped.
 */
export async function stream(path, { body, signal, onEvent }) {
  const init = { headers: headers({ Accept: "text/event-stream" }), signal };
  if (body !== undefined) {
    init.method = "POST";
    init.headers.set("Content-Type", "application/json");
    init.body = JSON.stringify(body);
  }
  const response = await check(await fetch(path, init));
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
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
        onEvent(event.name, event.data);
      }
      end = buffer.indexOf("\n\n");
    }
  }
}

/** One event's `event:` name and `data:` (JSON), or null for a comment-only block. */
function parseEvent(block) {
  let name = "message";
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
    } else if (field === "data") {
      data.push(value);
    }
  }
  if (data.length === 0) {
    return null;
  }
  return { name, data: JSON.parse(data.join("\n")) };
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
