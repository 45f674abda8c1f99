"""The loopback model server, for recording real SDK runs in the cassette tests."""

from __future__ import annotations

from tests.pes_agent.providers.conftest import _clean_environment
from tests.pes_agent.providers.model_server import model_server

__all__ = ["_clean_environment", "model_server"]
