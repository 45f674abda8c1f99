"""A call cut off while recording (its run cancelled, or its stream left unread) is on disk as
"abandoned" once its stream is closed, at the latest by `RecordingProvider.aclose`; replay
prefers a recording that ended and otherwise stops where the abandoned one did, with a clear
error. And a cassette written by one process is read back by another."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pes_agent.errors import CassetteMissError
from pes_agent.providers import LLMRequest, PromptMessage
from pes_agent.providers.base import ProviderEvent, StreamMetadata, TokenDelta, ToolCallEvent
from pes_agent.testing import RecordingProvider, ReplayProvider, ScriptedProvider
from pes_agent.tools.calls import ToolCall
from tests.pes_agent.providers.model_server import ModelServer, Reply

from .runs import APIS, sdk_provider

ROOT = Path(__file__).resolve().parents[3]
LONG_ANSWER = "The quick brown fox jumps over the lazy dog, " * 8


def _request(text: str = "Tell me a story.") -> LLMRequest:
    return LLMRequest(
        messages=(PromptMessage("user", text),), phase="synthesis", thread_id="t", trace_id="tr"
    )


def _lines(cassette: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in cassette.read_text().splitlines()]


def _text(events: list[ProviderEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TokenDelta) and e.kind == "content")


@pytest.mark.parametrize("api", APIS)
async def test_a_call_cancelled_mid_stream_is_on_disk_as_abandoned(
    api: str, tmp_path: Path
) -> None:
    """A real SDK stream cancelled after its first tokens (the server still sending) is
    written at once as abandoned, holding the events streamed until then."""
    cassette = tmp_path / "cancelled.jsonl"
    got: list[ProviderEvent] = []
    two_tokens = asyncio.Event()

    async def read(recording: RecordingProvider) -> None:
        async for event in recording.stream(_request()):
            got.append(event)
            if len([e for e in got if isinstance(e, TokenDelta)]) == 2:
                two_tokens.set()

    async with ModelServer() as server:
        # Slow pieces: the server is still streaming when the reader is cancelled.
        server.script(Reply(LONG_ANSWER, chunk_chars=4, chunk_delay_s=0.05))
        recording = RecordingProvider(sdk_provider(server, api), cassette)
        reader = asyncio.create_task(read(recording))
        await two_tokens.wait()
        reader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reader
        (line,) = _lines(cassette)  # written by the cancel, before aclose
        await recording.aclose()

    assert line["outcome"] == "abandoned"
    assert line["error"] is None
    events = line["events"]
    assert isinstance(events, list)
    assert [event["type"] for event in events] == ["token"] * len(got)
    assert not any(isinstance(e, StreamMetadata) for e in got)
    assert len(cassette.read_text().splitlines()) == 1


async def test_a_stream_left_unread_is_written_when_the_recorder_closes(tmp_path: Path) -> None:
    """A consumer that stops reading without closing the stream leaves nothing on disk until
    `aclose`, which ends the stream: then its line is there, abandoned."""
    cassette = tmp_path / "unread.jsonl"
    recording = RecordingProvider(ScriptedProvider(["one two three"], chunk_size=4), cassette)
    stream = recording.stream(_request())
    first = await anext(stream)  # `stream` is still referenced: not finalized by the GC
    assert isinstance(first, TokenDelta)
    assert not cassette.exists() or cassette.read_text() == ""

    await recording.aclose()

    (line,) = _lines(cassette)
    assert line["outcome"] == "abandoned"
    assert line["events"] == [{"type": "token", "text": first.text, "kind": first.kind}]


async def _record_abandoned(recording: RecordingProvider, events: int) -> None:
    """A call to `recording` whose consumer stops after `events` events."""
    stream = recording.stream(_request())
    for _ in range(events):
        await anext(stream)
    await recording.aclose()


async def test_replay_prefers_a_recording_that_ended_over_an_abandoned_one(
    tmp_path: Path,
) -> None:
    """A run cancelled while recording, then recorded again (appended): replay answers from
    the finished recording, and the abandoned one is left unused."""
    cassette = tmp_path / "again.jsonl"
    await _record_abandoned(
        RecordingProvider(ScriptedProvider(["cut short"], chunk_size=3), cassette), 1
    )
    recording = RecordingProvider(ScriptedProvider(["the whole answer"]), cassette)
    recorded = [event async for event in recording.stream(_request())]
    assert [line["outcome"] for line in _lines(cassette)] == ["abandoned", "complete"]

    replay = ReplayProvider(cassette)
    replayed = [event async for event in replay.stream(_request())]

    assert replayed == recorded
    assert _text(replayed) == "the whole answer"
    assert replay.remaining == 1


async def test_an_abandoned_recording_replays_up_to_where_it_stopped_then_fails_clearly(
    tmp_path: Path,
) -> None:
    """With only an abandoned recording, a consumer stopping where the recorded one did sees
    the same events; one reading further gets a CassetteMissError saying the recording was
    abandoned and how to record it again."""
    cassette = tmp_path / "abandoned.jsonl"
    await _record_abandoned(
        RecordingProvider(ScriptedProvider(["abcdefghij"], chunk_size=2), cassette), 2
    )

    same_point = ReplayProvider(cassette).stream(_request())
    assert _text([await anext(same_point), await anext(same_point)]) == "abcd"

    further: list[ProviderEvent] = []

    async def read_to_the_end() -> None:
        async for event in ReplayProvider(cassette).stream(_request()):
            further.append(event)

    with pytest.raises(CassetteMissError) as caught:
        await read_to_the_end()
    assert _text(further) == "abcd"
    message = caught.value.message
    assert "abandoned" in message
    assert "after 2 events" in message
    assert str(cassette) in message
    assert "RecordingProvider" in message
    assert caught.value.trace_id == "tr"


def test_a_cassette_written_by_another_process_replays_here(tmp_path: Path) -> None:
    """A cassette recorded in a separate Python process (another hash seed) replays here:
    non-ASCII text, a tool call's arguments in their order, thinking and the metadata."""
    cassette = tmp_path / "elsewhere.jsonl"
    script = textwrap.dedent(
        f"""
        import asyncio
        from pes_agent.providers import LLMRequest, PromptMessage
        from pes_agent.testing import RecordingProvider, ScriptedProvider, ScriptedResponse
        from pes_agent.tools.calls import ToolCall

        async def main():
            scripted = ScriptedProvider([ScriptedResponse(
                "Ça marche — 東京 ✓",
                thinking=["Réfléchir."],
                tool_calls=[ToolCall("c1", "book", {{"z": "Zürich", "a": [1, 2]}})],
            )])
            request = LLMRequest(
                messages=(PromptMessage("user", "Réserve à Zürich?"),),
                phase="synthesis", thread_id="other-thread", trace_id="other-trace",
            )
            recording = RecordingProvider(scripted, {str(cassette)!r})
            async for _ in recording.stream(request):
                pass
            await recording.aclose()

        asyncio.run(main())
        """
    )
    subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "12345"},
        check=True,
        timeout=120,
    )

    request = LLMRequest(
        messages=(PromptMessage("user", "Réserve à Zürich?"),),
        phase="synthesis",
        thread_id="this-thread",
        trace_id="this-trace",
    )
    replayed = asyncio.run(_collect(ReplayProvider(cassette), request))

    assert _text(replayed) == "Ça marche — 東京 ✓"
    (call,) = [e.call for e in replayed if isinstance(e, ToolCallEvent)]
    assert call == ToolCall("c1", "book", {"z": "Zürich", "a": [1, 2]})
    assert list(call.arguments) == ["z", "a"]
    assert isinstance(replayed[-1], StreamMetadata)


async def _collect(provider: ReplayProvider, request: LLMRequest) -> list[ProviderEvent]:
    return [event async for event in provider.stream(request)]
