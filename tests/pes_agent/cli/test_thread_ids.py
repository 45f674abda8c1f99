"""Every command that takes a thread refuses an id the library refuses: a usage error (exit
code 2) in one line naming the reason, before anything is opened or run."""

from __future__ import annotations

from pathlib import Path

import pytest

from pes_agent.cli.errors import ExitCode
from pes_agent.cli.main import main

from ..threads.test_ids import BAD_IDS

#: Each command line with a thread, THREAD standing for the id.
COMMANDS = [
    ["run", "what is 2+2?", "--thread", "THREAD"],
    ["run", "what is 2+2?", "-t", "THREAD"],
    ["demo", "--thread", "THREAD"],
    ["approve", "THREAD"],
    ["pending", "THREAD"],
    ["cancel", "THREAD"],
    ["history", "THREAD"],
    ["observations", "THREAD"],
    ["trace", "THREAD", "--html", "out.html"],
]


@pytest.mark.parametrize(("thread_id", "reason"), list(BAD_IDS.values()), ids=list(BAD_IDS.keys()))
def test_a_refused_thread_id_is_a_usage_error_naming_the_reason(
    thread_id: str,
    reason: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each command exits 2 with `pes-agent: error: argument ...: <reason>` and creates no
    store."""
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "agent.db"
    for command in COMMANDS:
        argv = [thread_id if arg == "THREAD" else arg for arg in command]
        assert main([*argv, "--db", str(db)]) == ExitCode.USAGE, argv
        err = capsys.readouterr().err
        assert err.startswith("pes-agent: error: argument "), err
        assert reason in err, err
        assert "unexpected" not in err
        assert len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []
