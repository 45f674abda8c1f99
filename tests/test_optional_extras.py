"""Optional integrations stay optional: importing the library loads none of their packages."""

from __future__ import annotations

import json
import subprocess
import sys

# rich is left out: structlog itself imports it when it is installed.
OPTIONAL = [
    "numpy",
    "sqlite_vec",
    "asyncpg",
    "torch",
    "sentence_transformers",
    "mcp",
    "opentelemetry",
    "starlette",
    "uvicorn",
    "ag_ui",
    "pydantic_evals",
    "pydantic_ai",
]


def test_importing_pes_agent_and_its_public_names_loads_no_optional_package() -> None:
    """`import pes_agent` (and the retrieval names it re-exports) imports no optional extra."""
    code = (
        "import json, sys\n"
        "import pes_agent\n"
        "from pes_agent import Retriever, HashingEmbeddings, SQLiteVectorStore, create_agent\n"
        "import pes_agent.ecs, pes_agent.retrieval\n"
        f"print(json.dumps(sorted(m for m in {OPTIONAL!r} if m in sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_evals_without_pydantic_evals_names_the_extra() -> None:
    """Without pydantic-evals, `pes_agent.evals`' runs still import and its evaluators raise
    an ImportError naming the extra to install."""
    code = (
        "import sys\n"
        "sys.modules['pydantic_evals'] = None  # as if not installed\n"
        "from pes_agent.evals import AgentRun, run_agent, agent_task\n"
        "try:\n"
        "    from pes_agent.evals import CalledTools\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert "pip install 'pes-agent[evals]'" in out.stdout
