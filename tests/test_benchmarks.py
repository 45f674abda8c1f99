"""The soak benchmark, small: concurrent runs with injected faults lose and interleave nothing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.pes_agent.storage.conftest import require_postgres

SOAK = Path(__file__).resolve().parents[1] / "benchmarks" / "soak.py"
LAST_LINE = re.compile(
    r"soak: (\d+) runs, (\d+) threads, (sqlite|postgres): lost (\d+), interleaved (\d+), "
    r"runs/s (\d+), rss (\d+)->(\d+) MiB, fds (\d+)->(\d+), tasks (\d+)->(\d+)"
)


def run_soak(*args: str, env: dict[str, str] | None = None) -> re.Match[str]:
    completed = subprocess.run(
        [sys.executable, str(SOAK), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    lines = completed.stdout.strip().splitlines()
    assert lines, completed.stderr[-3000:]
    match = LAST_LINE.fullmatch(lines[-1])
    assert match, f"unexpected last line {lines[-1]!r}\n{completed.stderr[-3000:]}"
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    assert "Traceback" not in completed.stderr
    return match


def check_verdict(match: re.Match[str], storage: str) -> None:
    runs, threads, backend, lost, interleaved = match.groups()[:5]
    fds_start, fds_end, tasks_start, tasks_end = match.groups()[8:]
    assert (runs, threads, backend) == ("200", "10", storage)
    assert (lost, interleaved) == ("0", "0")
    assert fds_start == fds_end
    assert tasks_start == tasks_end


@pytest.mark.slow
def test_soak_on_sqlite_loses_and_interleaves_nothing() -> None:
    """200 runs on 10 threads with faults and cancellations: every turn whole and in order."""
    check_verdict(run_soak("--runs", "200", "--threads", "10", "--seed", "7"), "sqlite")


@pytest.mark.slow
@pytest.mark.postgres
def test_soak_on_postgres_loses_and_interleaves_nothing() -> None:
    """The same on PostgreSQL, in a schema the script creates and drops."""
    url = require_postgres()
    env = {**os.environ, "PES_SOAK_POSTGRES_URL": url}
    match = run_soak(
        "--runs", "200", "--threads", "10", "--seed", "7", "--storage", "postgres", env=env
    )
    check_verdict(match, "postgres")


PES_VS_REACT = Path(__file__).resolve().parents[1] / "benchmarks" / "pes_vs_react.py"
PES_VS_REACT_LINE = re.compile(
    r"pes_vs_react: tasks (\d+), model calls (\d+)/(\d+) = [\d.]+, "
    r"prompt tokens (\d+)/(\d+) = [\d.]+, wall ms \d+/\d+ = [\d.]+ "
    r"\(tokens: (tiktoken o200k_base|~4 chars/token)\)"
)
PES_REEVALUATE_LINE = re.compile(
    r"pes_reevaluate: re-evaluations (\d+), model calls (\d+)/(\d+) = [\d.]+, "
    r"prompt tokens (\d+)/(\d+) = [\d.]+, wall ms \d+/\d+ = [\d.]+"
)


# Two tasks, one run, an instant model and tools at 5% of their latency: seconds, not a minute.
TINY = ("--tasks", "2", "--repeats", "1", "--ttft-ms", "0", "--ms-per-token", "0")
TINY += ("--tool-scale", "0.05")


def run_pes_vs_react(*args: str) -> tuple[re.Match[str], re.Match[str]]:
    match, reevaluating, _ = run_pes_vs_react_output(*args)
    return match, reevaluating


def run_pes_vs_react_output(*args: str) -> tuple[re.Match[str], re.Match[str], str]:
    completed = subprocess.run(
        [sys.executable, str(PES_VS_REACT), *TINY, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    lines = completed.stdout.strip().splitlines()
    assert "calls/levels" in completed.stdout
    match = PES_VS_REACT_LINE.fullmatch(lines[-1])
    assert match, f"unexpected last line {lines[-1]!r}"
    reevaluating = PES_REEVALUATE_LINE.fullmatch(lines[-2])
    assert reevaluating, f"unexpected line {lines[-2]!r}"
    return match, reevaluating, completed.stdout


@pytest.mark.slow
def test_pes_vs_react_counts_calls_per_architecture() -> None:
    """On two tasks PES makes two model calls each, ReAct one per dependency level plus the
    answer (one per tool call plus the answer when sequential), with more prompt tokens."""
    match, _ = run_pes_vs_react()
    tasks, pes_calls, react_calls, pes_tokens, react_tokens, _ = match.groups()
    assert (tasks, pes_calls, react_calls) == ("2", "4", "7")  # levels 2 and 3, +1 answer each
    assert int(pes_tokens) < int(react_tokens)
    sequential, _ = run_pes_vs_react("--react-sequential")
    assert sequential.group(3) == "9"  # 4 and 3 tool calls, +1 answer each


@pytest.mark.slow
def test_pes_vs_react_counts_reevaluation_calls() -> None:
    """With reevaluate='each_wave' PES adds one model call per wave that leaves calls to run:
    one for the two-level task, two for the three-level chain, each with a prompt of its own."""
    _, reevaluating = run_pes_vs_react()
    reevaluations, calls, pes_calls, tokens, pes_tokens = reevaluating.groups()
    assert (reevaluations, calls, pes_calls) == ("3", "7", "4")
    assert int(tokens) > int(pes_tokens)


@pytest.mark.slow
def test_pes_vs_react_runs_every_task_and_checks_the_targets() -> None:
    """All twelve tasks run (a 20-call fan-out, a 4-level chain, language steps, slow tools, a
    single call): PES makes two model calls per task plus one per language step, ReAct one
    per turn; the prompt processing time is printed and each target gets a verdict."""
    match, _, output = run_pes_vs_react_output("--tasks", "12", "--prompt-ms-per-1k", "1")
    tasks, pes_calls, react_calls, pes_tokens, react_tokens, _ = match.groups()
    assert (tasks, pes_calls) == ("12", "26")  # 2 per task + the mix's 2 language steps
    # Turns: 3+4+3+3+4+3+2 (the first seven), 2 (fan-out), 5 (chain), 4 (the mix's texts are
    # written in its third turn, beside the translation), 3 (slow report), 2 (one call).
    assert react_calls == "38"
    assert int(pes_tokens) < int(react_tokens)
    assert "1 ms/1k prompt tokens" in output
    targets = next(line for line in output.splitlines() if line.startswith("targets: "))
    assert re.fullmatch(
        r"targets: wall PES/ReAct [\d.]+ <= 0\.75: (met|MISSED); no task above 1\.0x: "
        r"(met|MISSED( \(above: .+\))?); prompt tokens PES/ReAct [\d.]+ <= 0\.4: (met|MISSED)",
        targets,
    ), targets


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def run_last_line(script: str, pattern: re.Pattern[str], *args: str) -> re.Match[str]:
    """Run a benchmark script; it must exit 0 and print a last line matching `pattern`."""
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    assert "Traceback" not in completed.stderr
    lines = completed.stdout.strip().splitlines()
    assert lines, completed.stderr[-3000:]
    match = pattern.fullmatch(lines[-1])
    assert match, f"unexpected last line {lines[-1]!r}"
    return match


CONCURRENCY_PART = re.compile(
    r"(memory|sqlite) (\d+) runs ok (\d+) wall [\d.]+ s cpu [\d.]+ s rss \d+ MiB "
    r"gc [\d.]+ s gen2 [\d.]+ s"
)


@pytest.mark.slow
def test_concurrency_runs_every_configuration_and_each_run_succeeds() -> None:
    """50 runs on memory and on SQLite, each in a child process: every run succeeded."""
    args = ("--runs", "50", "--storage", "memory,sqlite", "--latency-ms", "5", "--repeats", "1")
    match = run_last_line("concurrency.py", re.compile(r"concurrency: (.+)"), *args)
    parts = [CONCURRENCY_PART.fullmatch(part) for part in match.group(1).split("; ")]
    assert all(parts), f"unexpected summary {match.group(1)!r}"
    assert [p.groups() for p in parts if p] == [("memory", "50", "50"), ("sqlite", "50", "50")]


OVERHEAD_LINE = re.compile(
    r"overhead: ratio 3 calls ([\d.]+) \(async\) ([\d.]+) \(sync\), "
    r"30 calls ([\d.]+) \(async\) ([\d.]+) \(sync\), "
    r"300 calls ([\d.]+) \(async\) ([\d.]+) \(sync\); "
    r"µs per extra call (-?\d+) \(async\) (-?\d+) \(sync\); "
    r"observations (\d+); KiB in flight (\d+) \(planning\) (\d+) \(synthesis\)"
)


@pytest.mark.slow
def test_overhead_compares_every_size_and_mode_with_pydantic_ai() -> None:
    """A few runs at 3, 30 and 300 calls, sync and async: six ratios and the diagnostics."""
    args = ("--runs", "3", "--runs-30", "2", "--runs-300", "1", "--in-flight", "10")
    match = run_last_line("overhead.py", OVERHEAD_LINE, *args)
    assert all(float(ratio) > 0 for ratio in match.groups()[:6])
    observations, planning, synthesis = (int(value) for value in match.groups()[8:])
    assert observations > 3, "at least one observation per tool call"
    assert planning > 0
    assert synthesis > 0


CRITICAL_PATH_LINE = re.compile(
    r"critical_path: (\d+) calls wall/critical path ([\d.]+) \(by hand ([\d.]+)\), "
    r"executor CPU (-?[\d.]+) µs/call \(ConcurrentExecutor ([\d.]+), by hand ([\d.]+)\)"
)


@pytest.mark.slow
def test_critical_path_measures_the_chains_beside_the_hand_written_dag() -> None:
    """10 chains of 3 calls: both take at least the critical path, and CPU time is counted."""
    args = ("--repeats", "1", "--sequential-repeats", "1", "--dag-chains", "10")
    args += ("--dag-layers", "3", "--dag-repeats", "1", "--runs", "20")
    match = run_last_line("critical_path.py", CRITICAL_PATH_LINE, *args)
    calls, ratio, by_hand, _, cpu, by_hand_cpu = match.groups()
    assert calls == "30"
    assert float(ratio) >= 1.0
    assert float(by_hand) >= 1.0
    assert float(cpu) > 0
    assert float(by_hand_cpu) > 0
