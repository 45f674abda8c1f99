"""Token accounting for model calls and whole runs."""

from __future__ import annotations

from pydantic import BaseModel

__all__ = ["Usage"]


class Usage(BaseModel):
    """Tokens used by one model call or, summed, by a whole run.

    `input_tokens` and `output_tokens` are those of the answers the run used. When a provider
    retries a call whose stream had already begun (a dropped connection, an overloaded server
    mid-answer), the failed attempt cost tokens too: they are `retried_input_tokens` and
    `retried_output_tokens`, kept apart so that the answer's own counts stay exact. A cut
    stream reports no usage, so they are estimated: the prompt as the successful attempt's
    (it is the same request), the output from what had streamed (one token per streamed piece,
    at least one per four characters). Attempts refused before they streamed (429, 5xx) cost
    nothing and count nothing.

    `total_tokens` is everything the calls cost: input plus output plus the retried tokens.
    Cache and reasoning counts are broken out of input and output where the provider reports
    them (they are not added again).
    """

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    retried_input_tokens: int = 0
    retried_output_tokens: int = 0
    requests: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            retried_input_tokens=self.retried_input_tokens + other.retried_input_tokens,
            retried_output_tokens=self.retried_output_tokens + other.retried_output_tokens,
            requests=self.requests + other.requests,
        )
