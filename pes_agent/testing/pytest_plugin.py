"""A pytest plugin: the `cassette` fixture records a test's model calls once, then replays them.

```python
async def test_weather(cassette):
    provider = cassette.provider("openai:gpt-4o-mini")   # or a ProviderConfig, or a factory
    async with create_agent(provider=provider, tools=[get_weather]) as agent:
        result = await agent.process(AgentProps("Weather in Paris?", "t1"))
    await provider.aclose()
    assert "Paris" in result.response.content
```

`pytest --pes-record tests/test_weather.py::test_weather` runs the test against the real model
and writes its calls to `tests/cassettes/test_weather/test_weather.jsonl` (replacing an older
recording); a plain `pytest` then answers them from that file: offline, with no API key, the
real provider never built. A test whose cassette is missing fails, saying how to record it; a
call the cassette does not hold fails the run with the closest recorded call and the
difference (`CassetteMissError`).

pytest loads the plugin through pes-agent's `pytest11` entry point once pes-agent is installed,
or with `pytest -p pes_agent.testing.pytest_plugin`. Only pytest imports this module:
`pes_agent` and `pes_agent.testing` do not, so pytest is no dependency of the library.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

import pytest

if TYPE_CHECKING:  # imported when a test asks for a provider: pytest starts as fast as before
    from pes_agent.config import ProviderConfig
    from pes_agent.providers.base import LLMProvider

__all__ = ["RECORD_OPTION", "Cassette", "cassette", "cassette_path", "pytest_addoption"]

RECORD_OPTION = "--pes-record"
"""The command-line flag that records cassettes instead of replaying them."""

RealProvider: TypeAlias = "LLMProvider | Callable[[], LLMProvider] | str | ProviderConfig"
"""What `Cassette.provider` takes: a `"NAME:MODEL"` spec or a `ProviderConfig` (built only when
recording), a zero-argument factory (called only when recording), or a built provider."""

_UNSAFE = re.compile(r"[^\w.-]+")


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add `--pes-record` to pytest's options.

    Args:
        parser: pytest's option parser.
    """
    parser.getgroup("pes-agent").addoption(
        RECORD_OPTION,
        action="store_true",
        default=False,
        help="pes-agent cassettes: run the tests using the `cassette` fixture against the real "
        "models and (re)write their cassettes, instead of replaying them offline",
    )


def cassette_path(test_file: Path, test_name: str) -> Path:
    """Where a test's cassette is kept: `cassettes/<module stem>/<test name>.jsonl` beside its
    file, the name made safe for a file system (`test_x[a/b]` -> `test_x-a_b`).

    Args:
        test_file: The test's module.
        test_name: The test's name within its module, with its class and parameters
            (`TestX::test_y[1]`).

    Returns:
        The cassette's path.
    """
    name = test_name.replace("::", ".").replace("[", "-").removesuffix("]")
    safe = _UNSAFE.sub("_", name).strip("_.") or "test"
    return test_file.parent / "cassettes" / test_file.stem / f"{safe}.jsonl"


class Cassette:
    """One test's cassette: `provider(...)` gives the provider the test should run with.

    `recording` is True under `pytest --pes-record`; `path` is the cassette file.
    """

    def __init__(self, path: Path, *, recording: bool, nodeid: str) -> None:
        """A cassette at `path`, recorded to or replayed from.

        Args:
            path: The cassette file.
            recording: Record (call the real model, write `path`) rather than replay.
            nodeid: The test's pytest id, for the command that records it.
        """
        self.path = path
        self.recording = recording
        self.nodeid = nodeid
        self._truncated = False

    @property
    def how_to_record(self) -> str:
        """The command that records this cassette, as errors tell it."""
        return f"record it with `pytest {RECORD_OPTION} {shlex.quote(self.nodeid)}`"

    def provider(self, real: RealProvider) -> LLMProvider:
        """The provider for this test: `real` wrapped in a `RecordingProvider` writing the
        cassette when recording, else a `ReplayProvider` reading it (and `real` never built).

        The first call of a recording test empties the cassette, so a new recording replaces
        the old one; later calls (several agents in one test) add to it. Close the provider
        when done (`await provider.aclose()`): when recording, that closes the real one.

        Args:
            real: The model to record: `"NAME:MODEL"`, a `ProviderConfig`, a zero-argument
                function returning a provider, or a provider. Pass one of the first three to
                need no API key on replay.

        Returns:
            A `RecordingProvider` or a `ReplayProvider`.

        Raises:
            pytest.fail.Exception: Replaying, and the cassette is missing or damaged; the
                message says how to record it.
        """
        from pes_agent.errors import ConfigurationError
        from pes_agent.testing.cassette import RecordingProvider, ReplayProvider

        if self.recording:
            if not self._truncated:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.path.write_text("", encoding="utf-8")
                self._truncated = True
            return RecordingProvider(_build(real), self.path)
        if not self.path.is_file():
            pytest.fail(
                f"no cassette at {self.path} for {self.nodeid}: {self.how_to_record} "
                "(a real model, its API key set)",
                pytrace=False,
            )
        try:
            return ReplayProvider(self.path, how_to_record=self.how_to_record)
        except ConfigurationError as error:
            pytest.fail(error.message, pytrace=False)


def _build(real: RealProvider) -> LLMProvider:
    from pes_agent.config import ProviderConfig
    from pes_agent.providers.base import LLMProvider
    from pes_agent.providers.registry import create_provider

    if isinstance(real, str | ProviderConfig | LLMProvider):
        return create_provider(real)
    return real()


@pytest.fixture
def cassette(request: pytest.FixtureRequest) -> Cassette:
    """This test's cassette (`cassettes/<module>/<test>.jsonl` beside its file): recorded
    under `pytest --pes-record`, replayed otherwise.

    Args:
        request: The requesting test.

    Returns:
        The `Cassette`; `cassette.provider(real)` gives the provider to run the test with.
    """
    node = request.node
    test_file = Path(str(node.path))
    test_name = node.nodeid.split("::", 1)[1] if "::" in node.nodeid else node.name
    return Cassette(
        cassette_path(test_file, test_name),
        recording=bool(request.config.getoption(RECORD_OPTION)),
        nodeid=node.nodeid,
    )
