// AG-UI's published client (@ag-ui/client) against pes-agent's POST /v1/agui.
// Usage: node run_agent.mjs URL TOKEN THREAD_ID QUERY [--approve]
// Runs QUERY on the thread; with --approve, answers the run's interrupts by approving each
// call and runs again with the resume entries. Prints one JSON object: the event types each
// run received, its result, the pending interrupts, and the agent's messages and state.
import { HttpAgent } from "@ag-ui/client";

const [url, token, threadId, query, flag] = process.argv.slice(2);
const agent = new HttpAgent({ url, headers: { Authorization: `Bearer ${token}` }, threadId });
agent.addMessage({ id: "user-1", role: "user", content: query });

async function run(parameters) {
  const events = [];
  const { result, newMessages } = await agent.runAgent(parameters, {
    onEvent({ event }) {
      events.push(event.type);
    },
  });
  return { events, result, newMessages, interrupts: agent.pendingInterrupts ?? [] };
}

const runs = [await run({ runId: "js-run-1" })];
if (flag === "--approve") {
  const resume = runs[0].interrupts.map((interrupt) => ({
    interruptId: interrupt.id,
    status: "resolved",
    payload: { approved: true },
  }));
  runs.push(await run({ runId: "js-run-2", resume }));
}
console.log(JSON.stringify({ runs, messages: agent.messages, state: agent.state }));
