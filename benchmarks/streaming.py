"""Streaming overhead: our providers vs the raw SDKs, on one 20,000-token answer.

Every path reads the same SSE stream from the local test model server, in this process:

- `server+transport`: the bytes drained with the SDK's HTTP client and no parsing — the floor;
- `raw SDK`: the SDK's own stream iterated, reading each delta's text;
- `pes-agent`: `provider.stream(request)` — retry layer, concurrency slot, events, usage.

CPU time is `time.process_time()` over the whole call (the server runs in this process too, so
its share is in every row; the floor row shows how much); each figure is the best of the
interleaved runs, the least disturbed by whatever else the machine is doing. Our overhead is
the extra CPU per token over the raw SDK, as a share of the SDK's own per-token cost above the
floor (target ≤ 20%). Run: `.venv/bin/python benchmarks/streaming.py [--tokens N] [--runs N]`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import anthropic
import httpx2
import openai
import structlog

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pes_agent.config import ProviderConfig
from pes_agent.providers import (
    LLMRequest,
    PromptMessage,
    TokenDelta,
    create_provider,
)
from tests.pes_agent.providers.model_server import ModelServer, Reply

KEY = "sk-bench-0000000000000000"
MESSAGES = [{"role": "user", "content": "Write a long answer."}]


@dataclass(frozen=True, slots=True)
class Sample:
    wall_s: float
    cpu_s: float
    tokens: int


async def measure(run: Callable[[], Awaitable[int]]) -> Sample:
    wall, cpu = time.perf_counter(), time.process_time()
    tokens = await run()
    return Sample(time.perf_counter() - wall, time.process_time() - cpu, tokens)


async def drain_bytes(client: httpx2.AsyncClient, url: str, body: dict[str, object]) -> int:
    async with client.stream("POST", url, json=body, headers={"x-api-key": KEY}) as response:
        async for _ in response.aiter_bytes():
            pass
    return 0


async def bench_provider(name: str, server: ModelServer, tokens: int, runs: int) -> list[str]:
    text = "".join(f"w{i % 1000:03d}" for i in range(tokens))
    server.default = Reply(text, chunk_chars=4)
    base_url = server.base_url_for(name)
    config = ProviderConfig(name, "bench-model", api_key=KEY, base_url=base_url, timeout_s=60)
    provider = create_provider(config)
    request = LLMRequest(
        messages=(PromptMessage("user", "Write a long answer."),),
        phase="synthesis",
        thread_id="bench",
        trace_id="bench",
        max_tokens=tokens + 10,
    )
    http = httpx2.AsyncClient(timeout=60)
    oa = openai.AsyncOpenAI(api_key=KEY, base_url=base_url, max_retries=0, timeout=60)
    an = anthropic.AsyncAnthropic(api_key=KEY, base_url=base_url, max_retries=0, timeout=60)

    async def floor() -> int:
        if name == "openai":
            body: dict[str, object] = {
                "model": "bench-model",
                "messages": MESSAGES,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            return await drain_bytes(http, f"{base_url}/chat/completions", body)
        body = {"model": "bench-model", "messages": MESSAGES, "stream": True, "max_tokens": 1}
        return await drain_bytes(http, f"{base_url}/v1/messages", body)

    async def raw_sdk() -> int:
        count = 0
        if name == "openai":
            stream = await oa.chat.completions.create(
                model="bench-model",
                messages=[{"role": "user", "content": "Write a long answer."}],
                stream=True,
                stream_options={"include_usage": True},
            )
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    count += 1
            return count
        events = await an.messages.create(
            model="bench-model",
            max_tokens=tokens + 10,
            messages=[{"role": "user", "content": "Write a long answer."}],
            stream=True,
        )
        async for event in events:
            if event.type == "content_block_delta" and event.delta.type == "text_delta":
                count += 1
        return count

    async def ours() -> int:
        count = 0
        async for event in provider.stream(request):
            if isinstance(event, TokenDelta):
                count += 1
        return count

    paths: dict[str, Callable[[], Awaitable[int]]] = {
        "server+transport": floor,
        "raw SDK": raw_sdk,
        "pes-agent": ours,
    }
    samples: dict[str, list[Sample]] = {label: [] for label in paths}
    try:
        for run in paths.values():  # warm up connections, caches and imports
            await run()
        for _ in range(runs):
            for label, run in paths.items():
                samples[label].append(await measure(run))
    finally:
        await provider.aclose()
        await oa.close()
        await an.close()
        await http.aclose()

    def cpu_per_token(label: str) -> float:
        return min(s.cpu_s for s in samples[label]) / tokens

    def tokens_per_s(label: str) -> float:
        return tokens / min(s.wall_s for s in samples[label])

    assert all(s.tokens == tokens for label in ("raw SDK", "pes-agent") for s in samples[label])
    floor_cpu, sdk_cpu, our_cpu = (cpu_per_token(label) for label in paths)
    lines = []
    for label in paths:
        lines.append(
            f"| {name:<9} | {label:<16} | {tokens_per_s(label):>10,.0f} "
            f"| {cpu_per_token(label) * 1e6:>12.2f} |"
        )
    overhead = our_cpu - sdk_cpu
    sdk_own = sdk_cpu - floor_cpu
    lines.append(
        f"| {name:<9} | our overhead     | {'':>10} | {overhead * 1e6:>12.2f} |"
        f"  = {overhead / sdk_own * 100:+.1f}% of the SDK's own {sdk_own * 1e6:.2f} µs/token"
        f" ({overhead / sdk_cpu * 100:+.1f}% of its total)"
    )
    return lines


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    # The per-call info log stays off the table (its cost is a log line per call, not per token).
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    print(f"{args.tokens:,} streamed tokens per call, best of {args.runs} interleaved runs\n")
    print("| provider  | path             |   tokens/s | CPU µs/token |")
    print("|-----------|------------------|-----------:|-------------:|")
    async with ModelServer() as server:
        for name in ("openai", "anthropic"):
            for line in await bench_provider(name, server, args.tokens, args.runs):
                print(line)


if __name__ == "__main__":
    asyncio.run(main())
