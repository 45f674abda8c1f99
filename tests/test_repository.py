"""The repository tests itself: nothing under tests/ reaches outside the clone."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_no_test_reads_the_shared_folder_beside_the_clone() -> None:
    """A user's clone has no `shared/` beside it, so no test may name one."""
    # `../shared`, or a path joined with `/ "shared"` (thread ids named "shared" are fine)
    outside = re.compile(r"""\.\./shared|/\s*["']shared["']""")
    offenders = [
        f"{path.relative_to(REPO)}:{number}"
        for path in sorted((REPO / "tests").rglob("*.py"))
        if path != Path(__file__).resolve()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if outside.search(line)
    ]
    assert offenders == [], f"tests read outside the repository: {offenders}"


def test_conformance_cases_are_copied_into_the_repository() -> None:
    """ART's parser cases and their provenance note live under tests/."""
    folder = REPO / "tests" / "pes_agent" / "planning" / "conformance"
    assert (folder / "art_output_parser_cases.json").stat().st_size > 1000
    assert "Provenance" in (folder / "README.md").read_text(encoding="utf-8")
