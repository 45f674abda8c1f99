"""A loopback OpenAI-compatible `/v1/embeddings` server for the real SDK to talk to.

Each request is recorded (inputs, model, dimensions, Authorization header). Replies follow a
script of statuses: a number is answered with that HTTP error (a 429 with `Retry-After: 0`),
`"ok"` (and any request after the script ends) with embeddings. A text's vector is
`[len(text), position of its first character in the alphabet, 1.0]` padded to the asked
dimension, and the data list comes back reversed. Error bodies quote the API key, as real
servers' 401s do, so the client's scrubbing is tested, so only `index` tells which is which.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from aiohttp import web

__all__ = ["EmbeddingsServer", "RecordedEmbedding", "vector_for"]


def vector_for(text: str, dimension: int) -> list[float]:
    """The vector the server answers for `text`."""
    first = float(ord(text[0]) - ord("a")) if text else -1.0
    return ([float(len(text)), first, 1.0] + [0.0] * dimension)[:dimension]


@dataclass(frozen=True, slots=True)
class RecordedEmbedding:
    """One request as the server saw it."""

    inputs: list[str]
    model: str
    dimensions: int | None
    encoding_format: str | None
    authorization: str | None


class EmbeddingsServer:
    """An aiohttp server on a free port of 127.0.0.1; see the module docstring."""

    def __init__(self, *, dimension: int = 8) -> None:
        self.dimension = dimension
        self.requests: list[RecordedEmbedding] = []
        self.script: deque[int | str] = deque()
        self._runner: web.AppRunner | None = None
        self._port = 0

    async def __aenter__(self) -> EmbeddingsServer:
        app = web.Application()
        app.router.add_post("/v1/embeddings", self._embeddings)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = int(self._runner.addresses[0][1])
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL (`.../v1`)."""
        return f"http://127.0.0.1:{self._port}/v1"

    async def _embeddings(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = await request.json()
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        self.requests.append(
            RecordedEmbedding(
                inputs=inputs,
                model=body["model"],
                dimensions=body.get("dimensions"),
                encoding_format=body.get("encoding_format"),
                authorization=request.headers.get("Authorization"),
            )
        )
        step = self.script.popleft() if self.script else "ok"
        if isinstance(step, int):
            # Real servers quote the key they refused; the client must scrub it.
            key = (request.headers.get("Authorization") or "").removeprefix("Bearer ")
            message = f"error {step} for the API key {key}"
            headers = {"Retry-After": "0"} if step == 429 else {}
            return web.json_response(
                {"error": {"message": message, "type": "error"}}, status=step, headers=headers
            )
        dimension = body.get("dimensions") or self.dimension
        data = [
            {"object": "embedding", "index": index, "embedding": vector_for(text, dimension)}
            for index, text in enumerate(inputs)
        ]
        return web.json_response(
            {
                "object": "list",
                "data": data[::-1],
                "model": body["model"],
                "usage": {"prompt_tokens": len(inputs), "total_tokens": len(inputs)},
            }
        )
