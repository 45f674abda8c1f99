"""`run --record FILE` / `run --replay FILE`: a run's model calls written to a cassette, or
answered from one offline (`pes_agent.testing.cassette`), with their mistakes as one-line usage
errors (exit code 2).

```
pes-agent run "Weather in Paris?" --tools mytools:TOOLS --record paris.jsonl   # a real model
pes-agent run "Weather in Paris?" --tools mytools:TOOLS --replay paris.jsonl   # offline, no key
```

A replayed run that asks the model something the cassette does not hold fails (status
`error`, exit code 1) with the closest recorded request and the difference.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pes_agent.cli.errors import CLIError

if TYPE_CHECKING:
    from pes_agent.providers.base import LLMProvider
    from pes_agent.testing.cassette import RecordingProvider, ReplayProvider

__all__ = ["RECORD_HELP", "REPLAY_HELP", "open_recording", "open_replay"]

RECORD_HELP = (
    "also write every model call and its whole answer to the cassette FILE (JSON lines, "
    "appended; API keys never written), to replay the run later with --replay FILE"
)
REPLAY_HELP = (
    "answer the model calls from the cassette FILE that --record wrote, offline: no API key, "
    "no network; --provider and --base-url are not used. A call the cassette does not hold "
    "fails the run (exit code 1) showing the closest recorded call"
)


def open_replay(path: str, *, engine_url: str | None) -> ReplayProvider:
    """The provider `--replay FILE` answers with.

    Args:
        path: The cassette file `--record` wrote.
        engine_url: `--engine`, which cannot go with it.

    Returns:
        A `ReplayProvider` reading `path`.

    Raises:
        CLIError: With `--engine`, or the cassette is missing, unreadable or damaged.
    """
    from pes_agent.errors import ConfigurationError
    from pes_agent.testing.cassette import ReplayProvider

    _refuse_engine("--replay", engine_url)
    how_to_record = (
        f"record it with `pes-agent run QUERY --record {shlex.quote(path)}` (a real model, the "
        "options of the run to replay)"
    )
    cassette = Path(path)
    if not cassette.is_file():
        what = "is a directory" if cassette.is_dir() else "does not exist"
        raise CLIError(f"--replay {path}: the cassette {what}; {how_to_record}")
    try:
        return ReplayProvider(cassette, how_to_record=how_to_record)
    except ConfigurationError as error:
        raise CLIError(f"--replay: {error.message}") from None


def open_recording(
    make_provider: Callable[[], LLMProvider], path: str, *, engine_url: str | None
) -> RecordingProvider:
    """The real provider `make_provider` builds, wrapped so that each of its calls is appended
    to the cassette `path`; the path is checked first, so a bad one builds nothing.

    Args:
        make_provider: Builds the real provider `--provider` and `--base-url` name.
        path: The cassette file (`--record`); created with its folder when missing.
        engine_url: `--engine`, which cannot go with it.

    Returns:
        A `RecordingProvider`; closing it closes the real provider.

    Raises:
        CLIError: With `--engine`, `path` cannot be written, or the provider cannot be built.
    """
    from pes_agent.testing.cassette import RecordingProvider

    _refuse_engine("--record", engine_url)
    cassette = Path(path)
    if cassette.is_dir():
        raise CLIError(f"--record {path} is a directory: name a file, e.g. {path}/run.jsonl")
    try:
        cassette.parent.mkdir(parents=True, exist_ok=True)
        with cassette.open("a", encoding="utf-8"):
            pass  # fail now, not after the first (paid) model call
    except OSError as error:
        raise CLIError(f"--record {path}: cannot write there ({error.strerror or error})") from None
    return RecordingProvider(make_provider(), cassette)


def _refuse_engine(option: str, engine_url: str | None) -> None:
    if engine_url is not None:
        raise CLIError(
            f"{option} cannot go with --engine: a `pes-agent worker` makes the model calls of "
            f"runs submitted to an engine; drop --engine to {option.removeprefix('--')} the run "
            "in this process"
        )
