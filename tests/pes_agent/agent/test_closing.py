"""Closing an agent: what it closes, and what becomes of the runs still under way."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pes_agent import (
    AgentProps,
    ProviderConfig,
    SQLiteStorage,
    UsageError,
    create_agent,
)
from pes_agent.providers import registry as registry_module
from pes_agent.providers.registry import register_provider
from pes_agent.testing import ScriptedProvider

from .conftest import plan_json


class _ClosingProbe(ScriptedProvider):
    """A scripted provider that notes whether it was closed, and may fail to close."""

    closed = False
    fail_on_close = False

    async def aclose(self) -> None:
        self.closed = True
        if self.fail_on_close:
            raise RuntimeError("close failed")


@pytest.fixture
def built() -> Iterator[list[_ClosingProbe]]:
    """Registers the provider name 'probe'; yields the providers it builds."""
    made: list[_ClosingProbe] = []

    def factory(config: ProviderConfig) -> _ClosingProbe:
        probe = _ClosingProbe([plan_json(), "ok"], model=config.model)
        probe.fail_on_close = config.model == "failing"
        made.append(probe)
        return probe

    saved = dict(registry_module._REGISTRY)
    register_provider("probe", factory)
    try:
        yield made
    finally:
        registry_module._REGISTRY.clear()
        registry_module._REGISTRY.update(saved)


async def test_closing_one_agent_leaves_a_shared_storage_working_for_another(
    tmp_path: Path,
) -> None:
    """Two agents share one SQLiteStorage; closing the first leaves the second able to run."""
    storage = SQLiteStorage(tmp_path / "agent.db")
    first = create_agent(provider=ScriptedProvider([plan_json(), "one"]), storage=storage)
    second = create_agent(provider=ScriptedProvider([plan_json(), "two"]), storage=storage)
    try:
        assert (await first.process(AgentProps("q1", "a"))).metadata.status == "success"
        await first.aclose()
        result = await second.process(AgentProps("q2", "b"))
        assert result.metadata.status == "success", result.metadata.error
        assert [m.content for m in await storage.get_messages("b")] == ["q2", "two"]
    finally:
        await second.aclose()
        await storage.aclose()


async def test_a_provider_object_passed_in_is_left_open() -> None:
    """aclose() does not close a provider object the caller created and passed in."""
    provider = _ClosingProbe([plan_json(), "ok"])
    agent = create_agent(provider=provider)
    await agent.process(AgentProps("q", "t"))
    await agent.aclose()
    assert not provider.closed


@pytest.mark.parametrize("spec", ["probe:model", ProviderConfig("probe", "model")])
async def test_a_provider_built_from_a_string_or_config_is_closed(
    spec: str | ProviderConfig, built: list[_ClosingProbe]
) -> None:
    """aclose() closes the provider create_agent built from 'NAME:MODEL' or a ProviderConfig."""
    agent = create_agent(provider=spec)
    assert (await agent.process(AgentProps("q", "t"))).metadata.status == "success"
    await agent.aclose()
    assert len(built) == 1
    assert built[0].closed


async def test_a_storage_built_from_a_url_is_closed(tmp_path: Path) -> None:
    """aclose() closes the store create_agent opened from a sqlite:/// URL."""
    agent = create_agent(
        provider=ScriptedProvider([plan_json(), "ok"]),
        storage=f"sqlite:///{tmp_path / 'agent.db'}",
    )
    await agent.process(AgentProps("q", "t"))
    await agent.aclose()
    with pytest.raises(UsageError, match="closed"):
        await agent.state.list_threads()


async def test_a_resource_failing_to_close_does_not_leave_the_others_open(
    tmp_path: Path, built: list[_ClosingProbe]
) -> None:
    """A built provider whose aclose raises does not leave the store open; the error is raised."""
    agent = create_agent(provider="probe:failing", storage=f"sqlite:///{tmp_path / 'agent.db'}")
    await agent.state.list_threads()
    with pytest.raises(RuntimeError, match="close failed"):
        await agent.aclose()
    with pytest.raises(UsageError, match="closed"):
        await agent.state.list_threads()
