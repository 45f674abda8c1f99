"""Where the CLI's store lives by default, and how --db and PES_AGENT_DB override it."""

from __future__ import annotations

from pathlib import Path, PurePosixPath, PureWindowsPath

import pytest

from pes_agent.cli.paths import default_db_path, resolve_store

from .helpers import cli_env, run_cli


def test_linux_uses_xdg_data_home() -> None:
    """On Linux an absolute $XDG_DATA_HOME holds pes-agent/agent.db."""
    path = default_db_path(
        platform="linux", environ={"XDG_DATA_HOME": "/data"}, home=PurePosixPath("/home/u")
    )
    assert path == PurePosixPath("/data/pes-agent/agent.db")


def test_linux_falls_back_to_local_share() -> None:
    """Without $XDG_DATA_HOME the file is under ~/.local/share."""
    path = default_db_path(platform="linux", environ={}, home=PurePosixPath("/home/u"))
    assert path == PurePosixPath("/home/u/.local/share/pes-agent/agent.db")


def test_a_relative_xdg_data_home_is_ignored() -> None:
    """A relative $XDG_DATA_HOME is invalid by the XDG spec, so ~/.local/share is used."""
    path = default_db_path(
        platform="linux", environ={"XDG_DATA_HOME": "data"}, home=PurePosixPath("/home/u")
    )
    assert path == PurePosixPath("/home/u/.local/share/pes-agent/agent.db")


def test_macos_uses_application_support() -> None:
    """On macOS the file is under ~/Library/Application Support, whatever XDG says."""
    path = default_db_path(
        platform="darwin", environ={"XDG_DATA_HOME": "/data"}, home=PurePosixPath("/Users/u")
    )
    assert path == PurePosixPath("/Users/u/Library/Application Support/pes-agent/agent.db")


def test_windows_uses_localappdata() -> None:
    """On Windows the file is under %LOCALAPPDATA%."""
    path = default_db_path(
        platform="win32",
        environ={"LOCALAPPDATA": r"C:\Users\u\AppData\Local"},
        home=PureWindowsPath(r"C:\Users\u"),
    )
    assert path == PureWindowsPath(r"C:\Users\u\AppData\Local\pes-agent\agent.db")


def test_windows_without_localappdata_uses_the_home_directory() -> None:
    """Without %LOCALAPPDATA% the usual AppData\\Local under the home directory is used."""
    path = default_db_path(platform="win32", environ={}, home=PureWindowsPath(r"C:\Users\u"))
    assert path == PureWindowsPath(r"C:\Users\u\AppData\Local\pes-agent\agent.db")


def test_db_flag_wins_over_the_environment(tmp_path: Path) -> None:
    """--db beats PES_AGENT_DB; a plain path becomes an absolute sqlite URL."""
    flag = tmp_path / "flag.db"
    store = resolve_store(str(flag), environ={"PES_AGENT_DB": str(tmp_path / "env.db")})
    assert store.spec == f"sqlite:///{flag.as_posix()}"
    assert store.path == flag
    assert store.source == "--db"


def test_environment_wins_over_the_default(tmp_path: Path) -> None:
    """PES_AGENT_DB beats the data-directory default."""
    store = resolve_store(None, environ={"PES_AGENT_DB": f"sqlite:///{tmp_path}/env.db"})
    assert store.path == tmp_path / "env.db"
    assert store.source == "PES_AGENT_DB"


def test_default_is_the_data_directory_file(tmp_path: Path) -> None:
    """With neither, the store is the platform default file."""
    store = resolve_store(None, environ={"XDG_DATA_HOME": str(tmp_path)})
    assert store.source == "default"
    assert store.path == Path(default_db_path(environ={"XDG_DATA_HOME": str(tmp_path)}))


def test_a_relative_sqlite_url_is_made_absolute() -> None:
    """sqlite:///rel.db means rel.db in the current directory, resolved once."""
    store = resolve_store("sqlite:///rel.db", environ={})
    assert store.path == Path("rel.db").resolve()
    assert store.spec == "sqlite:///" + Path("rel.db").resolve().as_posix()


def test_a_postgres_url_is_kept_and_described_without_its_password() -> None:
    """A PostgreSQL URL passes through; describing it never shows the password."""
    store = resolve_store("postgresql://me:s3cret@db.local:5432/agent", environ={})
    assert store.spec == "postgresql://me:s3cret@db.local:5432/agent"
    assert store.path is None
    assert "s3cret" not in store.describe()
    assert store.describe() == "postgresql://db.local:5432/agent"


def test_memory_is_accepted() -> None:
    """`memory` is a store too (nothing is kept after the command)."""
    assert resolve_store("memory", environ={}).spec == "memory"


@pytest.mark.slow
def test_a_db_path_with_url_characters_is_exactly_that_file(tmp_path: Path) -> None:
    """`--db 'dir/a#b?c%20.db'` creates that very file, and a read command finds it there."""
    name = "dir/a#b?c%20.db"
    env = cli_env(tmp_path / "home")
    work = tmp_path / "work"
    (work / "dir").mkdir(parents=True)
    made = run_cli("demo", "--json", "--db", name, env=env, cwd=work)
    assert made.code == 0, made.stderr
    assert (work / name).is_file()
    # Only that file (and its own SQLite sidecars) exists: nothing landed beside it.
    assert [p.name for p in work.iterdir()] == ["dir"]
    assert all(p.name.startswith("a#b?c%20.db") for p in (work / "dir").iterdir())
    listed = run_cli("threads", "--json", "--db", name, env=env, cwd=work)
    assert listed.code == 0, listed.stderr
    assert "demo" in listed.stdout


def test_a_sqlite_url_is_decoded_as_the_storage_factory_decodes_it() -> None:
    """In sqlite:///x%20y.db?mode=ro the file is "x y.db": escapes decoded, the query dropped."""
    store = resolve_store("sqlite:///x%20y.db?mode=ro", environ={})
    assert store.path == Path("x y.db").resolve()
    assert store.describe() == str(Path("x y.db").resolve())
