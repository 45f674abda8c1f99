"""PES against ReAct on the same tasks: model calls, prompt tokens and wall time.

Each task needs 3-8 tool calls, some independent, some fed by earlier results. It runs
through the PES agent (`create_agent` + `process`: one planning call with every tool call,
then one synthesis call), through the PES agent with re-evaluation
(`create_agent(reevaluate="each_wave")`: one more call after every wave that leaves calls to
run), and through a ReAct entity (`pes_agent.ecs` ReasoningSystem + ToolExecutionSystem ticked
by `ecs_core.Runner`). The models are scripted and make the right moves; what differs is only
how each architecture uses the model.

Assumptions, printed with the results:
- PES with re-evaluation: the model reads each re-evaluation prompt (goal, plan, the results
  so far, the calls not yet run) and keeps the plan (`{"keep": true}`), as it should when the
  plan was right; the row is the price of asking: extra calls, their prompts and their latency.
  How many waves a plan has depends on when its tools finish, so the count can vary per run.
- ReAct at its best: each turn issues every call whose inputs are known, as parallel native
  tool calls, so it takes one turn per dependency level plus the final answer. It reads the
  actual results from its conversation to fill dependent arguments.
- Model time: a fixed time to first token per call plus a time per output token (tool-call
  arguments included); prompt processing is taken as free, which favours ReAct's growing
  prompts. Tools sleep 50-300 ms each.
- Prompt tokens: every request's messages, tool calls and native tool schemas, counted with
  tiktoken o200k_base when installed, else about four characters a token (the output says
  which).

Medians over `--repeats` interleaved repetitions (the order of the three rotates per run).

    python benchmarks/pes_vs_react.py [--repeats N] [--tasks N] [--ttft-ms MS]
                                      [--ms-per-token MS] [--tool-scale X] [--react-sequential]
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import hashlib
import json
import operator
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from _table import print_table

from ecs_core import Runner, World
from pes_agent import AgentProps, configure_logging, create_agent
from pes_agent.config import Reevaluate
from pes_agent.ecs import (
    ChatMessage,
    ConversationComponent,
    ErrorHandlingSystem,
    LLMComponent,
    ReasoningSystem,
    SystemPromptComponent,
    ToolCall,
    ToolExecutionSystem,
    ToolRegistryComponent,
    close_services,
)
from pes_agent.ecs.compaction import estimate_tokens, tokenizer_name
from pes_agent.execution.placeholders import find_references, resolve_placeholders
from pes_agent.providers.base import LLMRequest, ProviderEvent, TokenDelta, ToolCallEvent
from pes_agent.testing import ScriptedProvider, ScriptedResponse, ScriptEntry
from pes_agent.tools import FunctionTool, tool

# --- tools: deterministic answers after realistic latencies --------------------------------

TOOL_SCALE = 1.0  # --tool-scale multiplies every tool latency (the smoke test shrinks them)


async def _latency(ms: float) -> None:
    await asyncio.sleep(ms / 1000 * TOOL_SCALE)


def _number(seed: str, low: float, high: float) -> float:
    digest = int(hashlib.sha256(seed.encode()).hexdigest()[:8], 16)
    return round(low + (high - low) * digest / 0xFFFFFFFF, 2)


@tool
async def web_search(query: str) -> dict[str, Any]:
    """Search the web; returns the top three results with title, URL and snippet."""
    await _latency(300)
    slug = query.lower().replace(" ", "-")
    return {
        "query": query,
        "results": [
            {
                "title": f"{query.title()}: what to know ({n})",
                "url": f"https://news.example.com/{slug}/{n}",
                "snippet": f"A look at {query} from source {n}: recent figures, the main "
                "players, what changed this year and what experts expect next.",
            }
            for n in range(1, 4)
        ],
    }


@tool
async def fetch_page(url: str) -> dict[str, Any]:
    """Fetch a web page; returns its title, a summary and the main text."""
    await _latency(250)
    topic = url.rstrip("/").split("/")[-2].replace("-", " ")
    text = (
        f"{topic.capitalize()} have drawn attention this year. Analysts point to lower costs, "
        "new manufacturing capacity and policy support, while critics note supply constraints "
        "and uneven adoption across regions. Early deployments report reliability in line with "
        "expectations; the next two years will show whether prices keep falling. "
    ) * 2
    return {
        "url": url,
        "title": f"Everything about {topic}",
        "summary": f"{topic.capitalize()}: costs falling, capacity growing, adoption uneven.",
        "text": text.strip(),
    }


@tool
async def translate(text: str, target_language: str) -> dict[str, str]:
    """Translate text into the target language (ISO code)."""
    await _latency(200)
    return {"language": target_language, "translation": f"[{target_language}] {text}"}


@tool
async def extract_facts(texts: list[str]) -> dict[str, Any]:
    """Extract the key facts from several texts, to compare them."""
    await _latency(150)
    return {"facts": [f"text {n + 1}: {t.split('.')[0]}." for n, t in enumerate(texts)]}


@tool
async def get_weather(city: str) -> dict[str, Any]:
    """Current weather in a city: temperature (°C), conditions, humidity and wind."""
    await _latency(120)
    return {
        "city": city,
        "temp_c": _number(city, -5, 32),
        "conditions": "partly cloudy",
        "humidity_pct": int(_number(city + "h", 30, 90)),
        "wind_kph": _number(city + "w", 0, 40),
    }


@tool
async def get_population(city: str) -> dict[str, Any]:
    """Population of a city (latest census year)."""
    await _latency(100)
    return {"city": city, "population": int(_number(city, 200_000, 9_000_000)), "year": 2023}


@tool
async def stock_quote(symbol: str) -> dict[str, Any]:
    """Latest stock quote for a ticker symbol, in USD."""
    await _latency(150)
    return {
        "symbol": symbol,
        "price": _number(symbol, 20, 900),
        "currency": "USD",
        "change_pct": _number(symbol + "c", -3, 3),
    }


@tool
async def convert_currency(amount: float, from_currency: str, to_currency: str) -> dict[str, Any]:
    """Convert an amount between currencies at today's rate."""
    await _latency(80)
    rate = _number(from_currency + to_currency, 0.8, 1.2)
    return {"amount": amount, "rate": rate, "converted": round(amount * rate, 2)}


@tool
async def hotel_search(city: str) -> dict[str, Any]:
    """Hotels in a city with their price per night in EUR and rating."""
    await _latency(250)
    return {
        "city": city,
        "hotels": [
            {
                "name": f"Hotel {name} {city}",
                "price_per_night_eur": _number(city + name, 70, 260),
                "rating": _number(name, 3.5, 4.9),
            }
            for name in ("Central", "Miradouro", "Rio")
        ],
    }


_OPERATORS: dict[type[ast.AST], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def _arithmetic(node: ast.AST) -> float:
    """+ - * / on numbers only: model text is never eval'd."""
    if isinstance(node, ast.Expression):
        return _arithmetic(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_arithmetic(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_arithmetic(node.left), _arithmetic(node.right))
    raise ValueError(f"not plain arithmetic: {ast.dump(node)}")


@tool
async def calculator(expression: str) -> dict[str, Any]:
    """Evaluate an arithmetic expression (+, -, *, /, parentheses)."""
    await _latency(50)
    return {
        "expression": expression,
        "result": round(_arithmetic(ast.parse(expression, mode="eval")), 2),
    }


TOOLS: tuple[FunctionTool[..., Any], ...] = (
    web_search,
    fetch_page,
    translate,
    extract_facts,
    get_weather,
    get_population,
    stock_quote,
    convert_currency,
    hotel_search,
    calculator,
)

# --- tasks ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Step:
    """One tool call of a task; `{step_N_result...}` placeholders name the calls it needs."""

    tool: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Task:
    name: str
    query: str
    steps: tuple[Step, ...]
    answer: str
    levels: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        levels: list[int] = []
        for step in self.steps:
            needs = find_references(step.arguments)
            levels.append(1 + max((levels[n - 1] for n in needs), default=0))
        object.__setattr__(self, "levels", tuple(levels))

    @property
    def depth(self) -> int:
        return max(self.levels)


def _quotes(symbols: Sequence[str]) -> tuple[Step, ...]:
    return tuple(Step("stock_quote", {"symbol": s}) for s in symbols)


TASKS = (
    Task(
        "weather average",
        "What's the weather in Paris, Tokyo and New York, and their average temperature?",
        (
            Step("get_weather", {"city": "Paris"}),
            Step("get_weather", {"city": "Tokyo"}),
            Step("get_weather", {"city": "New York"}),
            Step(
                "calculator",
                {
                    "expression": "({step_1_result.temp_c} + {step_2_result.temp_c} + "
                    "{step_3_result.temp_c}) / 3"
                },
            ),
        ),
        "Paris, Tokyo and New York are partly cloudy; their average temperature is given above.",
    ),
    Task(
        "read and translate",
        "Find the latest news on solid-state batteries, read the top article and give me its "
        "summary in French.",
        (
            Step("web_search", {"query": "solid-state batteries"}),
            Step("fetch_page", {"url": "{step_1_result.results[0].url}"}),
            Step(
                "translate",
                {"text": "{step_2_result.summary}", "target_language": "fr"},
            ),
        ),
        "Résumé : les coûts baissent, la capacité augmente, l'adoption reste inégale.",
    ),
    Task(
        "portfolio in EUR",
        "What are AAPL, MSFT and NVDA trading at, in euros?",
        (
            *_quotes(["AAPL", "MSFT", "NVDA"]),
            *(
                Step(
                    "convert_currency",
                    {
                        "amount": f"{{step_{n}_result.price}}",
                        "from_currency": "USD",
                        "to_currency": "EUR",
                    },
                )
                for n in (1, 2, 3)
            ),
        ),
        "In euros: AAPL, MSFT and NVDA convert at today's USD/EUR rate as listed.",
    ),
    Task(
        "population total",
        "How many people live in Paris, Berlin, Madrid and Rome together?",
        (
            *(Step("get_population", {"city": c}) for c in ("Paris", "Berlin", "Madrid", "Rome")),
            Step(
                "calculator",
                {
                    "expression": "{step_1_result.population} + {step_2_result.population} + "
                    "{step_3_result.population} + {step_4_result.population}"
                },
            ),
        ),
        "Together the four capitals have the total population computed above.",
    ),
    Task(
        "compare two topics",
        "Compare what the web says about heat pumps and about gas boilers.",
        (
            Step("web_search", {"query": "heat pumps"}),
            Step("web_search", {"query": "gas boilers"}),
            Step("fetch_page", {"url": "{step_1_result.results[0].url}"}),
            Step("fetch_page", {"url": "{step_2_result.results[0].url}"}),
            Step("extract_facts", {"texts": ["{step_3_result.text}", "{step_4_result.text}"]}),
        ),
        "Heat pumps: falling costs, growing capacity. Gas boilers: cheaper up front, policy "
        "headwinds. Both see uneven adoption.",
    ),
    Task(
        "weekend budget",
        "Plan a weekend in Lisbon: the weather, things to do, hotels, and what is left of my "
        "800 USD in euros after two nights at the first hotel.",
        (
            Step("get_weather", {"city": "Lisbon"}),
            Step("web_search", {"query": "things to do in Lisbon"}),
            Step("hotel_search", {"city": "Lisbon"}),
            Step(
                "convert_currency",
                {"amount": 800, "from_currency": "USD", "to_currency": "EUR"},
            ),
            Step(
                "calculator",
                {
                    "expression": "{step_4_result.converted} - 2 * "
                    "{step_3_result.hotels[0].price_per_night_eur}"
                },
            ),
        ),
        "Lisbon is partly cloudy; see the sights listed; after two nights you keep the amount "
        "computed above.",
    ),
    Task(
        "market scan",
        "Give me quotes for AAPL, MSFT, NVDA, GOOG, AMZN, META, TSLA and AMD.",
        _quotes(["AAPL", "MSFT", "NVDA", "GOOG", "AMZN", "META", "TSLA", "AMD"]),
        "Quotes for the eight symbols are listed above with their daily change.",
    ),
)

# --- the model: scripted moves, paced like a real one ----------------------------------------


@dataclass(slots=True)
class PacedModel:
    """A scripted model that takes `ttft_s` before its first token and `s_per_token` for each
    output token; it records every request for counting. Re-evaluation requests (phase
    `reevaluation`) take their answers from `reevaluation`, the others from `script`."""

    script: ScriptedProvider
    ttft_s: float
    s_per_token: float
    reevaluation: ScriptedProvider | None = None

    @property
    def name(self) -> str:
        return self.script.name

    @property
    def model(self) -> str:
        return self.script.model

    @property
    def requests(self) -> list[LLMRequest]:
        extra = self.reevaluation.requests if self.reevaluation else []
        return [*self.script.requests, *extra]

    async def stream(self, request: LLMRequest) -> AsyncIterator[ProviderEvent]:
        script = self.script
        if request.phase == "reevaluation":
            if self.reevaluation is None:
                raise RuntimeError("a re-evaluation request to a model scripted without one")
            script = self.reevaluation
        await asyncio.sleep(self.ttft_s)
        async for event in script.stream(request):
            if isinstance(event, TokenDelta):
                await asyncio.sleep(estimate_tokens(event.text) * self.s_per_token)
            elif isinstance(event, ToolCallEvent):
                text = event.call.name + json.dumps(event.call.arguments)
                await asyncio.sleep(estimate_tokens(text) * self.s_per_token)
            yield event

    async def aclose(self) -> None:
        """Nothing to release."""


def prompt_tokens(requests: Sequence[LLMRequest]) -> int:
    """Everything each request sends the model: messages, their tool calls, native tools."""
    total = 0
    for request in requests:
        for message in request.messages:
            total += estimate_tokens(message.content)
            for call in message.tool_calls:
                total += estimate_tokens(call.id + call.name + json.dumps(call.arguments))
        for schema in request.tools:
            total += estimate_tokens(schema.model_dump_json())
        if request.response_format:
            total += estimate_tokens(json.dumps(request.response_format))
    return total


def _plan_line(n: int, step: Step) -> str:
    """A plan line as a model writes it: the tool, its literal inputs, the steps it needs."""
    needs = sorted(find_references(step.arguments))
    literals = [str(v) for v in step.arguments.values() if not find_references(v)]
    line = f"{n}. {step.tool}" + (f" {', '.join(literals)}" if literals else "")
    return line + (f" using step {', '.join(map(str, needs))}" if needs else "")


def pes_script(task: Task) -> list[ScriptEntry]:
    """The PES model's moves: one plan with every call (placeholders for results), an answer."""
    plan = {
        "title": task.name.capitalize(),
        "intent": f"Answer: {task.query}",
        "plan": "\n".join(_plan_line(n, step) for n, step in enumerate(task.steps, 1))
        + f"\n{len(task.steps) + 1}. Answer from the results.",
        "toolCalls": [
            {"callId": f"call_{n}", "toolName": step.tool, "arguments": step.arguments}
            for n, step in enumerate(task.steps, 1)
        ],
    }
    return [json.dumps(plan), task.answer]


def keep_plan(request: LLMRequest) -> str:
    """The re-evaluating model's move: the plan was right, so it keeps the calls not yet run."""
    prompt = request.messages[-1].content
    if "# Not run yet" not in prompt or "success:" not in prompt:
        raise RuntimeError("the re-evaluation prompt lacks the results or the pending calls")
    return '{"keep": true}'


def react_script(task: Task, *, sequential: bool = False) -> list[ScriptEntry]:
    """The ReAct model's moves: per dependency level, every call whose inputs are known, with
    arguments filled from the tool results it has read; then the answer. `sequential`: one
    call per turn instead (the classic ReAct loop)."""

    def turn(level: int) -> Callable[[LLMRequest], ScriptedResponse]:
        def move(request: LLMRequest) -> ScriptedResponse:
            results = {
                int(message.tool_call_id.removeprefix("call_")): json.loads(message.content)
                for message in request.messages
                if message.role == "tool" and message.tool_call_id
            }
            calls = [
                ToolCall(f"call_{n}", step.tool, resolve_placeholders(step.arguments, results))
                for n, step in enumerate(task.steps, 1)
                if (n if sequential else task.levels[n - 1]) == level
            ]
            return ScriptedResponse(tool_calls=calls)

        return move

    turns = len(task.steps) if sequential else task.depth
    return [*(turn(level) for level in range(1, turns + 1)), task.answer]


REACT_PROMPT = (
    "You are a helpful assistant. Use the tools to answer the user's question; call tools "
    "whose inputs you already have in parallel, then answer briefly from their results."
)


@dataclass(slots=True)
class Measure:
    model_calls: int
    prompt_tokens: int
    wall_ms: float
    reevaluations: int = 0


REACT_SEQUENTIAL = False  # --react-sequential: one tool call per ReAct turn


async def run_pes(
    task: Task, ttft_s: float, s_per_token: float, *, reevaluate: bool = False
) -> Measure:
    keep = ScriptedProvider([keep_plan], repeat=True) if reevaluate else None
    script = ScriptedProvider(pes_script(task), chunk_size=32)
    model = PacedModel(script, ttft_s, s_per_token, keep)
    mode: Reevaluate = "each_wave" if reevaluate else "never"
    async with create_agent(provider=model, tools=TOOLS, reevaluate=mode) as agent:
        started = time.perf_counter()
        result = await agent.process(AgentProps(task.query, "bench"))
        wall = (time.perf_counter() - started) * 1000
    meta = result.metadata
    if meta.status != "success" or meta.tool_calls != len(task.steps):
        raise RuntimeError(f"PES run of {task.name!r} failed: {meta.status} {meta.error}")
    reevaluations = len(keep.requests) if keep else 0
    return Measure(len(model.requests), prompt_tokens(model.requests), wall, reevaluations)


async def run_pes_reevaluating(task: Task, ttft_s: float, s_per_token: float) -> Measure:
    return await run_pes(task, ttft_s, s_per_token, reevaluate=True)


async def run_react(task: Task, ttft_s: float, s_per_token: float) -> Measure:
    script = react_script(task, sequential=REACT_SEQUENTIAL)
    model = PacedModel(ScriptedProvider(script, chunk_size=32), ttft_s, s_per_token)
    world = World()
    world.register_system(ReasoningSystem(), priority=0)
    world.register_system(ToolExecutionSystem(), priority=5)
    world.register_system(ErrorHandlingSystem(), priority=99)
    entity = world.create_entity(
        LLMComponent(model),
        SystemPromptComponent(REACT_PROMPT),
        ConversationComponent([ChatMessage("user", task.query)]),
        ToolRegistryComponent(list(TOOLS)),
    )
    try:
        started = time.perf_counter()
        run = await Runner().run(world, until=entity, max_ticks=4 * len(task.steps) + 4)
        wall = (time.perf_counter() - started) * 1000
    finally:
        await close_services(world)
    conversation = world.require_component(entity, ConversationComponent)
    failed = [
        m.content
        for m in conversation.messages
        if m.role == "tool" and m.content.startswith("Error:")
    ]
    terminal = run.terminals.get(entity)
    if terminal is None or terminal.reason != "reasoning_complete" or failed:
        raise RuntimeError(f"ReAct run of {task.name!r} failed: {terminal} {failed[:1]}")
    return Measure(len(model.requests), prompt_tokens(model.requests), wall)


async def main(args: argparse.Namespace) -> None:
    global TOOL_SCALE, REACT_SEQUENTIAL
    TOOL_SCALE = args.tool_scale
    REACT_SEQUENTIAL = args.react_sequential
    configure_logging("WARNING")
    ttft_s, s_per_token = args.ttft_ms / 1000, args.ms_per_token / 1000
    tasks = TASKS[: args.tasks]
    kinds: list[tuple[str, Callable[[Task, float, float], Awaitable[Measure]]]] = [
        ("pes", run_pes),
        ("pes_re", run_pes_reevaluating),
        ("react", run_react),
    ]
    for _, run in kinds:
        await run(tasks[0], 0, 0)  # warm-up: imports, schema caches
    samples: dict[tuple[str, str], list[Measure]] = {}
    for repeat in range(args.repeats):
        for index, task in enumerate(tasks):
            shift = (repeat + index) % len(kinds)  # rotated: none always goes first
            for kind, run in kinds[shift:] + kinds[:shift]:
                samples.setdefault((task.name, kind), []).append(
                    await run(task, ttft_s, s_per_token)
                )

    def median(task: Task, kind: str) -> Measure:
        runs = samples[(task.name, kind)]
        return Measure(
            round(statistics.median(m.model_calls for m in runs)),
            round(statistics.median(m.prompt_tokens for m in runs)),
            statistics.median(m.wall_ms for m in runs),
            round(statistics.median(m.reevaluations for m in runs)),
        )

    rows: list[list[object]] = []
    rows_re: list[list[object]] = []
    totals = {kind: Measure(0, 0, 0.0) for kind, _ in kinds}
    for task in tasks:
        measures = {kind: median(task, kind) for kind, _ in kinds}
        for kind, measure in measures.items():
            total = totals[kind]
            total.model_calls += measure.model_calls
            total.prompt_tokens += measure.prompt_tokens
            total.wall_ms += measure.wall_ms
            total.reevaluations += measure.reevaluations
        shape = f"{len(task.steps)}/{task.depth}"
        rows.append(_row(task.name, shape, measures["pes"], measures["react"]))
        rows_re.append(_row_re(task.name, shape, measures["pes_re"], measures))
    rows.append(_row("all tasks", "", totals["pes"], totals["react"]))
    rows_re.append(_row_re("all tasks", "", totals["pes_re"], totals))
    print_table(
        f"PES vs ReAct on {len(tasks)} tasks (medians of {args.repeats} interleaved runs; "
        f"model {args.ttft_ms:g} ms to first token + {args.ms_per_token:g} ms/output token; "
        f"tools 50-300 ms x{args.tool_scale:g}; prompt tokens by {tokenizer_name()})",
        [
            "task",
            "calls/levels",
            "PES calls",
            "ReAct calls",
            "PES prompt tok",
            "ReAct prompt tok",
            "tok PES/ReAct",
            "PES wall ms",
            "ReAct wall ms",
            "wall PES/ReAct",
        ],
        rows,
    )
    print_table(
        "PES with re-evaluation after each wave (reevaluate='each_wave'; the model keeps the "
        "plan), against PES without and ReAct",
        [
            "task",
            "calls/levels",
            "re-evals",
            "calls",
            "prompt tok",
            "tok vs PES",
            "tok vs ReAct",
            "wall ms",
            "wall vs PES",
            "wall vs ReAct",
        ],
        rows_re,
    )
    react_moves = (
        "one tool call per turn (classic ReAct), then the answer"
        if REACT_SEQUENTIAL
        else "at best, one turn per dependency level with that level's calls as parallel "
        "native tool calls, then the answer"
    )
    print(
        f"\nReAct assumption: {react_moves}; PES: one plan with every call, then the answer. "
        "Prompt processing time is not modelled (it would add to ReAct's longer prompts)."
    )
    pes, pes_re, react = totals["pes"], totals["pes_re"], totals["react"]
    print(
        f"pes_reevaluate: re-evaluations {pes_re.reevaluations}, "
        f"model calls {pes_re.model_calls}/{pes.model_calls} = "
        f"{pes_re.model_calls / pes.model_calls:.2f}, "
        f"prompt tokens {pes_re.prompt_tokens}/{pes.prompt_tokens} = "
        f"{pes_re.prompt_tokens / pes.prompt_tokens:.2f}, "
        f"wall ms {pes_re.wall_ms:.0f}/{pes.wall_ms:.0f} = {pes_re.wall_ms / pes.wall_ms:.2f}"
    )
    print(
        f"pes_vs_react: tasks {len(tasks)}, "
        f"model calls {pes.model_calls}/{react.model_calls} = "
        f"{pes.model_calls / react.model_calls:.2f}, "
        f"prompt tokens {pes.prompt_tokens}/{react.prompt_tokens} = "
        f"{pes.prompt_tokens / react.prompt_tokens:.2f}, "
        f"wall ms {pes.wall_ms:.0f}/{react.wall_ms:.0f} = {pes.wall_ms / react.wall_ms:.2f} "
        f"(tokens: {tokenizer_name()})"
    )


def _row(name: str, shape: str, pes: Measure, react: Measure) -> list[object]:
    return [
        name,
        shape,
        pes.model_calls,
        react.model_calls,
        pes.prompt_tokens,
        react.prompt_tokens,
        pes.prompt_tokens / react.prompt_tokens,
        round(pes.wall_ms, 1),
        round(react.wall_ms, 1),
        pes.wall_ms / react.wall_ms,
    ]


def _row_re(name: str, shape: str, pes_re: Measure, others: dict[str, Measure]) -> list[object]:
    pes, react = others["pes"], others["react"]
    return [
        name,
        shape,
        pes_re.reevaluations,
        pes_re.model_calls,
        pes_re.prompt_tokens,
        pes_re.prompt_tokens / pes.prompt_tokens,
        pes_re.prompt_tokens / react.prompt_tokens,
        round(pes_re.wall_ms, 1),
        pes_re.wall_ms / pes.wall_ms,
        pes_re.wall_ms / react.wall_ms,
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="interleaved runs per task")
    parser.add_argument("--tasks", type=int, default=len(TASKS), help="run the first N tasks")
    parser.add_argument("--ttft-ms", type=float, default=150.0, help="model time to first token")
    parser.add_argument("--ms-per-token", type=float, default=4.0, help="model time per token")
    parser.add_argument("--tool-scale", type=float, default=1.0, help="tool latency multiplier")
    parser.add_argument(
        "--react-sequential",
        action="store_true",
        help="ReAct makes one tool call per turn instead of a level's calls in parallel",
    )
    asyncio.run(main(parser.parse_args()))
