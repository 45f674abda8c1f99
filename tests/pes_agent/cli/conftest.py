"""Fixtures for the CLI tests: the loopback model server and a store holding demo runs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.pes_agent.providers.model_server import model_server

from .helpers import Completed, cli_env, run_cli

__all__ = ["DemoStore", "demo_store", "model_server"]


@dataclass(frozen=True, slots=True)
class DemoStore:
    """A store holding two demo runs on thread `demo`, and the output of the last one."""

    db: Path
    env: dict[str, str]
    last: Completed


@pytest.fixture(scope="session")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> DemoStore:
    """Two `pes-agent demo` runs into a fresh SQLite file, shared by the tests."""
    home = tmp_path_factory.mktemp("home")
    db = home / "demo.db"
    env = cli_env(home)
    for _ in range(2):
        last = run_cli("demo", "--db", str(db), env=env)
        assert last.code == 0, last.stderr
    return DemoStore(db=db, env=env, last=last)
