"""`pes-agent eval`: a YAML dataset against the demo agent; exit 0 when every case passes,
1 when one fails, 2 when the file cannot be read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .helpers import REPO, cli_env, run_cli

EXAMPLE = REPO / "examples" / "evals"

FAILING = """\
name: failing
cases:
  - name: right_city
    inputs: Lisbon or Porto?
    evaluators:
      - AnswerContains: Lisbon
  - name: wrong_city
    inputs: Lisbon or Porto?
    evaluators:
      - AnswerContains: Madrid
      - CalledTools: [search]
evaluators:
  - Status: success
"""

pytestmark = pytest.mark.slow


def test_the_example_dataset_passes_and_writes_its_report(tmp_path: Path) -> None:
    """The example's 8 cases pass on the demo agent with the scripted judge: the report
    table is printed, --json holds every case, and the exit code is 0."""
    out = tmp_path / "report.json"
    done = run_cli(
        "eval",
        "dataset.yaml",
        "--demo",
        "--judge",
        "scripted_judge:JUDGE",
        "--json",
        str(out),
        env=cli_env(tmp_path),
        cwd=EXAMPLE,
    )
    assert done.code == 0, done.stderr
    assert "judged_helpful" in done.stdout
    assert "LLMJudge" in done.stdout
    assert "all 8 cases passed" in done.stdout
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["name"] == "demo_agent"
    assert len(report["cases"]) == 8
    assert report["failures"] == []
    assert report["failed_cases"] == []
    judged = next(c for c in report["cases"] if c["name"] == "judged_helpful")
    assert judged["assertions"]["LLMJudge"]["value"] is True


def test_a_failing_case_exits_1_and_names_it(tmp_path: Path) -> None:
    """A case whose assertion fails makes the exit code 1; the report gives the reason and
    the last line names the case."""
    dataset = tmp_path / "failing.yaml"
    dataset.write_text(FAILING, encoding="utf-8")
    out = tmp_path / "report.json"
    done = run_cli("eval", str(dataset), "--demo", "--json", str(out), env=cli_env(tmp_path))
    assert done.code == 1, done.stderr
    assert "1 of 2 cases failed: wrong_city" in done.stdout
    assert "CalledTools: ✗" in done.stdout
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["failed_cases"] == ["wrong_city"]
    wrong = next(c for c in report["cases"] if c["name"] == "wrong_city")
    assert wrong["assertions"]["CalledTools"]["reason"].endswith("but not 'search'")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cases: [\n  - name: x\n", "not a usable dataset"),
        (
            "name: d\ncases:\n  - inputs: q\n    evaluators:\n      - NoSuchCheck: 1\n",
            "NoSuchCheck",
        ),
    ],
    ids=["bad-yaml", "unknown-evaluator"],
)
def test_an_unreadable_dataset_exits_2_in_one_line(tmp_path: Path, text: str, message: str) -> None:
    """A dataset file that is not YAML, or names an unknown evaluator, exits 2 with one line."""
    dataset = tmp_path / "bad.yaml"
    dataset.write_text(text, encoding="utf-8")
    done = run_cli("eval", str(dataset), "--demo", env=cli_env(tmp_path))
    assert done.code == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert message in done.stderr


def test_a_missing_dataset_file_exits_2(tmp_path: Path) -> None:
    """A dataset path that does not exist exits 2, naming it."""
    done = run_cli("eval", str(tmp_path / "nope.yaml"), "--demo", env=cli_env(tmp_path))
    assert done.code == 2
    assert "no such dataset file" in done.stderr


def test_an_llm_judge_on_the_demo_needs_a_judge(tmp_path: Path) -> None:
    """An LLMJudge case on the demo agent without --judge exits 2 saying what to pass."""
    done = run_cli("eval", str(EXAMPLE / "dataset.yaml"), "--demo", env=cli_env(tmp_path))
    assert done.code == 2
    assert "--judge MODULE:ATTR" in done.stderr


def test_a_judge_that_is_not_a_provider_exits_2(tmp_path: Path) -> None:
    """--judge naming something that is not a provider exits 2, naming what it is."""
    done = run_cli(
        "eval",
        "dataset.yaml",
        "--demo",
        "--judge",
        "scripted_judge:verdict",
        env=cli_env(tmp_path),
        cwd=EXAMPLE,
    )
    assert done.code == 2
    assert "--judge 'scripted_judge:verdict': a function, not a provider" in done.stderr
