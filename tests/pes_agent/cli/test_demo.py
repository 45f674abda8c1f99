"""`pes-agent demo`: a whole run offline, on the scripted model and the built-in tools."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import DemoStore
from .helpers import REPO, cli_env, lines, run_cli

pytestmark = pytest.mark.slow  # each test runs the command in a subprocess


def test_demo_shows_the_scripted_model_the_tool_calls_and_the_answer(
    demo_store: DemoStore,
) -> None:
    """The demo exits 0 and its plain output names the scripted model, each call and the answer."""
    result = demo_store.last
    assert result.code == 0
    assert "Traceback" not in result.stderr
    out = result.stdout
    assert "scripted model" in out
    assert "no API key, no network" in out
    assert "plan: the warmer of Lisbon and Porto this weekend" in out
    for call in ("call_1 get_weather", "call_2 get_weather", "call_3 pick_warmest"):
        assert f"▶ {call}" in out
        assert f"✓ {call}" in out
    # The lookups start while the plan is still being written: before the plan is shown.
    assert out.index("▶ call_1 get_weather") < out.index("plan: the warmer")
    assert "Go to **Lisbon**" in out
    assert "success" in lines(out)[-2]


def test_demo_shows_placeholders_then_their_resolved_values(demo_store: DemoStore) -> None:
    """The planned calls show `{step_N_result}` placeholders; the started calls their values."""
    out = demo_store.last.stdout
    assert '"{step_1_result}", "{step_2_result}"' in out
    assert "(after call_1, call_2)" in out
    assert '▶ call_4 find_events {"city": "Lisbon"}' in out


def test_demo_lookups_run_side_by_side(demo_store: DemoStore) -> None:
    """Both weather lookups start before either finishes: the plain output shows it in order."""
    out = lines(demo_store.last.stdout)

    def index(text: str) -> int:
        return next(i for i, line in enumerate(out) if text in line)

    assert index("▶ call_2 get_weather") < index("✓ call_1 get_weather")
    assert index("▶ call_1 get_weather") < index("✓ call_2 get_weather")


def test_demo_json_prints_the_final_response_and_metadata(tmp_path: Path) -> None:
    """`demo --json` prints one JSON document (no live view) with the answer and metadata."""
    result = run_cli("demo", "--json", "--db", str(tmp_path / "a.db"), env=cli_env(tmp_path))
    assert result.code == 0, result.stderr
    data = result.json()
    assert data["response"]["content"].startswith("Go to **Lisbon**")
    assert data["metadata"]["status"] == "success"
    assert data["metadata"]["tool_calls"] == 4
    assert data["metadata"]["llm_calls"] == 2
    assert data["metadata"]["usage"]["total_tokens"] > 0


def test_demo_without_db_writes_to_the_data_directory(tmp_path: Path) -> None:
    """With neither --db nor PES_AGENT_DB the run is saved under $XDG_DATA_HOME/pes-agent."""
    result = run_cli("demo", "--json", env=cli_env(tmp_path))
    assert result.code == 0, result.stderr
    assert (tmp_path / "data" / "pes-agent" / "agent.db").is_file()


def test_demo_uses_the_store_named_by_pes_agent_db(tmp_path: Path) -> None:
    """PES_AGENT_DB (a plain path) picks the store when --db is absent."""
    db = tmp_path / "from-env.db"
    result = run_cli("demo", "--json", env=cli_env(tmp_path, PES_AGENT_DB=str(db)))
    assert result.code == 0, result.stderr
    assert db.is_file()
    assert not (tmp_path / "data" / "pes-agent" / "agent.db").exists()


def test_python_m_pes_agent_cli_is_the_same_command(tmp_path: Path) -> None:
    """`python -m pes_agent.cli` runs the same program as the console script."""
    done = subprocess.run(
        [sys.executable, "-m", "pes_agent.cli", "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=cli_env(tmp_path),
        timeout=60,
        check=False,
    )
    assert done.returncode == 0
    assert "pes-agent demo" in done.stdout
    assert "130" in done.stdout
    assert "partial" in done.stdout


def test_the_library_works_without_rich(tmp_path: Path) -> None:
    """With rich unimportable, pes_agent imports and runs an agent: only the CLI needs it."""
    code = """
import asyncio, sys
sys.modules["rich"] = None  # any `import rich` now raises ImportError
from pes_agent import AgentProps, create_agent
from pes_agent.testing import ScriptedProvider

async def main():
    async with create_agent(provider=ScriptedProvider(['{"intent": "x"}', "hi"])) as agent:
        print((await agent.process(AgentProps("q", "t"))).metadata.status)

asyncio.run(main())
"""
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=cli_env(tmp_path),
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "success"


def test_only_the_cli_package_imports_rich() -> None:
    """No module of pes_agent outside pes_agent/cli mentions an import of rich."""
    package = REPO / "pes_agent"
    offenders = [
        str(path.relative_to(REPO))
        for path in package.rglob("*.py")
        if "cli" not in path.relative_to(package).parts[:1]
        and any(
            line.lstrip().startswith(("import rich", "from rich"))
            for line in path.read_text(encoding="utf-8").splitlines()
        )
    ]
    assert offenders == []


def test_without_rich_the_command_says_how_to_install_it(tmp_path: Path) -> None:
    """With rich missing the command prints one line naming the `cli` extra, and exits 2."""
    code = (
        "import sys; sys.modules['rich'] = None; "
        "from pes_agent.cli.main import main; sys.exit(main(['demo']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=cli_env(tmp_path),
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert lines(done.stderr) == [
        "pes-agent: error: the command line needs rich: pip install 'pes-agent[cli]'"
    ]


async def test_the_demo_model_answers_any_number_of_runs_at_once() -> None:
    """`serve --demo` shares one demo model between runs: each gets a plan, then the answer,
    however the runs interleave (a model scripted by position ran out after the first run)."""
    import asyncio

    from pes_agent import AgentProps, create_agent
    from pes_agent.cli.demo import demo_model, demo_tools

    async with create_agent(provider=demo_model(), tools=demo_tools()) as agent:
        responses = await asyncio.gather(
            *(agent.process(AgentProps("Lisbon or Porto?", f"t{i % 3}")) for i in range(6))
        )
    assert [r.metadata.status for r in responses] == ["success"] * 6
    assert all("Go to **Lisbon**" in r.response.content for r in responses)
