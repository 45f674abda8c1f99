"""Start-up stays light: model SDKs load only when a provider of theirs is built.

Each check runs in a fresh interpreter, since this one has imported everything already.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import subprocess
import sys
from types import ModuleType

import pytest

import pes_agent
import pes_agent.evals
import pes_agent.providers

SDKS = ["openai", "anthropic"]


def loaded_after(code: str, watched: list[str]) -> list[str]:
    """Run `code` in a fresh interpreter; which of `watched` it left in `sys.modules`."""
    report = f"print(json.dumps([m for m in {watched!r} if m in sys.modules]))"
    probe = f"{code}\nimport json, sys\n{report}"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False, timeout=120
    )
    assert out.returncode == 0, out.stderr
    loaded: list[str] = json.loads(out.stdout.strip().splitlines()[-1])
    return loaded


def test_importing_pes_agent_and_all_its_names_loads_no_model_sdk() -> None:
    """`import pes_agent`, every public name of it and of `pes_agent.retrieval`, and the CLI
    module import neither the OpenAI nor the Anthropic SDK."""
    code = (
        "import pes_agent\n"
        "from pes_agent import *\n"
        "from pes_agent.retrieval import *\n"
        "import pes_agent.cli.main, pes_agent.providers, pes_agent.core\n"
    )
    assert loaded_after(code, SDKS) == []


def test_building_a_provider_imports_its_sdk() -> None:
    """Building an OpenAI provider, OpenAI embeddings or an Anthropic provider still works,
    and loads that vendor's SDK only then."""
    code = (
        "from pes_agent import OpenAIEmbeddings, ProviderConfig\n"
        "from pes_agent.providers import create_provider\n"
        "import sys\n"
        "assert 'openai' not in sys.modules\n"
        "provider = create_provider(ProviderConfig('openai', 'gpt-4o-mini', api_key='sk-test'))\n"
        "assert type(provider).__name__ == 'OpenAIProvider', provider\n"
        "assert 'anthropic' not in sys.modules\n"
        "OpenAIEmbeddings(api_key='sk-test')\n"
        "create_provider(ProviderConfig('anthropic', 'claude-sonnet-4-5', api_key='sk-test'))\n"
    )
    assert loaded_after(code, SDKS) == SDKS


def test_cli_help_loads_no_sdk_pydantic_or_structlog() -> None:
    """`pes-agent --help` prints its help without importing a model SDK, pydantic or structlog
    (what kept it above a second)."""
    code = (
        "import contextlib, io\n"
        "from pes_agent.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.suppress(SystemExit):\n"
        "    main(['--help'])\n"
        "assert 'exit codes:' in out.getvalue(), out.getvalue()\n"
    )
    assert loaded_after(code, [*SDKS, "pydantic", "structlog"]) == []


def type_checking_imports(package: ModuleType) -> dict[str, str]:
    """The names `package` imports under `if TYPE_CHECKING:` and their modules (what type
    checkers see)."""
    tree = ast.parse(inspect.getsource(package))
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom)
                assert statement.module
                found.update((alias.name, statement.module) for alias in statement.names)
    return found


@pytest.mark.parametrize(
    "package", [pes_agent, pes_agent.providers, pes_agent.evals], ids=lambda p: p.__name__
)
def test_lazy_names_are_the_ones_type_checkers_see(package: ModuleType) -> None:
    """A package's lazy table names exactly its `TYPE_CHECKING` imports, each listed in
    `__all__`, and each resolves to the object of its home module."""
    homes: dict[str, str] = vars(package)["_HOMES"]
    assert homes == type_checking_imports(package)
    assert set(homes) <= set(package.__all__)
    for name, module in homes.items():
        assert getattr(package, name) is getattr(importlib.import_module(module), name)
    assert set(homes) <= set(dir(package))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = package.Nope


def test_every_public_name_of_pes_agent_is_importable() -> None:
    """Every name in `pes_agent.__all__` can be imported from `pes_agent`."""
    for name in pes_agent.__all__:
        assert getattr(pes_agent, name) is not None, name
