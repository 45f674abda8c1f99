"""The vector store contract, on every store: exact cosine ranking, upserts, filters, errors."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from pes_agent.errors import UsageError
from pes_agent.retrieval import DimensionMismatchError, MetadataValue, VectorStore
from pes_agent.retrieval.postgres import PostgresVectorStore
from pes_agent.retrieval.sqlite import SQLiteVectorStore
from tests.pes_agent.retrieval.conftest import StoreFactory
from tests.pes_agent.storage.conftest import POSTGRES_URL


def brute_force(
    matrix: npt.NDArray[np.float64], query: npt.NDArray[np.float64], top_k: int
) -> tuple[list[int], list[float]]:
    """Row indices and cosine similarities of the `top_k` rows nearest to `query`."""
    scores = (matrix @ query) / (np.linalg.norm(matrix, axis=1) * np.linalg.norm(query))
    order = np.argsort(-scores)[:top_k]
    return [int(i) for i in order], [float(scores[i]) for i in order]


async def fill(
    store: VectorStore, rng: np.random.Generator, rows: int, dimension: int
) -> npt.NDArray[np.float64]:
    matrix = rng.standard_normal((rows, dimension))
    await store.add(
        [f"doc-{i}" for i in range(rows)],
        matrix.tolist(),
        [f"text {i}" for i in range(rows)],
        [{"group": i % 3, "even": i % 2 == 0} for i in range(rows)],
    )
    return matrix


async def test_search_equals_a_brute_force_cosine_ranking(make_store: StoreFactory) -> None:
    """On random data, every store returns the brute-force top 10 by cosine, in order."""
    rng = np.random.default_rng(7)
    store = make_store(24)
    matrix = await fill(store, rng, 400, 24)
    for _ in range(25):
        query = rng.standard_normal(24)
        hits = await store.search(query.tolist(), top_k=10)
        expected_ids, expected_scores = brute_force(matrix, query, 10)
        assert [hit.id for hit in hits] == [f"doc-{i}" for i in expected_ids]
        assert [hit.score for hit in hits] == pytest.approx(expected_scores, abs=1e-5)
        assert [hit.text for hit in hits] == [f"text {i}" for i in expected_ids]


async def test_where_filters_rank_only_the_matching_rows(make_store: StoreFactory) -> None:
    """A `where` filter gives the brute-force ranking of the rows whose metadata match it all."""
    rng = np.random.default_rng(11)
    store = make_store(16)
    matrix = await fill(store, rng, 300, 16)
    query = rng.standard_normal(16)
    hits = await store.search(query.tolist(), top_k=8, where={"group": 1, "even": False})
    matching = [i for i in range(300) if i % 3 == 1 and i % 2 == 1]
    expected, _ = brute_force(matrix[matching], query, 8)
    assert [hit.id for hit in hits] == [f"doc-{matching[i]}" for i in expected]
    assert all(hit.metadata == {"group": 1, "even": False} for hit in hits)


async def test_where_keeps_bools_numbers_strings_and_null_apart(make_store: StoreFactory) -> None:
    """`where` matches JSON scalars exactly: True is not 1, "1" is not 1, 1.0 is 1, None is null."""
    store = make_store(3)
    values: list[MetadataValue] = [True, 1, "1", None, 2.5]
    await store.add(
        [f"v{i}" for i in range(len(values))],
        [[1.0, float(i), 0.5] for i in range(len(values))],
        ["x"] * len(values),
        [{"k": value} for value in values],
    )
    await store.add(["missing"], [[1.0, 1.0, 1.0]], ["no key"], [{}])

    async def ids(where: dict[str, MetadataValue]) -> set[str]:
        return {hit.id for hit in await store.search([1.0, 0.0, 0.0], top_k=10, where=where)}

    assert await ids({"k": True}) == {"v0"}
    assert await ids({"k": 1}) == {"v1"}
    assert await ids({"k": 1.0}) == {"v1"}
    assert await ids({"k": "1"}) == {"v2"}
    assert await ids({"k": None}) == {"v3"}
    assert await ids({"k": 2.5}) == {"v4"}
    assert await ids({"k": "absent"}) == set()
    assert len(await ids({})) == 6


async def test_where_matches_integers_beyond_64_bits_exactly(make_store: StoreFactory) -> None:
    """An int outside SQLite's 64-bit range filters like any int: only its own row, no error."""
    store = make_store(2)
    key = 'size.in "bytes"'  # a key a JSON path would misread
    values = [2**63 - 1, 2**63, 2**64, 2**64 + 1, -(2**63), -(2**63) - 1, 10**30]
    await store.add(
        [f"n{i}" for i in range(len(values))],
        [[1.0, float(i)] for i in range(len(values))],
        ["x"] * len(values),
        [{key: value} for value in values],
    )
    for index, value in enumerate(values):
        hits = await store.search([1.0, 0.0], top_k=10, where={key: value})
        assert [(hit.id, hit.metadata) for hit in hits] == [(f"n{index}", {key: value})]
    assert await store.search([1.0, 0.0], top_k=10, where={key: 2**64 + 2}) == []
    assert await store.search([1.0, 0.0], top_k=10, where={key: -(10**30)}) == []


async def test_where_compares_large_numbers_as_json_writes_them(make_store: StoreFactory) -> None:
    """Beyond 2**53 a float is the number its JSON text says: 1e23 is 10**23, and 2.0**64,
    written 1.8446744073709552e+19, is neither 2**64 nor 2**64 + 1; each finds itself."""
    store = make_store(2)
    values: dict[str, MetadataValue] = {
        "float 2**64": 2.0**64,
        "int 2**64": 2**64,
        "int 2**64+1": 2**64 + 1,
        "float 1e23": 1e23,
        "int 10**23": 10**23,
        "float 1.5e300": 1.5e300,
    }
    await store.add(
        list(values),
        [[1.0, float(i)] for i in range(len(values))],
        ["x"] * len(values),
        [{"n": value} for value in values.values()],
    )

    async def ids(value: MetadataValue) -> set[str]:
        return {hit.id for hit in await store.search([1.0, 0.0], top_k=10, where={"n": value})}

    assert await ids(2.0**64) == {"float 2**64"}
    assert await ids(2**64) == {"int 2**64"}
    assert await ids(2**64 + 1) == {"int 2**64+1"}
    assert await ids(1e23) == {"float 1e23", "int 10**23"}
    assert await ids(10**23) == {"float 1e23", "int 10**23"}
    assert await ids(1.5e300) == {"float 1.5e300"}


async def test_metadata_comes_back_as_it_was_stored(make_store: StoreFactory) -> None:
    """A hit's metadata equals what was added, types too: a whole float stays a float."""
    store = make_store(2)
    metadata: dict[str, MetadataValue] = {
        "whole float": 1e16,
        "huge float": 1e23,
        "float 2**64": 2.0**64,
        "tiny float": 5e-324,
        "one": 1.0,
        "negative zero": -0.0,
        "int": 10**23,
        "text": "1e16",
        "flag": True,
        "nothing": None,
    }
    await store.add(["a"], [[1.0, 0.0]], ["x"], [metadata])
    [hit] = await store.search([1.0, 0.0], top_k=1)
    assert hit.metadata == metadata
    assert {key: type(value) for key, value in hit.metadata.items()} == {
        key: type(value) for key, value in metadata.items()
    }
    assert [hit.id for hit in await store.search([1.0, 0.0], top_k=1, where=metadata)] == ["a"]


async def test_adding_an_existing_id_replaces_its_row(make_store: StoreFactory) -> None:
    """`add` is an upsert: the id keeps one row, with the new vector, text and metadata."""
    store = make_store(2)
    await store.add(["a", "b"], [[1.0, 0.0], [0.0, 1.0]], ["first a", "b"], [{"v": 1}, {}])
    await store.add(["a"], [[0.0, 1.0]], ["second a"], [{"v": 2}])
    assert await store.count() == 2
    hits = await store.search([0.0, 1.0], top_k=2)
    assert {hit.id for hit in hits} == {"a", "b"}
    replaced = next(hit for hit in hits if hit.id == "a")
    assert replaced.text == "second a"
    assert replaced.metadata == {"v": 2}
    assert replaced.score == pytest.approx(1.0, abs=1e-6)


async def test_a_repeated_id_in_one_add_keeps_the_last_row(make_store: StoreFactory) -> None:
    """Within one batch the last row of a repeated id wins, as if added one after another."""
    store = make_store(2)
    await store.add(["a", "a"], [[1.0, 0.0], [0.0, 1.0]], ["old", "new"])
    assert await store.count() == 1
    hits = await store.search([0.0, 1.0], top_k=1)
    assert (hits[0].id, hits[0].text) == ("a", "new")


async def test_delete_removes_rows_and_ignores_unknown_ids(make_store: StoreFactory) -> None:
    """Deleted rows are never found again; deleting an unknown id is not an error."""
    rng = np.random.default_rng(3)
    store = make_store(8)
    matrix = await fill(store, rng, 50, 8)
    await store.delete(["doc-0", "doc-17", "nope"])
    assert await store.count() == 48
    hits = await store.search(matrix[17].tolist(), top_k=50)
    assert len(hits) == 48
    assert {"doc-0", "doc-17"}.isdisjoint(hit.id for hit in hits)
    # The rows left keep their own vectors (the in-memory store moves rows to fill the gap).
    assert (await store.search(matrix[49].tolist(), top_k=1))[0].id == "doc-49"


async def test_top_k_beyond_the_row_count_returns_every_row(make_store: StoreFactory) -> None:
    """Asking for more rows than stored returns them all, best first; an empty store none."""
    store = make_store(2)
    assert await store.search([1.0, 0.0], top_k=3) == []
    await store.add(["a", "b"], [[1.0, 0.0], [1.0, 1.0]], ["a", "b"])
    assert [hit.id for hit in await store.search([1.0, 0.0], top_k=5)] == ["a", "b"]


async def test_a_vector_of_another_length_is_a_dimension_error(make_store: StoreFactory) -> None:
    """Adding or searching with a vector of the wrong length names both dimensions."""
    store = make_store(4)
    with pytest.raises(DimensionMismatchError, match=r"3 numbers.*dimension 4") as info:
        await store.add(["a"], [[1.0, 2.0, 3.0]], ["a"])
    assert (info.value.expected, info.value.actual) == (4, 3)
    with pytest.raises(DimensionMismatchError):
        await store.search([1.0, 2.0, 3.0, 4.0, 5.0], top_k=1)
    assert await store.count() == 0


async def test_zero_and_non_finite_vectors_are_refused(make_store: StoreFactory) -> None:
    """A zero or NaN vector has no cosine similarity: a UsageError, and nothing is stored."""
    store = make_store(2)
    with pytest.raises(UsageError, match="zero"):
        await store.add(["a", "b"], [[1.0, 0.0], [0.0, 0.0]], ["a", "b"])
    with pytest.raises(UsageError, match="finite"):
        await store.search([float("nan"), 1.0], top_k=1)
    assert await store.count() == 0


async def test_a_closed_store_refuses_every_call(make_store: StoreFactory) -> None:
    """After `aclose()`, adding, searching and deleting (even nothing) are usage errors."""
    store = make_store(2)
    await store.add(["a"], [[1.0, 0.0]], ["a"])
    await store.aclose()
    with pytest.raises(UsageError, match="closed"):
        await store.add([], [], [])
    with pytest.raises(UsageError, match="closed"):
        await store.search([1.0, 0.0], top_k=1)
    with pytest.raises(UsageError, match="closed"):
        await store.delete([])


async def test_mismatched_argument_lengths_are_a_usage_error(make_store: StoreFactory) -> None:
    """`add` needs one vector, document and metadata per id, and scalar metadata values."""
    store = make_store(2)
    with pytest.raises(UsageError, match="2 ids, 1 vectors"):
        await store.add(["a", "b"], [[1.0, 0.0]], ["a", "b"])
    with pytest.raises(UsageError, match="JSON scalar"):
        await store.add(["a"], [[1.0, 0.0]], ["a"], [{"tags": ["x"]}])  # type: ignore[dict-item]
    with pytest.raises(UsageError, match="top_k"):
        await store.search([1.0, 0.0], top_k=0)


async def damage(store: VectorStore, tmp_path: Path, row_id: str, metadata: str) -> None:
    """Overwrite a row's stored metadata with `metadata`, past the store, as another program
    could (raw SQL on the file or schema the fixture gave the store)."""
    if isinstance(store, SQLiteVectorStore):
        with closing(sqlite3.connect(tmp_path / "vectors.db", isolation_level=None)) as conn:
            conn.execute("UPDATE vectors SET metadata = ? WHERE id = ?", (metadata, row_id))
    else:
        assert isinstance(store, PostgresVectorStore)
        import asyncpg  # type: ignore[import-untyped]

        conn = await asyncpg.connect(POSTGRES_URL)
        try:
            await conn.execute(
                f'UPDATE "{store._schema}".vectors SET metadata = $1::jsonb WHERE id = $2',
                metadata,
                row_id,
            )
        finally:
            await conn.close()


@pytest.mark.parametrize(
    ("make_store", "damaged"),
    [
        ("sqlite", ["{not json", "[1]"]),
        pytest.param("postgres", ['"text"', "[1]"], marks=pytest.mark.postgres),
    ],
    indirect=["make_store"],
)
async def test_a_row_of_damaged_metadata_is_left_out_of_searches(
    make_store: StoreFactory,
    tmp_path: Path,
    damaged: list[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A row whose stored metadata cannot be read is left out of every search (top_k still
    counts readable rows), with a warning naming the table and the row."""
    store = make_store(2)
    await store.add(
        ["a", "b", "c", "d", "e"],
        [[1.0, 0.0], [0.99, 0.1], [0.95, 0.2], [0.9, 0.3], [0.0, 1.0]],
        ["A", "B", "C", "D", "E"],
        [{"k": 1}] * 5,
    )
    for row_id, text in zip(["b", "c"], damaged, strict=True):
        await damage(store, tmp_path, row_id, text)

    assert [hit.id for hit in await store.search([1.0, 0.0], top_k=2)] == ["a", "d"]
    assert [hit.id for hit in await store.search([1.0, 0.0], top_k=2, where={"k": 1})] == [
        "a",
        "d",
    ]
    assert [hit.id for hit in await store.search([1.0, 0.0], top_k=9)] == ["a", "d", "e"]
    skipped = [r.getMessage() for r in caplog.records if "vector_row_skipped" in r.getMessage()]
    for row_id in ("b", "c"):
        assert any(f"row_id={row_id}" in text and "vectors" in text for text in skipped)
