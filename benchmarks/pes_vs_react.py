"""PES against ReAct on the same tasks: model calls, prompt tokens and wall time.

Each task needs 1-20 tool calls, some independent, some fed by earlier results, and some
language steps (text work a model does between the tools). It runs through the PES agent
(`create_agent` + `process`: one planning call with every call, one model call per language
step, then one synthesis call), through the PES agent with re-evaluation
(`create_agent(reevaluate="each_wave")`: one more call after every wave that leaves calls to
run), and through a ReAct entity (`pes_agent.ecs` ReasoningSystem + ToolExecutionSystem ticked
by `ecs_core.Runner`). The models are scripted and make the right moves; what differs is only
how each architecture uses the model.

Assumptions, printed with the results:
- PES: the planner writes exactly what the planning prompt asks for (the compact protocol:
  every call on its own numbered line, `N. tool(param=value)`, a language step as
  `N. language_step("instruction")`, then `Intent: ` and a few words), and answers each
  language step with a text that depends on its filled-in instruction. Each call starts as
  soon as its line is written (streaming dispatch).
- PES with re-evaluation: the model reads each re-evaluation prompt (goal, plan, the results
  so far, the calls not yet run) and keeps the plan (`{"keep": true}`), as it should when the
  plan was right; the row is the price of asking: extra calls, their prompts and their latency.
  How many waves a plan has depends on when its tools finish, so the count can vary per run.
- ReAct at its best: each turn issues every call whose inputs are known, as parallel native
  tool calls, so it takes one turn per dependency level plus the final answer. It reads the
  actual results from its conversation to fill dependent arguments. ReAct has no language
  steps: its model writes the same text itself, as the content of the first turn that has
  what the text needs, and copies it literally into the arguments of the calls that use it.
- Model time, for every call of both: the prompt's processing (`--prompt-ms-per-1k`, default
  0, which favours ReAct's growing prompts), a fixed time to first token, then a time per
  output token (tool-call arguments included), on a schedule counted from the call's start so
  that timer lateness does not add up; text streams in chunks of about one token. Tools sleep
  50 ms-2 s each.
- Prompt tokens: every request's messages, tool calls and native tool schemas, counted with
  tiktoken o200k_base when installed, else about four characters a token (the output says
  which).

Medians over `--repeats` interleaved repetitions (the order of the three rotates per run).
The issue's targets over the whole task set are checked and printed: PES wall <= 0.75x ReAct,
no task above 1.0x, prompt tokens <= 0.4x.

    python benchmarks/pes_vs_react.py [--repeats N] [--tasks N] [--ttft-ms MS]
                                      [--ms-per-token MS] [--prompt-ms-per-1k MS]
                                      [--chunk-chars N] [--tool-scale X] [--react-sequential]
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import hashlib
import json
import operator
import re
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
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
from pes_agent.execution.placeholders import (
    find_references,
    resolve_placeholders,
    resolve_text,
)
from pes_agent.providers.base import (
    LLMRequest,
    ProviderEvent,
    StreamMetadata,
    TokenDelta,
    ToolCallEvent,
)
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


@tool
async def query_database(sql: str) -> dict[str, Any]:
    """Run a read-only SQL query on the analytics warehouse; returns the rows (slow: 1-2 s)."""
    await _latency(_number(sql, 1000, 2000))
    return {
        "sql": sql,
        "rows": [
            {"region": region, "value": _number(sql + region, 100, 5000)}
            for region in ("EMEA", "Americas", "APAC", "LATAM")
        ],
    }


@tool
async def generate_report(title: str, tables: list[dict[str, Any]]) -> dict[str, Any]:
    """Render a PDF report with a chart per table; returns its URL and page count (takes 2 s)."""
    await _latency(2000)
    slug = title.lower().replace(" ", "-")
    return {
        "title": title,
        "url": f"https://reports.example.com/{slug}.pdf",
        "pages": 2 + 2 * len(tables),
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
    query_database,
    generate_report,
)

# --- tasks ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Step:
    """One call of a task: a tool call, or a language step (`Step.language(instruction)`,
    text work a model does). `{step_N_result...}` placeholders name the calls it needs."""

    tool: str | None
    arguments: dict[str, Any] = field(default_factory=dict)
    instruction: str | None = None

    @classmethod
    def language(cls, instruction: str) -> Step:
        """A language step: the text a model writes on `instruction`, placeholders filled in."""
        return cls(None, {}, instruction)

    @property
    def needs(self) -> set[int]:
        """The step numbers whose results this step uses."""
        return find_references(self.instruction if self.instruction is not None else self.arguments)


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
            levels.append(1 + max((levels[n - 1] for n in step.needs), default=0))
        object.__setattr__(self, "levels", tuple(levels))

    @property
    def depth(self) -> int:
        return max(self.levels)


def _quotes(symbols: Sequence[str]) -> tuple[Step, ...]:
    return tuple(Step("stock_quote", {"symbol": s}) for s in symbols)


_CITIES = (
    "Paris",
    "Tokyo",
    "New York",
    "London",
    "Berlin",
    "Madrid",
    "Rome",
    "Lisbon",
    "Vienna",
    "Prague",
    "Warsaw",
    "Stockholm",
    "Oslo",
    "Helsinki",
    "Dublin",
    "Athens",
    "Istanbul",
    "Cairo",
    "Mumbai",
    "Sydney",
)
_WARMEST = max(_CITIES, key=lambda city: _number(city, -5, 32))

_REPORT_QUERIES = (
    "SELECT region, SUM(amount) AS value FROM orders WHERE quarter = '2025-Q2' GROUP BY region",
    "SELECT region, AVG(churned) * 100 AS value FROM accounts WHERE quarter = '2025-Q2' "
    "GROUP BY region",
    "SELECT region, AVG(score) AS value FROM nps_responses WHERE quarter = '2025-Q2' "
    "GROUP BY region",
)

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
    Task(
        "20-city fan-out",
        "What's the weather right now in " + ", ".join(_CITIES[:-1]) + f" and {_CITIES[-1]}?",
        tuple(Step("get_weather", {"city": city}) for city in _CITIES),
        f"All 20 cities are partly cloudy; {_WARMEST} is the warmest "
        f"({_number(_WARMEST, -5, 32)} °C). Each city's temperature, humidity and wind are "
        "listed above.",
    ),
    Task(
        "4-level chain",
        "Find the most-read article on home batteries, read it, pull out its key facts and give "
        "me the first one in German.",
        (
            Step("web_search", {"query": "home batteries"}),
            Step("fetch_page", {"url": "{step_1_result.results[0].url}"}),
            Step("extract_facts", {"texts": ["{step_2_result.text}"]}),
            Step(
                "translate",
                {"text": "{step_3_result.facts[0]}", "target_language": "de"},
            ),
        ),
        "Die wichtigste Tatsache: Heimspeicher haben in diesem Jahr Aufmerksamkeit erregt.",
    ),
    Task(
        "language steps mix",
        "Compare what reviewers say about e-bike range and about e-bike battery prices, give me "
        "the comparison in Dutch, and draft a short note to the team about it.",
        (
            Step("web_search", {"query": "e-bike range tests"}),
            Step("web_search", {"query": "e-bike battery prices"}),
            Step("fetch_page", {"url": "{step_1_result.results[0].url}"}),
            Step("fetch_page", {"url": "{step_2_result.results[0].url}"}),
            Step.language(
                "Compare the two articles on e-bike range and battery prices in three to five "
                "sentences. Article 1: {step_3_result.text} Article 2: {step_4_result.text}"
            ),
            Step("translate", {"text": "{step_5_result}", "target_language": "nl"}),
            Step.language(
                "Draft a short note to the team that introduces this comparison of e-bike "
                "range and battery prices: {step_5_result}"
            ),
        ),
        "The comparison, its Dutch translation and the note to the team are above: range "
        "keeps improving while battery prices fall unevenly.",
    ),
    Task(
        "slow warehouse report",
        "Pull Q2 revenue, churn and NPS by region from the warehouse and generate the board "
        "report.",
        (
            *(Step("query_database", {"sql": sql}) for sql in _REPORT_QUERIES),
            Step(
                "generate_report",
                {
                    "title": "Board report 2025 Q2",
                    "tables": [
                        {"name": "revenue", "rows": "{step_1_result.rows}"},
                        {"name": "churn %", "rows": "{step_2_result.rows}"},
                        {"name": "NPS", "rows": "{step_3_result.rows}"},
                    ],
                },
            ),
        ),
        "The Q2 board report (8 pages) is at https://reports.example.com/board-report-2025-q2.pdf "
        "with revenue, churn and NPS by region.",
    ),
    Task(
        "one call",
        "What is NVDA trading at?",
        _quotes(["NVDA"]),
        f"NVDA trades at {_number('NVDA', 20, 900)} USD ({_number('NVDAc', -3, 3):+} % today).",
    ),
)


_WORD = re.compile(r"[a-z][a-z-]{5,}")
_SENTENCES = (
    "Both sources agree that {a} has improved steadily this year, and neither expects the "
    "trend to reverse soon.",
    "The main difference lies in {b}: one source stresses falling costs, the other the "
    "uneven adoption across regions.",
    "Their figures on {a} and {c} are broadly consistent, though the newer source reports "
    "slightly higher values.",
    "The experts quoted on {c} expect prices to keep falling for at least two more years.",
    "For a reader deciding now, {b} matters more than {a}, since it changes the total cost of "
    "ownership.",
    "Supply constraints around {c} remain the main risk the critics name.",
)


def language_text(instruction: str) -> str:
    """The text a model writes for a (filled-in) instruction: three to five sentences, about
    80-120 tokens, built from the instruction's words, so the same instruction gives the same
    text in both architectures."""
    digest = hashlib.sha256(instruction.encode()).digest()
    words = sorted(set(_WORD.findall(instruction.lower()))) or ["the topic"]
    a, b, c = (words[byte % len(words)] for byte in digest[2:5])
    first = digest[1] % len(_SENTENCES)
    count = 3 + digest[0] % 3
    return " ".join(
        _SENTENCES[(first + n) % len(_SENTENCES)].format(a=a, b=b, c=c) for n in range(count)
    )


# --- the model: scripted moves, paced like a real one ----------------------------------------


@dataclass(frozen=True, slots=True)
class Pace:
    """How fast the scripted model works: the prompt's processing (`prompt_s_per_1k` seconds
    per 1000 prompt tokens), then `ttft_s` to the first token, then `s_per_token` per output
    token; text streams in chunks of `chunk_chars` characters."""

    ttft_s: float = 0.0
    s_per_token: float = 0.0
    prompt_s_per_1k: float = 0.0
    chunk_chars: int = 4


INSTANT = Pace()


@dataclass(slots=True)
class PacedModel:
    """A scripted model paced by `pace`; it records every request for counting.

    Re-evaluation requests (phase `reevaluation`) take their answers from `reevaluation`,
    language steps (phase `language_step`) from `language`, the others from `script`.

    Each event is due at the call's start + prompt processing + time to first token + the
    output tokens so far x the time per token, and the model sleeps until then: a schedule
    rather than one sleep per chunk, whose wake-up lateness (about a millisecond each) would
    add up over hundreds of chunks.
    """

    script: ScriptedProvider
    pace: Pace
    reevaluation: ScriptedProvider | None = None
    language: ScriptedProvider | None = None

    @property
    def name(self) -> str:
        return self.script.name

    @property
    def model(self) -> str:
        return self.script.model

    @property
    def requests(self) -> list[LLMRequest]:
        extra = [p.requests for p in (self.reevaluation, self.language) if p is not None]
        return [*self.script.requests, *(r for requests in extra for r in requests)]

    def _script_for(self, request: LLMRequest) -> ScriptedProvider:
        phase_scripts = {"reevaluation": self.reevaluation, "language_step": self.language}
        if request.phase not in phase_scripts:
            return self.script
        script = phase_scripts[request.phase]
        if script is None:
            raise RuntimeError(f"a {request.phase} request to a model scripted without one")
        return script

    async def stream(self, request: LLMRequest) -> AsyncIterator[ProviderEvent]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        pace = self.pace
        prompt_s = pace.prompt_s_per_1k * prompt_tokens([request]) / 1000
        first_due = started + prompt_s + pace.ttft_s
        # The scripted answer is ready at once; it is then released on the schedule.
        events = [event async for event in self._script_for(request).stream(request)]
        text = "".join(event.text for event in events if isinstance(event, TokenDelta))
        text_tokens = estimate_tokens(text)
        chars = call_tokens = 0
        first_token_at: float | None = None
        for event in events:
            if isinstance(event, StreamMetadata):
                now = loop.time()
                event = replace(
                    event,
                    time_to_first_token_ms=None
                    if first_token_at is None
                    else (first_token_at - started) * 1000,
                    total_ms=(now - started) * 1000,
                )
            else:
                if isinstance(event, TokenDelta):
                    chars += len(event.text)
                elif isinstance(event, ToolCallEvent):
                    # A native tool call arrives whole once its tokens are due.
                    call = event.call
                    call_tokens += estimate_tokens(call.name + json.dumps(call.arguments))
                tokens = text_tokens * chars / max(len(text), 1) + call_tokens
                delay = first_due + tokens * pace.s_per_token - loop.time()
                await asyncio.sleep(max(delay, 0))
                if first_token_at is None:
                    first_token_at = loop.time()
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


def _call_line(n: int, step: Step) -> str:
    """A call line of the compact protocol, as the planning prompt asks a model to write it:
    `N. tool(param=value, ...)` with JSON values, or `N. language_step("...")`."""
    if step.instruction is not None:
        return f"{n}. language_step({json.dumps(step.instruction, ensure_ascii=False)})"
    params = ", ".join(
        f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in step.arguments.items()
    )
    return f"{n}. {step.tool}({params})"


def pes_script(task: Task) -> list[ScriptEntry]:
    """The PES model's moves: the plan in the compact protocol the planning prompt asks for
    (every call, one per line; no reason where the call says it; then one line of intent,
    in a few words), then the answer."""
    lines = [_call_line(n, step) for n, step in enumerate(task.steps, 1)]
    plan = "\n".join([*lines, f"Intent: {task.name}"])
    return [plan, task.answer]


def keep_plan(request: LLMRequest) -> str:
    """The re-evaluating model's move: the plan was right, so it keeps the calls not yet run."""
    prompt = request.messages[-1].content
    if "# Not run yet" not in prompt or "success:" not in prompt:
        raise RuntimeError("the re-evaluation prompt lacks the results or the pending calls")
    return '{"keep": true}'


def do_language_step(request: LLMRequest) -> str:
    """The PES model's move on a language step: the text for its filled-in instruction."""
    instruction = request.messages[-1].content
    if "{step_" in instruction:
        raise RuntimeError(f"a language step's instruction was not filled in: {instruction!r}")
    return language_text(instruction)


def react_turns(task: Task, *, sequential: bool = False) -> tuple[int, ...]:
    """The ReAct turn of each step. A tool call is issued in the first turn after the results
    it needs came back (`sequential`: one tool call per turn, in order); a language step's text
    is written in the first turn that has what it needs, and that same turn's calls can use it.
    A text due after the last tool turn is written in the answer turn."""
    turns: list[int] = []
    known: list[int] = []  # the turn from which each step's result is in the conversation
    tool_calls = 0
    for step in task.steps:
        earliest = max((known[n - 1] for n in step.needs), default=1)
        if step.instruction is not None:
            turns.append(earliest)
            known.append(earliest)
        else:
            tool_calls += 1
            turns.append(tool_calls if sequential else earliest)
            known.append(turns[-1] + 1)
    return tuple(turns)


def react_script(task: Task, *, sequential: bool = False) -> list[ScriptEntry]:
    """The ReAct model's moves: per dependency level, every call whose inputs are known, with
    arguments filled from the tool results it has read and the texts it wrote (a language
    step's text is written out as the turn's content, then copied into the calls that use
    it); then the answer. `sequential`: one tool call per turn instead (the classic ReAct
    loop)."""
    turns = react_turns(task, sequential=sequential)
    tool_turns = max(
        (t for t, s in zip(turns, task.steps, strict=True) if s.tool is not None), default=0
    )

    def turn(number: int) -> Callable[[LLMRequest], ScriptedResponse]:
        def move(request: LLMRequest) -> ScriptedResponse:
            results: dict[int, Any] = {
                int(message.tool_call_id.removeprefix("call_")): json.loads(message.content)
                for message in request.messages
                if message.role == "tool" and message.tool_call_id
            }
            texts: list[str] = []
            calls: list[ToolCall] = []
            for n, (step, at) in enumerate(zip(task.steps, turns, strict=True), 1):
                if step.instruction is not None and at <= number:
                    # Its own text of an earlier turn: the same text, as the model wrote it.
                    results[n] = language_text(resolve_text(step.instruction, results))
                    if at == number:
                        texts.append(results[n])
                elif step.tool is not None and at == number:
                    arguments = resolve_placeholders(step.arguments, results)
                    calls.append(ToolCall(f"call_{n}", step.tool, arguments))
            if number > tool_turns:
                texts.append(task.answer)
            return ScriptedResponse("\n\n".join(texts), tool_calls=calls)

        return move

    return [turn(number) for number in range(1, tool_turns + 2)]


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


async def run_pes(task: Task, pace: Pace, *, reevaluate: bool = False) -> Measure:
    size = pace.chunk_chars
    keep = ScriptedProvider([keep_plan], repeat=True, chunk_size=size) if reevaluate else None
    language = ScriptedProvider([do_language_step], repeat=True, chunk_size=size)
    script = ScriptedProvider(pes_script(task), chunk_size=size)
    model = PacedModel(script, pace, keep, language)
    mode: Reevaluate = "each_wave" if reevaluate else "never"
    async with create_agent(provider=model, tools=TOOLS, reevaluate=mode) as agent:
        started = time.perf_counter()
        result = await agent.process(AgentProps(task.query, "bench"))
        wall = (time.perf_counter() - started) * 1000
    meta = result.metadata
    if meta.status != "success" or meta.tool_calls != len(task.steps):
        raise RuntimeError(f"PES run of {task.name!r} failed: {meta.status} {meta.error}")
    if result.response.content != task.answer:
        raise RuntimeError(f"PES run of {task.name!r} answered {result.response.content!r}")
    reevaluations = len(keep.requests) if keep else 0
    return Measure(len(model.requests), prompt_tokens(model.requests), wall, reevaluations)


async def run_pes_reevaluating(task: Task, pace: Pace) -> Measure:
    return await run_pes(task, pace, reevaluate=True)


async def run_react(task: Task, pace: Pace) -> Measure:
    script = react_script(task, sequential=REACT_SEQUENTIAL)
    model = PacedModel(ScriptedProvider(script, chunk_size=pace.chunk_chars), pace)
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
    calls = sum(len(m.tool_calls or ()) for m in conversation.messages)
    answer = conversation.messages[-1].content
    if calls != sum(1 for step in task.steps if step.tool is not None):
        raise RuntimeError(f"ReAct run of {task.name!r} made {calls} tool calls")
    if not answer.endswith(task.answer):
        raise RuntimeError(f"ReAct run of {task.name!r} answered {answer!r}")
    return Measure(len(model.requests), prompt_tokens(model.requests), wall)


#: The issue's targets over the whole task set: PES wall and prompt tokens against ReAct's.
WALL_TARGET = 0.75
TASK_WALL_TARGET = 1.0
TOKENS_TARGET = 0.4


async def main(args: argparse.Namespace) -> None:
    global TOOL_SCALE, REACT_SEQUENTIAL
    TOOL_SCALE = args.tool_scale
    REACT_SEQUENTIAL = args.react_sequential
    configure_logging("WARNING")
    pace = Pace(
        ttft_s=args.ttft_ms / 1000,
        s_per_token=args.ms_per_token / 1000,
        prompt_s_per_1k=args.prompt_ms_per_1k / 1000,
        chunk_chars=args.chunk_chars,
    )
    tasks = TASKS[: args.tasks]
    kinds: list[tuple[str, Callable[[Task, Pace], Awaitable[Measure]]]] = [
        ("pes", run_pes),
        ("pes_re", run_pes_reevaluating),
        ("react", run_react),
    ]
    for _, run in kinds:
        await run(tasks[0], INSTANT)  # warm-up: imports, schema caches
    samples: dict[tuple[str, str], list[Measure]] = {}
    for repeat in range(args.repeats):
        for index, task in enumerate(tasks):
            shift = (repeat + index) % len(kinds)  # rotated: none always goes first
            for kind, run in kinds[shift:] + kinds[:shift]:
                samples.setdefault((task.name, kind), []).append(await run(task, pace))

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
    above: list[str] = []  # tasks where PES is slower than ReAct
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
        wall = measures["pes"].wall_ms / measures["react"].wall_ms
        if wall > TASK_WALL_TARGET:
            above.append(f"{task.name} ({wall:.2f})")
        rows.append(_row(task.name, shape, measures["pes"], measures["react"], TASK_WALL_TARGET))
        rows_re.append(_row_re(task.name, shape, measures["pes_re"], measures))
    pes, pes_re, react = totals["pes"], totals["pes_re"], totals["react"]
    rows.append(_row("all tasks", "", pes, react, WALL_TARGET))
    rows_re.append(_row_re("all tasks", "", pes_re, totals))
    print_table(
        f"PES vs ReAct on {len(tasks)} tasks (medians of {args.repeats} interleaved runs; "
        f"model {args.prompt_ms_per_1k:g} ms/1k prompt tokens + {args.ttft_ms:g} ms to first "
        f"token + {args.ms_per_token:g} ms/output token, text in {args.chunk_chars}-char "
        f"chunks; tools 50 ms-2 s x{args.tool_scale:g}; prompt tokens by {tokenizer_name()})",
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
            "wall target",
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
    prompt_time = (
        f"{args.prompt_ms_per_1k:g} ms per 1000 prompt tokens before the first token of every call"
        if args.prompt_ms_per_1k
        else "not modelled (it would add to ReAct's longer prompts)"
    )
    print(
        f"\nReAct assumption: {react_moves}; it writes a language step's text itself and copies "
        "it into the calls that use it. PES: one plan with every call, one model call per "
        f"language step, then the answer. Prompt processing: {prompt_time}."
    )
    wall_ratio = pes.wall_ms / react.wall_ms
    tokens_ratio = pes.prompt_tokens / react.prompt_tokens
    print(
        "targets: "
        f"wall PES/ReAct {wall_ratio:.2f} <= {WALL_TARGET}: {_verdict(wall_ratio <= WALL_TARGET)}; "
        f"no task above {TASK_WALL_TARGET}x: {_verdict(not above)}"
        + (f" (above: {', '.join(above)})" if above else "")
        + f"; prompt tokens PES/ReAct {tokens_ratio:.2f} <= {TOKENS_TARGET}: "
        f"{_verdict(tokens_ratio <= TOKENS_TARGET)}"
    )
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
        f"prompt tokens {pes.prompt_tokens}/{react.prompt_tokens} = {tokens_ratio:.2f}, "
        f"wall ms {pes.wall_ms:.0f}/{react.wall_ms:.0f} = {wall_ratio:.2f} "
        f"(tokens: {tokenizer_name()})"
    )


def _verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def _row(name: str, shape: str, pes: Measure, react: Measure, target: float) -> list[object]:
    wall = pes.wall_ms / react.wall_ms
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
        wall,
        f"<= {target}: {_verdict(wall <= target)}",
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
    parser.add_argument(
        "--prompt-ms-per-1k",
        type=float,
        default=0.0,
        help="model time per 1000 prompt tokens, before the first token",
    )
    parser.add_argument(
        "--chunk-chars", type=int, default=4, help="characters per streamed text chunk"
    )
    parser.add_argument("--tool-scale", type=float, default=1.0, help="tool latency multiplier")
    parser.add_argument(
        "--react-sequential",
        action="store_true",
        help="ReAct makes one tool call per turn instead of a level's calls in parallel",
    )
    asyncio.run(main(parser.parse_args()))
