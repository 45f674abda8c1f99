"""`OpenAIEmbeddings`: embeddings from OpenAI or any OpenAI-compatible `/v1/embeddings` server.

Built on the chat adapter's own `OpenAIProvider` for everything but the call itself: the key
(`api_key` or `OPENAI_API_KEY`, stripped, never logged), the URL (`base_url`,
`OPENAI_BASE_URL`), the SDK client with its own retries off, secret scrubbing and the
classification of errors; each batch is one call through the project's single retry layer
(`pes_agent.providers.retry.retrying_call`): 408/409/429/5xx, timeouts and connection errors
are retried with `Retry-After` honoured, other statuses fail at once as a `ProviderError`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pes_agent.config import ProviderConfig
from pes_agent.errors import ConfigurationError, ProviderError, UsageError
from pes_agent.observing.logs import get_logger
from pes_agent.providers.retry import AttemptFailure, RetryPolicy, retrying_call
from pes_agent.retrieval.base import DimensionMismatchError

if TYPE_CHECKING:
    from pes_agent.providers.openai import OpenAIProvider

__all__ = ["KNOWN_DIMENSIONS", "OpenAIEmbeddings"]

_log = get_logger("pes_agent.retrieval")

KNOWN_DIMENSIONS: dict[str, int] = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
"""The native dimension of OpenAI's embedding models; other models need `dimension=`."""

# Only these models accept the `dimensions` parameter (shortened embeddings).
_SHORTENABLE = ("text-embedding-3-",)


class OpenAIEmbeddings:
    """Embeds texts with an OpenAI embedding model, in batches of `batch_size`, order kept.

    `dimension` is the model's native one for OpenAI's models; with a `text-embedding-3-*`
    model a smaller `dimension` asks the API for shortened vectors. Any other model (Ollama's
    `nomic-embed-text` behind `base_url="http://localhost:11434/v1"`, say) needs `dimension=`,
    and a server answering with another length is a `DimensionMismatchError`. Batches run
    concurrently, at most `max_concurrency` at a time; each is retried as the module says.
    """

    def __init__(
        self,
        model: str = "text-embedding-3-small",
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        dimension: int | None = None,
        batch_size: int = 256,
        max_retries: int = 3,
        max_concurrency: int = 4,
        timeout_s: float = 60.0,
        retry_policy: RetryPolicy | None = None,
    ) -> None:
        """Embed with `model` through the OpenAI API or a compatible server.

        Args:
            model: The embedding model's name.
            api_key: The API key; `OPENAI_API_KEY` when None.
            base_url: A compatible server's URL (Ollama, a proxy); `OPENAI_BASE_URL` or
                OpenAI's when None.
            dimension: The length of the vectors; the model's own when None (needed for a
                model not in `KNOWN_DIMENSIONS`; `text-embedding-3-*` shorten to it).
            batch_size: How many texts one request embeds (at most 2048, the API's limit).
            max_retries: How many times a failed request is tried again (0 for none).
            max_concurrency: How many requests run at once.
            timeout_s: How long one request may take.
            retry_policy: Tunes the backoff between retries; None for the default.

        Raises:
            UsageError: `batch_size` is out of range.
            ConfigurationError: The dimension is unknown or invalid, or the API key is
                missing.
        """
        if not isinstance(batch_size, int) or not 1 <= batch_size <= 2048:
            raise UsageError(f"batch_size must be 1..2048 (the API's limit), got {batch_size!r}")
        native = KNOWN_DIMENSIONS.get(model)
        if dimension is None:
            if native is None:
                raise ConfigurationError(
                    f"the dimension of embedding model {model!r} is not known: pass "
                    "OpenAIEmbeddings(model, dimension=N) with the length of its vectors"
                )
            dimension = native
        if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1:
            raise ConfigurationError(f"dimension must be a positive int, got {dimension!r}")
        self._dimension = dimension
        self._send_dimensions = model.startswith(_SHORTENABLE) and dimension != native
        self._model = model
        self._batch_size = batch_size
        # Imported here, not at the top: the OpenAI SDK takes about a second to import.
        from pes_agent.providers.openai import OpenAIProvider

        self._provider: OpenAIProvider = OpenAIProvider(
            ProviderConfig(
                "openai",
                model,
                api_key=api_key,
                base_url=base_url,
                timeout_s=timeout_s,
                max_retries=max_retries,
                max_concurrency=max_concurrency,
            ),
            retry_policy=retry_policy,
        )
        self._policy = retry_policy or RetryPolicy()
        self._max_retries = max_retries
        self._slot = asyncio.Semaphore(max_concurrency)

    def __repr__(self) -> str:
        return f"OpenAIEmbeddings(model={self._model!r}, dimension={self._dimension})"

    @property
    def dimension(self) -> int:
        """The length of every vector."""
        return self._dimension

    @property
    def model(self) -> str:
        """The embedding model asked."""
        return self._model

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed `texts`, one request per `batch_size` of them, concurrently.

        Args:
            texts: The texts to embed.

        Returns:
            One vector of `dimension` floats per text, in order.

        Raises:
            UsageError: `texts` is one string rather than a sequence.
            ProviderError: The API failed for good (after the retries).
            DimensionMismatchError: The API answered vectors of another length.
        """
        if isinstance(texts, str):
            raise UsageError("embed() takes a sequence of texts, not one string")
        batches = [
            list(texts[start : start + self._batch_size])
            for start in range(0, len(texts), self._batch_size)
        ]
        if not batches:
            return []
        if len(batches) == 1:
            return await self._embed_batch(batches[0])
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(self._embed_batch(batch)) for batch in batches]
        except ExceptionGroup as failed:
            # The first batch to fail cancelled the rest; its error is the one to report.
            raise failed.exceptions[0] from None
        return [vector for task in tasks for vector in task.result()]

    async def aclose(self) -> None:
        """Close the SDK client."""
        await self._provider.aclose()

    async def _embed_batch(self, batch: list[str]) -> list[list[float]]:
        kwargs: dict[str, Any] = {
            "model": self._model,
            "input": batch,
            # Floats, not the SDK's default base64: compatible servers (Ollama) may not do it.
            "encoding_format": "float",
        }
        if self._send_dimensions:
            kwargs["dimensions"] = self._dimension

        async def attempt() -> list[list[float]]:
            response = await self._provider.client.embeddings.create(**kwargs)
            return self._vectors(response.data, len(batch))

        return await retrying_call(
            attempt,
            classify=self._provider.classify_error,
            max_retries=self._max_retries,
            policy=self._policy,
            on_give_up=self._give_up,
            log=_log.bind(provider="openai", model=self._model, phase="embeddings"),
            slot=self._slot,
        )

    def _vectors(self, data: Sequence[Any], expected: int) -> list[list[float]]:
        # The API may answer out of order: `index` says which input each vector belongs to.
        ordered = sorted(data, key=lambda item: item.index)
        if [item.index for item in ordered] != list(range(expected)):
            raise AttemptFailure(
                f"the server answered {len(ordered)} embeddings for {expected} inputs, "
                f"indexes {[item.index for item in ordered][:10]}",
                kind="status",
                retryable=False,
            )
        vectors = [list(item.embedding) for item in ordered]
        for vector in vectors:
            if len(vector) != self._dimension:
                raise DimensionMismatchError(
                    f"embedding model {self._model!r} answered vectors of {len(vector)} "
                    f"numbers, not dimension={self._dimension}; pass dimension={len(vector)}",
                    expected=self._dimension,
                    actual=len(vector),
                )
        return vectors

    def _give_up(self, failure: AttemptFailure, attempts: int) -> Exception:
        status = failure.status_code
        if failure.retryable:
            message = (
                f"the OpenAI embeddings call failed after {attempts} attempt"
                f"{'s' if attempts != 1 else ''}: {failure.reason}"
            )
        elif status == 401:
            message = (
                "the OpenAI API key was rejected (401); set OPENAI_API_KEY or pass "
                "OpenAIEmbeddings(api_key=...)"
            )
        elif status == 404:
            message = (
                f"the embeddings endpoint found no model {self._model!r}: {failure.reason}; "
                "check the model name and base_url"
            )
        else:
            message = f"the OpenAI embeddings call was refused: {failure.reason}"
        return ProviderError(
            self._provider.redact_secrets(message),
            provider="openai",
            status_code=status,
            retryable=failure.retryable,
        )
