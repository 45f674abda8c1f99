"""open_storage: from create_agent's `storage=` argument to an adapter."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pes_agent.config import ThreadConfig
from pes_agent.errors import UsageError
from pes_agent.storage import InMemoryStorage, PostgresStorage, SQLiteStorage, open_storage


def test_memory_gives_an_in_memory_store() -> None:
    """'memory' opens an InMemoryStorage."""
    assert isinstance(open_storage("memory"), InMemoryStorage)


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:///agent.db", "agent.db"),
        ("sqlite:///data/agent.db", "data/agent.db"),
        ("sqlite:////var/lib/agent.db", "/var/lib/agent.db"),
        ("sqlite:///:memory:", ":memory:"),
        ("SQLITE:///my%20agent.db", "my agent.db"),
    ],
)
async def test_sqlite_urls_name_the_file(url: str, path: str) -> None:
    """sqlite:///relative, sqlite:////absolute and sqlite:///:memory: pick that database."""
    storage = open_storage(url)
    assert isinstance(storage, SQLiteStorage)
    assert storage.path == path
    await storage.aclose()


@pytest.mark.parametrize("url", ["sqlite://agent.db", "sqlite:", "sqlite:///"])
def test_malformed_sqlite_url_says_how_to_write_it(url: str) -> None:
    """A SQLite URL without the three slashes is a usage error showing the right form."""
    with pytest.raises(UsageError, match=r"sqlite:///relative/path\.db"):
        open_storage(url)


async def test_in_memory_sqlite_works_without_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sqlite:///:memory: is a working store that writes no files."""
    monkeypatch.chdir(tmp_path)
    storage = open_storage("sqlite:///:memory:")
    await storage.set_thread_config("t", ThreadConfig())
    async with storage.lock_thread("t"):
        assert await storage.list_threads() == ["t"]
    await storage.aclose()
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
async def test_postgres_urls_give_a_postgres_store_without_connecting(scheme: str) -> None:
    """postgresql:// and postgres:// open a PostgresStorage lazily; its repr hides the password."""
    storage = open_storage(f"{scheme}://app:hunter2@db.invalid:5432/agents")
    assert isinstance(storage, PostgresStorage)
    assert "hunter2" not in repr(storage)
    assert "app:***@db.invalid" in repr(storage)
    await storage.aclose()


def test_unknown_scheme_lists_the_accepted_ones_without_the_password() -> None:
    """An unknown scheme is a usage error naming every accepted form, never the URL's password."""
    with pytest.raises(UsageError) as caught:
        open_storage("mysql://root:hunter2@localhost/agents")
    text = str(caught.value)
    assert "'mysql'" in text
    for accepted in ('"memory"', "sqlite:///", "postgresql://"):
        assert accepted in text
    assert "hunter2" not in text


def test_plain_word_that_is_not_a_backend_is_a_usage_error() -> None:
    """storage='redis' is refused with the accepted forms."""
    with pytest.raises(UsageError, match="accepted"):
        open_storage("redis")


def test_an_adapter_is_returned_as_it_is() -> None:
    """An object implementing Storage is used directly."""
    adapter = InMemoryStorage()
    assert open_storage(adapter) is adapter


def test_an_object_that_is_not_storage_is_a_usage_error() -> None:
    """Passing something that is neither a string nor a Storage says what is accepted."""
    with pytest.raises(UsageError, match="Storage adapter"):
        open_storage(42)  # type: ignore[arg-type]
