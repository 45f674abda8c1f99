"""A SQLite file that cannot be used says what is wrong with it (missing folder, a folder, not a
database, permission denied) and leaves nothing behind beside it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from pes_agent import AgentProps, ConfigurationError, create_agent
from pes_agent.storage import SQLiteStorage
from pes_agent.testing import ScriptedProvider

from ..unprivileged import as_unprivileged, shared_folder, unprivileged_env


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    with shared_folder() as folder:
        yield folder


OPEN_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from pes_agent import ConfigurationError
    from pes_agent.storage import SQLiteStorage

    async def main() -> None:
        storage = SQLiteStorage(sys.argv[1])
        try:
            await storage.list_threads()
        except ConfigurationError as error:
            print(error)
        finally:
            await storage.aclose()

    asyncio.run(main())
    """
)


def open_as_unprivileged(path: Path) -> str:
    """The ConfigurationError a process without root's privileges gets opening `path`."""
    done = subprocess.run(
        [*as_unprivileged(), sys.executable, "-c", OPEN_SCRIPT, str(path)],
        env=unprivileged_env(os.environ),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stderr == ""
    return done.stdout.strip()


async def test_a_missing_folder_is_named_and_nothing_is_created(tmp_path: Path) -> None:
    """A run on a file in a folder that does not exist raises a ConfigurationError naming the
    folder; no lock folder or anything else is made."""
    missing = tmp_path / "missing"
    agent = create_agent(provider=ScriptedProvider([]), storage=f"sqlite:///{missing}/agent.db")
    with pytest.raises(ConfigurationError, match=f"the folder {missing} does not exist"):
        await agent.process(AgentProps("q", "t"))
    await agent.aclose()
    assert os.listdir(tmp_path) == []


async def test_a_file_that_is_not_a_database_leaves_no_lock_folder(tmp_path: Path) -> None:
    """A run on a file that is not an SQLite database says so and leaves no `<db>-locks`
    folder beside it."""
    notes = tmp_path / "notes.db"
    notes.write_text("not a database " * 100)
    agent = create_agent(provider=ScriptedProvider([]), storage=f"sqlite:///{notes}")
    with pytest.raises(ConfigurationError, match="the file is not an SQLite database"):
        await agent.process(AgentProps("q", "t"))
    await agent.aclose()
    assert os.listdir(tmp_path) == [notes.name]


async def test_a_folder_given_as_the_file_is_named_a_folder(tmp_path: Path) -> None:
    """A folder where the file should be is called a folder, with a file path to use."""
    storage = SQLiteStorage(tmp_path)
    with pytest.raises(
        ConfigurationError, match=f"that is a folder; pass a file path, e.g. {tmp_path}/agent.db"
    ):
        await storage.list_threads()
    await storage.aclose()


def test_a_file_without_permission_is_permission_denied(shared_dir: Path) -> None:
    """A mode-000 file of another user is "permission denied" with its mode and owner, not a
    folder to check."""
    locked = shared_dir / "locked.db"
    locked.write_bytes(b"")
    locked.chmod(0o000)
    message = open_as_unprivileged(locked)
    assert "permission denied: it is ----------" in message
    assert "directory" not in message


def test_a_folder_without_write_permission_is_permission_denied(shared_dir: Path) -> None:
    """A new file in a folder the process may not write to names the folder and its mode."""
    folder = shared_dir / "read-only"
    folder.mkdir(mode=0o555)
    message = open_as_unprivileged(folder / "agent.db")
    assert f"may not create files in the folder {folder} (it is dr-xr-xr-x" in message
    assert not list(folder.iterdir())


def test_a_failed_observation_write_is_one_log_line(tmp_path: Path) -> None:
    """Observations that cannot be written to an unopenable file log one line saying why,
    with no traceback."""
    script = textwrap.dedent(
        """
        import asyncio, sys
        from pes_agent import Observation, ObservationType, configure_logging
        from pes_agent.storage import SQLiteStorage

        async def main() -> None:
            configure_logging("WARNING")
            storage = SQLiteStorage(sys.argv[1])
            await storage.add_observation(
                Observation(thread_id="t", trace_id="r", type=ObservationType.ERROR, title="x")
            )
            await storage.aclose()

        asyncio.run(main())
        """
    )
    missing = tmp_path / "missing"
    done = subprocess.run(
        [sys.executable, "-c", script, str(missing / "agent.db")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "sqlite_observation_write_failed" in lines[0]
    assert f"the folder {missing} does not exist" in lines[0]
