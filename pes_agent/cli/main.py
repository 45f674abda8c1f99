"""`pes-agent`: the command line — parse the arguments, run one command, map errors to exit codes.

Every failure prints one line to stderr (`pes-agent: error: ...`) and exits with a code from
`ExitCode`; a traceback appears only for a bug, and only with `PES_AGENT_DEBUG=1`.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import logging
import os
import sys
import textwrap
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from pes_agent.cli.cassettes import RECORD_HELP, REPLAY_HELP
from pes_agent.cli.engines import ENGINE_HELP
from pes_agent.cli.errors import CLIError, ExitCode, report
from pes_agent.cli.paths import DB_ENV_VAR, resolve_store

if TYPE_CHECKING:
    from pes_agent.usage import UsageLimits

__all__ = ["build_parser", "main"]

DEBUG_ENV_VAR = "PES_AGENT_DEBUG"
PROVIDER_ENV_VAR = "PES_AGENT_PROVIDER"
DEFAULT_PROVIDER = "openai:gpt-4o-mini"

_EPILOG = f"""\
exit codes:
  0    success (for run/demo: the run's status is "success")
  1    the run failed (status "error": provider down, unusable plan, ...)
  2    bad command line or configuration: a missing API key, a --tools path that does not
       import, an unknown thread, trace or observation type, a missing or damaged --replay
       cassette
  3    the run answered, but a tool call failed (status "partial")
  4    the run waits for approval (run --no-input, or no terminal to ask at): finish it with
       `pes-agent approve THREAD`
  130  interrupted with Ctrl-C (the run is cancelled, running tools are stopped)

environment:
  OPENAI_API_KEY, ANTHROPIC_API_KEY   keys for openai:MODEL and anthropic:MODEL
  OPENAI_BASE_URL, OLLAMA_BASE_URL    another OpenAI-compatible server (or use --base-url)
  {PROVIDER_ENV_VAR:<34}  the default --provider (else {DEFAULT_PROVIDER})
  {DB_ENV_VAR:<34}  the default --db (else a file in your data directory:
                                      $XDG_DATA_HOME/pes-agent/agent.db or
                                      ~/.local/share/pes-agent/agent.db on Linux,
                                      ~/Library/Application Support/pes-agent on macOS,
                                      %LOCALAPPDATA%\\pes-agent on Windows)
  {DEBUG_ENV_VAR}=1                   show the library's logs, and tracebacks

durable runs: `pes-agent worker --engine URL` in each worker process (URL: dbos+sqlite:///PATH,
dbos+postgresql://... or temporal://HOST:PORT), then `run --engine URL` or `serve --engine
URL` submit their runs to the workers; all share --db.

record once, replay offline: `run QUERY --record run.jsonl` writes the model's answers to a
cassette; `run QUERY --replay run.jsonl` answers from it with no key and no network.

start with `pes-agent demo`: a whole run, offline, on a scripted model."""

_DB_HELP = (
    f"where threads are kept: a file path, sqlite:///PATH or "
    f"postgresql://USER@HOST/DB[?schema=NAME] "
    f"(default: ${DB_ENV_VAR}, else agent.db in your data directory)"
)


_EMBEDDINGS_HELP = (
    "how passages are embedded: hashing (the default: offline, matches shared words) or "
    "openai:MODEL, e.g. openai:text-embedding-3-small; search with the same as you indexed with"
)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (with a pointer to --help)."""

    def error(self, message: str) -> NoReturn:
        raise CLIError(f"{message} (see `{self.prog} --help`)")


def _thread(value: str) -> str:
    """A THREAD or --thread value, refused (a usage error, exit code 2) as the library would."""
    from pes_agent.threads.ids import thread_id_problem

    problem = thread_id_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return value


def _count(value: str) -> int:
    """A --max-* value: a whole number of 0 or more."""
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number of 0 or more, got {value!r}")
    return number


def _usage_limits(args: argparse.Namespace) -> UsageLimits | None:
    """The `UsageLimits` the --max-* options of `run` ask for; None without any."""
    from pes_agent.usage import UsageLimits

    limits = UsageLimits(
        total_tokens=args.max_tokens_total,
        requests=args.max_requests,
        tool_calls=args.max_tool_calls,
    )
    return None if limits.unlimited else limits


def _split(values: Sequence[str] | None) -> list[str]:
    """Values of a repeatable option that also takes commas: `--x a,b --x c` -> a, b, c."""
    return [part.strip() for value in values or () for part in value.split(",") if part.strip()]


def _add_agent_options(command: argparse.ArgumentParser) -> None:
    """--provider, --base-url, --tools, --system and --mcp: the agent `run` and `approve`
    build."""
    command.add_argument(
        "-p",
        "--provider",
        default=os.environ.get(PROVIDER_ENV_VAR) or DEFAULT_PROVIDER,
        help=f"NAME:MODEL, e.g. anthropic:claude-sonnet-4-5 or ollama:llama3.1 "
        f"(default: ${PROVIDER_ENV_VAR}, else {DEFAULT_PROVIDER})",
    )
    command.add_argument(
        "--base-url", help="an OpenAI-compatible server's URL, e.g. http://localhost:8000/v1"
    )
    command.add_argument(
        "--tools",
        action="append",
        metavar="MODULE:ATTR",
        help="a tool, or a list of tools, to import (repeat or separate with commas); the "
        "current directory is importable, e.g. --tools mytools:TOOLS",
    )
    command.add_argument("--system", metavar="PROMPT", help="the system prompt")
    command.add_argument(
        "--mcp",
        action="append",
        metavar="COMMAND",
        help="an MCP server to start over stdio whose tools the agent may call (repeatable), "
        "e.g. --mcp \"python my_server.py\" (needs pip install 'pes-agent[mcp]')",
    )


def build_parser() -> argparse.ArgumentParser:
    """The `pes-agent` argument parser and its subcommands."""
    from pes_agent import __version__

    parser = _Parser(
        prog="pes-agent",
        description="Run plan-execute-synthesize agents and look at what they did.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"pes-agent {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(name: str, help: str, description: str) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = commands.add_parser(
            name,
            help=help,
            description=textwrap.fill(description, 90),
            epilog=_EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        return sub

    run = add(
        "run",
        "answer a query with a real model, showing the run live",
        "Plan, run the tools (independent calls side by side) and answer QUERY, with a live "
        "view of the plan, the tool calls and the answer as they stream.",
    )
    run.add_argument("query", metavar="QUERY", help="what to ask")
    run.add_argument(
        "-t",
        "--thread",
        type=_thread,
        help="the thread to continue (default: a new one, printed at the end)",
    )
    _add_agent_options(run)
    run.add_argument("--db", help=_DB_HELP)
    run.add_argument(
        "--retrieve",
        action="store_true",
        help="search the index of --db (built by `pes-agent index`) for passages first",
    )
    run.add_argument("--embeddings", default="hashing", help=_EMBEDDINGS_HELP)
    run.add_argument(
        "--require-approval",
        action="append",
        metavar="TOOL",
        help="ask before each call of TOOL (repeat or separate with commas), on top of tools "
        "made with @tool(requires_approval=True)",
    )
    run.add_argument(
        "--no-input",
        action="store_true",
        help="never ask: a call that needs approval pauses the run (exit code 4) and the "
        "command to resume it is printed; also when stdin or stdout is not a terminal",
    )
    run.add_argument(
        "--max-tokens-total",
        type=_count,
        metavar="N",
        help="stop the run (an error, nothing saved) rather than let it use more than N tokens",
    )
    run.add_argument(
        "--max-requests", type=_count, metavar="N", help="stop the run before a model call past N"
    )
    run.add_argument(
        "--max-tool-calls", type=_count, metavar="N", help="stop the run before a tool call past N"
    )
    run.add_argument(
        "--engine",
        metavar="URL",
        help=f"submit the run to {ENGINE_HELP}: a `pes-agent worker` on the same --engine and "
        "--db runs it. The view shows the run's steps as the worker stores them (no streamed "
        "answer text: the answer shows when the run ends), and a call that needs approval "
        "pauses the run, as with --no-input",
    )
    cassette = run.add_mutually_exclusive_group()
    cassette.add_argument("--record", metavar="FILE", help=RECORD_HELP)
    cassette.add_argument("--replay", metavar="FILE", help=REPLAY_HELP)
    run.add_argument(
        "--json", action="store_true", help="print the final response and metadata as JSON"
    )

    approve = add(
        "approve",
        "resume a run that waits for approval",
        "Resume the run of THREAD that paused for approval (`pes-agent run --no-input`, or a "
        "run with no terminal to ask at): every pending call runs unless denied with --deny, "
        "and the rest of the run shows live. Pass the same --provider, --base-url, --tools "
        "and --system as the run: they run the tools and write the answer.",
    )
    approve.add_argument("thread", metavar="THREAD", type=_thread)
    approve.add_argument(
        "--deny",
        action="append",
        default=[],
        metavar="CALL_ID[=REASON]",
        help="do not run this call (repeatable); the model is told the reason",
    )
    approve.add_argument(
        "--trace", help="the paused run (or the start of its id), when the thread has several"
    )
    _add_agent_options(approve)
    approve.add_argument("--db", help=_DB_HELP)
    approve.add_argument(
        "--json", action="store_true", help="print the final response and metadata as JSON"
    )

    pending = add(
        "pending",
        "list the runs waiting for approval",
        "List the runs waiting for approval (of THREAD, or of every thread): their query, the "
        "calls waiting with their arguments, and when they expire.",
    )
    pending.add_argument("thread", metavar="THREAD", nargs="?", type=_thread)
    pending.add_argument("--db", help=_DB_HELP)
    pending.add_argument("--json", action="store_true", help="print JSON")

    cancel = add(
        "cancel",
        "drop the runs of a thread waiting for approval",
        "End the runs of THREAD waiting for approval as cancelled: none of their pending "
        "calls runs and no answer is saved; the thread takes new queries again.",
    )
    cancel.add_argument("thread", metavar="THREAD", type=_thread)
    cancel.add_argument("--db", help=_DB_HELP)

    demo = add(
        "demo",
        "a whole run offline, on a scripted model (no API key, no network)",
        "Watch a run of a scripted model with built-in tools: two lookups side by side, a "
        "call fed both results through {step_N_result} placeholders, then a call fed one "
        "field of that result. The run is saved in the store like any other (--db; by "
        "default the file in your data directory), so `pes-agent history demo` and "
        "`pes-agent trace demo --html trace.html` show it afterwards.",
    )
    demo.add_argument(
        "-t", "--thread", default="demo", type=_thread, help="the thread (default: demo)"
    )
    demo.add_argument("--db", help=_DB_HELP)
    demo.add_argument(
        "--json", action="store_true", help="print the final response and metadata as JSON"
    )

    serve = add(
        "serve",
        "serve the agent over HTTP (JSON and server-sent events)",
        "Run the HTTP API of pes_agent.server with uvicorn: runs, threads, live events and "
        "approvals. Set PES_AGENT_API_TOKEN to require a bearer token. --demo serves the "
        "offline demo agent (scripted model, built-in tools).",
    )
    _add_agent_options(serve)
    serve.add_argument("--db", help=_DB_HELP)
    serve.add_argument("--host", default="127.0.0.1", help="the address (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="the port (default: 8000)")
    serve.add_argument(
        "--workers", type=int, default=1, help="worker processes sharing --db (default: 1)"
    )
    serve.add_argument(
        "--cors-origin",
        action="append",
        metavar="ORIGIN",
        help="an origin browsers may call the API from (repeatable; default: none)",
    )
    serve.add_argument("--demo", action="store_true", help="serve the offline demo agent")
    serve.add_argument(
        "--engine",
        metavar="URL",
        help=f"submit the runs to {ENGINE_HELP}: `pes-agent worker` processes on the same "
        "--engine and --db run them, and cancelling or following a run from any server "
        "process goes through the engine",
    )

    worker = add(
        "worker",
        "run the runs submitted to a durable engine",
        "Take runs from a durable engine (submitted by `pes-agent run --engine`, `pes-agent "
        "serve --engine` or an agent made with create_agent(engine=...)) and run them here, "
        "with the agent the options build, as `run` builds it: its model calls and tools "
        "happen in this process, its observations and turns go to --db, which the submitting "
        "processes must share. Prints one line once ready; stops on Ctrl-C or SIGTERM (exit "
        "code 0): a run under way is taken over by the next worker with its --worker-id.",
    )
    worker.add_argument("--engine", required=True, metavar="URL", help=ENGINE_HELP)
    worker.add_argument(
        "--worker-id",
        metavar="ID",
        help="this worker's id (DBOS: default pes-agent-worker): unique among live workers, "
        "and the same when a worker restarts, so that it takes over the runs it left",
    )
    worker.add_argument(
        "--task-queue",
        metavar="QUEUE",
        help="the Temporal task queue to take runs from (temporal:// engines only; "
        "or write temporal://HOST:PORT/QUEUE)",
    )
    _add_agent_options(worker)
    worker.add_argument("--db", help=_DB_HELP)
    worker.add_argument(
        "--require-approval",
        action="append",
        metavar="TOOL",
        help="pause the run before each call of TOOL (repeat or separate with commas); "
        "`pes-agent approve THREAD` resumes it",
    )
    worker.add_argument(
        "--demo", action="store_true", help="run the offline demo agent's runs (for serve --demo)"
    )

    mcp_serve = add(
        "mcp-serve",
        "serve the agent over MCP (stdio or streamable HTTP)",
        "Serve the agent `run` builds as a Model Context Protocol server: a tool "
        "ask(query, thread_id) that runs it and returns the answer, its status and the thread "
        "id to continue with, and the threads' histories as resources "
        "(pes-agent://threads/{thread_id}). Over stdio (the default) an MCP client starts this "
        "command; with --transport streamable-http it listens at http://HOST:PORT/mcp (set "
        "PES_AGENT_API_TOKEN to require a bearer token). --demo serves the offline demo agent "
        "(scripted model, built-in tools).",
    )
    mcp_serve.add_argument(
        "--transport",
        choices=("stdio", "streamable-http"),
        default="stdio",
        help="how clients connect (default: stdio)",
    )
    mcp_serve.add_argument(
        "--host", default="127.0.0.1", help="the address (streamable-http; default: 127.0.0.1)"
    )
    mcp_serve.add_argument(
        "--port", type=int, default=8000, help="the port (streamable-http; default: 8000)"
    )
    _add_agent_options(mcp_serve)
    mcp_serve.add_argument("--db", help=_DB_HELP)
    mcp_serve.add_argument(
        "--require-approval",
        action="append",
        metavar="TOOL",
        help="pause the run before each call of TOOL (repeat or separate with commas); "
        "`pes-agent approve THREAD` resumes it",
    )
    mcp_serve.add_argument("--demo", action="store_true", help="serve the offline demo agent")

    index = add(
        "index",
        "index text files for `pes-agent run --retrieve`",
        "Cut the files (and the text files inside directories: .txt, .md, .markdown, .rst) "
        "into chunks, embed them and keep them in the SQLite file of --db, beside the threads. "
        "Indexing a file again replaces its chunks.",
    )
    index.add_argument("paths", nargs="+", metavar="PATH", help="files or directories")
    index.add_argument("--db", help=_DB_HELP)
    index.add_argument("--embeddings", default="hashing", help=_EMBEDDINGS_HELP)
    index.add_argument(
        "--chunk-size", type=int, default=800, help="characters per chunk (default: 800)"
    )
    index.add_argument(
        "--overlap", type=int, default=100, help="characters chunks share (default: 100)"
    )

    threads = add("threads", "list the threads in the store", "List the threads in the store.")
    threads.add_argument("--db", help=_DB_HELP)
    threads.add_argument("--json", action="store_true", help="print JSON")

    history = add("history", "show a thread's messages", "Show a thread's messages, oldest first.")
    history.add_argument("thread", metavar="THREAD", type=_thread)
    history.add_argument("-n", "--limit", type=int, help="only the newest N messages")
    history.add_argument("--db", help=_DB_HELP)
    history.add_argument("--json", action="store_true", help="print JSON")

    observations = add(
        "observations",
        "show what a thread's runs recorded",
        "Show the observations a thread's runs recorded, in order.",
    )
    observations.add_argument("thread", metavar="THREAD", type=_thread)
    observations.add_argument(
        "--type",
        action="append",
        metavar="TYPE",
        help="only these types (repeat or separate with commas), e.g. TOOL_CALL,TOOL_EXECUTION",
    )
    observations.add_argument("--trace-id", help="only this run")
    observations.add_argument("--db", help=_DB_HELP)
    observations.add_argument("--json", action="store_true", help="print JSON")

    trace = add(
        "trace",
        "draw one run as an HTML timeline",
        "Write a self-contained HTML timeline of one run: LLM calls and tool calls as bars on "
        "a time axis; click a bar for its arguments and result, or its error.",
    )
    trace.add_argument("thread", metavar="THREAD", type=_thread)
    trace.add_argument(
        "--trace-id", help="the run (or the start of its id; default: the thread's latest)"
    )
    trace.add_argument("--html", required=True, metavar="PATH", help="the file to write")
    trace.add_argument("--db", help=_DB_HELP)

    from pes_agent.cli.evals import add_eval_options

    evaluate = add(
        "eval",
        "run a pydantic-evals dataset of queries against the agent",
        "Ask the agent `run` builds (or the offline demo agent, --demo) each case of DATASET, "
        "a pydantic-evals YAML file whose evaluators are named by class (CalledTools, "
        "MaxToolCalls, Status, AnswerContains, PlanDepthAtMost, LLMJudge and pydantic-evals' "
        "own), print the report, and exit 1 when a case fails (2 when the file cannot be "
        "read). Needs pip install 'pes-agent[evals]'.",
    )
    _add_agent_options(evaluate)
    add_eval_options(evaluate)
    return parser


def _configure_logging(debug: bool) -> None:
    from pes_agent.observing.logs import configure_logging

    # The command reports a failed run itself, in one line; the library's own log lines
    # (which name the same failure) show only when debugging.
    configure_logging(logging.DEBUG if debug else logging.CRITICAL)


class _OutputClosed(Exception):
    """Standard output was closed by its reader."""


def _command(args: argparse.Namespace) -> Callable[[], Coroutine[Any, Any, ExitCode]]:
    from rich.console import Console

    from pes_agent.cli import approvals, index, runner, store_commands

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            # The reader went away (`pes-agent observations T | head`): not a failure.
            raise _OutputClosed

    console = _Console(highlight=False)
    store = resolve_store(args.db)
    if args.command == "run":
        return lambda: runner.run_command(
            query=args.query,
            provider=args.provider,
            base_url=args.base_url,
            thread_id=args.thread,
            tool_specs=_split(args.tools),
            store=store,
            system_prompt=args.system,
            as_json=args.json,
            console=console,
            embeddings=args.embeddings if args.retrieve else None,
            require_approval=_split(args.require_approval),
            no_input=args.no_input,
            mcp_commands=args.mcp or (),
            usage_limits=_usage_limits(args),
            engine_url=args.engine,
            record=args.record,
            replay=args.replay,
        )
    if args.command == "worker":
        from pes_agent.cli.worker import worker_command

        return lambda: worker_command(
            engine_url=args.engine,
            worker_id=args.worker_id,
            task_queue=args.task_queue,
            provider=args.provider,
            base_url=args.base_url,
            tool_specs=_split(args.tools),
            store=store,
            system_prompt=args.system,
            mcp_commands=args.mcp or (),
            require_approval=_split(args.require_approval),
            demo=args.demo,
            console=console,
        )
    if args.command == "mcp-serve":
        from pes_agent.cli.mcp_serve import mcp_serve_command

        return lambda: mcp_serve_command(
            transport=args.transport,
            host=args.host,
            port=args.port,
            provider=args.provider,
            base_url=args.base_url,
            tool_specs=_split(args.tools),
            store=store,
            system_prompt=args.system,
            mcp_commands=args.mcp or (),
            require_approval=_split(args.require_approval),
            demo=args.demo,
        )
    if args.command == "approve":
        return lambda: approvals.approve_command(
            thread_id=args.thread,
            denials=approvals.parse_denials(args.deny),
            trace_id=args.trace,
            provider=args.provider,
            base_url=args.base_url,
            tool_specs=_split(args.tools),
            system_prompt=args.system,
            mcp_commands=args.mcp or (),
            store=store,
            as_json=args.json,
            console=console,
        )
    if args.command == "pending":
        return lambda: approvals.pending_command(
            store, args.thread, console=console, as_json=args.json
        )
    if args.command == "cancel":
        return lambda: approvals.cancel_command(store, args.thread, console=console)
    if args.command == "demo":
        return lambda: runner.demo_command(
            thread_id=args.thread, store=store, as_json=args.json, console=console
        )
    if args.command == "index":
        return lambda: index.index_command(
            paths=args.paths,
            store=store,
            embeddings=args.embeddings,
            chunk_size=args.chunk_size,
            overlap=args.overlap,
            console=console,
        )
    if args.command == "threads":
        return lambda: store_commands.threads_command(store, console=console, as_json=args.json)
    if args.command == "history":
        if args.limit is not None and args.limit < 0:
            raise CLIError(f"--limit must be 0 or more, got {args.limit}")
        return lambda: store_commands.history_command(
            store, args.thread, limit=args.limit, console=console, as_json=args.json
        )
    if args.command == "observations":
        types = store_commands.parse_observation_types(_split(args.type))
        return lambda: store_commands.observations_command(
            store,
            args.thread,
            types=types,
            trace_id=args.trace_id,
            console=console,
            as_json=args.json,
        )
    if args.command == "eval":
        from pes_agent.cli.evals import eval_command, eval_options

        options = eval_options(args, store, _split(args.tools))
        return lambda: eval_command(options, console=console)
    if args.command == "trace":
        return lambda: store_commands.trace_command(
            store, args.thread, trace_id=args.trace_id, out=Path(args.html), console=console
        )
    raise AssertionError(f"unhandled command {args.command!r}")


def _serve(args: argparse.Namespace) -> ExitCode:
    from pes_agent.cli.serve import ServeOptions, serve_command

    options = ServeOptions(
        provider=args.provider,
        db=args.db,
        base_url=args.base_url,
        tool_specs=tuple(_split(args.tools)),
        system_prompt=args.system,
        demo=args.demo,
        cors_origins=tuple(_split(args.cors_origin)),
        engine=args.engine,
    )
    return serve_command(options, host=args.host, port=args.port, workers=args.workers)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `pes-agent` command line with `argv` (default: `sys.argv[1:]`); returns the
    exit code."""
    debug = os.environ.get(DEBUG_ENV_VAR, "") not in ("", "0")
    try:
        import rich  # noqa: F401
    except ImportError:
        report("error: the command line needs rich: pip install 'pes-agent[cli]'")
        return ExitCode.USAGE
    for stream in (sys.stdout, sys.stderr):
        # Model text is Unicode; a terminal or pipe that cannot show a character gets "?"
        # rather than a crash (JSON output escapes instead, see write_json).
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="replace")
    try:
        args = build_parser().parse_args(argv)
        _configure_logging(debug)
        if args.command == "serve":
            # uvicorn runs its own event loop (and, with --workers, its worker processes).
            return int(_serve(args))
        command = _command(args)
        return int(asyncio.run(command()))
    except KeyboardInterrupt:
        report("interrupted: the run was cancelled")
        return ExitCode.INTERRUPTED
    except (_OutputClosed, BrokenPipeError):
        # Python would complain again at exit while flushing the dead pipe.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return ExitCode.OK
    except CLIError as error:
        report(f"error: {error.message}")
        return error.code
    except Exception as error:
        if debug:
            raise
        from pes_agent.errors import PESAgentError, UsageError

        if isinstance(error, UsageError):
            report(f"error: {error.message}")
            return ExitCode.USAGE
        if isinstance(error, PESAgentError):
            report(f"error: {error.message}")
            return ExitCode.RUN_ERROR
        report(
            f"error: unexpected {type(error).__name__}: {error} "
            f"(set {DEBUG_ENV_VAR}=1 for the traceback)"
        )
        return ExitCode.RUN_ERROR


if __name__ == "__main__":
    sys.exit(main())
