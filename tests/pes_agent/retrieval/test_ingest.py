"""The chunker and `store_documents`: boundaries, overlap, determinism, upserts, progress."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pes_agent.errors import UsageError
from pes_agent.retrieval import HashingEmbeddings, InMemoryVectorStore
from pes_agent.retrieval.ingest import IngestProgress, chunk_document, chunk_text, store_documents
from pes_agent.retrieval.retriever import Retriever


def _retriever() -> Retriever:
    return Retriever(HashingEmbeddings(64), InMemoryVectorStore(64), top_k=50)


def test_short_paragraphs_are_packed_together_whole() -> None:
    """Paragraphs that fit share one chunk, joined by a blank line."""
    text = "First paragraph.\n\nSecond paragraph.\n\n\nThird."
    assert chunk_text(text, chunk_size=100, overlap=10) == [
        "First paragraph.\n\nSecond paragraph.\n\nThird."
    ]


def test_a_paragraph_that_does_not_fit_starts_a_new_chunk_with_overlap() -> None:
    """The next chunk starts with the end of the previous one, from a word start."""
    one = "Alpha beta gamma delta epsilon."
    two = "Zeta eta theta iota kappa lambda."
    chunks = chunk_text(one + "\n\n" + two, chunk_size=50, overlap=12)
    assert chunks[0] == one
    assert chunks[1].endswith(two)
    overlap = chunks[1].removesuffix(two).strip()
    assert overlap
    assert one.endswith(overlap)
    assert len(overlap) <= 12
    assert all(len(chunk) <= 50 for chunk in chunks)


def test_a_long_paragraph_is_split_at_sentences() -> None:
    """A paragraph over chunk_size breaks between sentences, never inside one that fits."""
    sentences = [f"Sentence number {i} says something short." for i in range(10)]
    chunks = chunk_text(" ".join(sentences), chunk_size=120, overlap=0)
    assert len(chunks) > 1
    assert all(len(chunk) <= 120 for chunk in chunks)
    assert " ".join(chunks).split(". ") == " ".join(sentences).split(". ")
    for chunk in chunks:
        assert chunk.startswith("Sentence")
        assert chunk.endswith(".")


def test_a_sentence_longer_than_a_chunk_is_cut_into_overlapping_windows() -> None:
    """Without sentence breaks the text is cut by characters, each window overlapping the last."""
    text = "".join(chr(ord("a") + i % 26) for i in range(250))
    chunks = chunk_text(text, chunk_size=100, overlap=20)
    assert chunks == [text[0:100], text[80:180], text[160:250]]


def test_every_word_of_the_text_is_in_some_chunk() -> None:
    """Chunking loses nothing: each word of a mixed text appears in the chunks."""
    words = [f"w{i}" for i in range(400)]
    paragraphs = [" ".join(words[i : i + 37]) + "." for i in range(0, 400, 37)]
    chunks = chunk_text("\n\n".join(paragraphs), chunk_size=90, overlap=15)
    joined = " ".join(chunks).replace(".", " ").split()
    assert set(words) <= set(joined)
    assert all(len(chunk) <= 90 for chunk in chunks)


def test_whitespace_only_text_gives_no_chunks() -> None:
    """An empty document has nothing to store."""
    assert chunk_text(" \n\n \t\n") == []


@pytest.mark.parametrize(("chunk_size", "overlap"), [(0, 0), (100, 100), (100, -1), (True, 0)])
def test_bad_sizes_are_usage_errors(chunk_size: int, overlap: int) -> None:
    """chunk_size must be positive and overlap smaller than it."""
    with pytest.raises(UsageError):
        chunk_text("text", chunk_size=chunk_size, overlap=overlap)


def test_chunk_ids_are_stable_across_processes(tmp_path: Path) -> None:
    """The same file chunks to the same ids and texts in a fresh interpreter."""
    doc = tmp_path / "doc.txt"
    doc.write_text("Para one.\n\n" + "Sentence two is here. " * 30, encoding="utf-8")
    here = [(c.id, c.text) for c in chunk_document(doc, chunk_size=200, overlap=30)]
    code = (
        "import sys; from pathlib import Path; "
        "from pes_agent.retrieval.ingest import chunk_document; "
        "print(repr([(c.id, c.text) for c in chunk_document(Path(sys.argv[1]), "
        "chunk_size=200, overlap=30)]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(doc)], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == repr(here)
    assert here[0][0] == doc.as_posix() + "#0"


async def test_store_documents_stores_chunks_with_source_metadata(tmp_path: Path) -> None:
    """Files and inline texts are stored with {source, chunk} metadata and found again."""
    doc = tmp_path / "tides.txt"
    doc.write_text("High tide in Brest is at 06:12.\n\nLow tide is at 12:31.", encoding="utf-8")
    retriever = _retriever()
    ids = await store_documents(retriever, [doc, "The warranty lasts two years."])
    assert ids[0] == doc.as_posix() + "#0"
    assert ids[1].startswith("text:")
    assert ids[1].endswith("#0")
    found = await retriever.retrieve("high tide Brest")
    assert found[0].id == ids[0]
    assert found[0].metadata == {"source": doc.as_posix(), "chunk": 0}


async def test_reindexing_replaces_chunks_instead_of_adding_copies(tmp_path: Path) -> None:
    """Indexing a file twice keeps one copy; a shorter new version drops its old extra chunks."""
    doc = tmp_path / "doc.txt"
    doc.write_text("\n\n".join(f"Paragraph {i} " + "word " * 20 for i in range(6)), "utf-8")
    retriever = _retriever()
    first = await store_documents(retriever, [doc], chunk_size=120, overlap=10)
    assert len(first) > 2
    await store_documents(retriever, [doc], chunk_size=120, overlap=10)
    assert await retriever.store.count() == len(first)
    doc.write_text("Paragraph 0 only now.", encoding="utf-8")
    again = await store_documents(retriever, [doc], chunk_size=120, overlap=10)
    assert again == [doc.as_posix() + "#0"]
    assert await retriever.store.count() == 1


async def test_progress_reports_each_batch_up_to_the_total() -> None:
    """The callback hears the stored count after each batch, ending at the total."""
    seen: list[IngestProgress] = []
    texts = [
        "\n\n".join(f"Topic {i} part {j} " + "filler " * 15 for j in range(5)) for i in range(2)
    ]
    ids = await store_documents(
        _retriever(), texts, chunk_size=100, overlap=0, batch_size=2, progress=seen.append
    )
    assert [p.stored for p in seen] == sorted(p.stored for p in seen)
    assert seen[-1].stored == seen[-1].total == len(ids)
    assert len(seen) >= len(ids) // 2


async def test_missing_file_and_bare_string_are_usage_errors(tmp_path: Path) -> None:
    """A file that does not exist, or a lone string instead of a list, is refused clearly."""
    with pytest.raises(UsageError, match="no such file"):
        await store_documents(_retriever(), [tmp_path / "missing.txt"])
    with pytest.raises(UsageError, match="list"):
        await store_documents(_retriever(), "just one text")
