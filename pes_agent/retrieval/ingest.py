"""Putting documents into a retriever's store: `store_documents` and the chunker it uses.

```python
retriever = Retriever(HashingEmbeddings(256), InMemoryVectorStore(256))
ids = await store_documents(retriever, [Path("docs/faq.md"), "A text given inline."])
```

The chunker (`chunk_text`) is simple and deterministic:

1. the text is split into paragraphs at blank lines;
2. paragraphs are packed, in order, into chunks of at most `chunk_size` characters (joined by a
   blank line); a paragraph longer than `chunk_size` is split into sentences (after `.`, `!`
   or `?` followed by white space), and those are packed the same way (joined by a space);
3. a sentence still longer than `chunk_size` is cut by characters into windows of
   `chunk_size`, each window starting `chunk_size - overlap` characters after the previous;
4. every chunk after the first starts with the last `overlap` characters (at most, from a
   word start) of the chunk before it, as far as it fits in `chunk_size`, so a sentence cut
   at a chunk boundary is still read whole in one of the two.

Each chunk's id is `"<source>#<index>"` (the index counts from 0 within the document), so
indexing a document again replaces its chunks instead of adding copies; its metadata is
`{"source": source, "chunk": index}`. A file's source is its path as given (POSIX slashes);
a text's is ``"text:"`` and the first 16 hex digits of its SHA-256.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pes_agent.errors import UsageError
from pes_agent.retrieval.retriever import Retriever

__all__ = [
    "DEFAULT_CHUNK_OVERLAP",
    "DEFAULT_CHUNK_SIZE",
    "Chunk",
    "IngestProgress",
    "chunk_document",
    "chunk_text",
    "store_documents",
]

DEFAULT_CHUNK_SIZE = 800
DEFAULT_CHUNK_OVERLAP = 100

_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True, slots=True)
class Chunk:
    """One piece of a document as stored: its id, text and metadata."""

    id: str
    text: str
    source: str
    index: int

    @property
    def metadata(self) -> dict[str, str | int]:
        """`{"source": ..., "chunk": ...}`, as stored beside the vector."""
        return {"source": self.source, "chunk": self.index}


@dataclass(frozen=True, slots=True)
class IngestProgress:
    """How far `store_documents` got: chunks stored of the total, and the current source."""

    stored: int
    total: int
    source: str


def _check_sizes(chunk_size: int, overlap: int) -> None:
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise UsageError(f"chunk_size must be an int >= 1 (characters), got {chunk_size!r}")
    if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap < chunk_size:
        raise UsageError(
            f"overlap must be an int >= 0 and smaller than chunk_size ({chunk_size}), "
            f"got {overlap!r}; e.g. chunk_size=800, overlap=100"
        )


def _windows(text: str, chunk_size: int, overlap: int) -> list[str]:
    step = chunk_size - overlap
    windows = []
    start = 0
    while True:
        windows.append(text[start : start + chunk_size])
        if start + chunk_size >= len(text):
            return windows
        start += step


def _pieces(text: str, chunk_size: int, overlap: int) -> list[tuple[str, str, bool]]:
    """The text as (separator before it, piece, overlaps already) triples, each piece at most
    `chunk_size` long; the third is True for a window that repeats the end of the one before."""
    pieces: list[tuple[str, str, bool]] = []
    for paragraph in _PARAGRAPH_BREAK.split(text):
        paragraph = paragraph.strip()
        if not paragraph:
            continue
        if len(paragraph) <= chunk_size:
            pieces.append(("\n\n", paragraph, False))
            continue
        separator = "\n\n"
        for sentence in _SENTENCE_END.split(paragraph):
            sentence = sentence.strip()
            if not sentence:
                continue
            if len(sentence) <= chunk_size:
                pieces.append((separator, sentence, False))
            else:
                windows = _windows(sentence, chunk_size, overlap)
                pieces.extend((separator, window, n > 0) for n, window in enumerate(windows))
            separator = " "
    return pieces


def _tail(text: str, limit: int) -> str:
    """The last `limit` characters of `text` at most, starting at a word if one starts there."""
    if limit <= 0:
        return ""
    if len(text) <= limit:
        return text
    tail = text[-limit:]
    space = tail.find(" ")
    # Start at the next word unless that throws most of the overlap away.
    if 0 <= space < limit // 2:
        tail = tail[space + 1 :]
    return tail


def chunk_text(
    text: str, *, chunk_size: int = DEFAULT_CHUNK_SIZE, overlap: int = DEFAULT_CHUNK_OVERLAP
) -> list[str]:
    """`text` cut into chunks of at most `chunk_size` characters, as the module describes.

    The same text and sizes always give the same chunks; white space only gives none.
    """
    _check_sizes(chunk_size, overlap)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    chunks: list[str] = []
    current = ""
    for separator, piece, overlaps in _pieces(text, chunk_size, overlap):
        if not current:
            current = piece
        elif len(current) + len(separator) + len(piece) <= chunk_size:
            current += separator + piece
        else:
            chunks.append(current)
            # A window that already repeats the end of the previous one needs no more.
            room = 0 if overlaps else chunk_size - len(piece) - 1
            tail = _tail(current, min(overlap, room))
            current = tail + " " + piece if tail else piece
    if current:
        chunks.append(current)
    return chunks


def _source_of(item: str | os.PathLike[str]) -> tuple[str, str]:
    """(source, text) of one input: a file read as UTF-8, or a text given inline."""
    if isinstance(item, str):
        digest = hashlib.sha256(item.encode("utf-8")).hexdigest()[:16]
        return "text:" + digest, item
    path = Path(item)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"cannot index {path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"cannot index {path}: it is a directory; pass its files") from None
    except UnicodeDecodeError:
        raise UsageError(f"cannot index {path}: it is not UTF-8 text") from None
    return path.as_posix(), text


def chunk_document(
    item: str | os.PathLike[str],
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    overlap: int = DEFAULT_CHUNK_OVERLAP,
) -> list[Chunk]:
    """The chunks of one input (a `Path` is read as a UTF-8 file, a `str` is the text itself),
    with their deterministic ids."""
    source, text = _source_of(item)
    return [
        Chunk(id=source + "#" + str(index), text=piece, source=source, index=index)
        for index, piece in enumerate(chunk_text(text, chunk_size=chunk_size, overlap=overlap))
    ]


#: How many rows a stale-chunk sweep looks at beyond a document's new chunk count, and at most
#: (sqlite-vec answers at most 4096 rows a query).
_STALE_SCAN = 1024
_SCAN_LIMIT = 4096


async def store_documents(
    retriever: Retriever,
    texts_or_paths: Iterable[str | os.PathLike[str]],
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    overlap: int = DEFAULT_CHUNK_OVERLAP,
    batch_size: int = 64,
    progress: Callable[[IngestProgress], object] | None = None,
) -> list[str]:
    """Chunk, embed and store documents in `retriever`'s store, for an agent to retrieve.

    Indexing a document again replaces its chunks: ids are `"<source>#<index>"`, and chunks of
    an earlier, longer version of the document are deleted (those among the 1024 rows past
    the new chunk count).

    Args:
        retriever: The retriever whose embeddings and store are used.
        texts_or_paths: Files (`pathlib.Path` or any path-like, read as UTF-8) and texts
            (`str`), in a list even for one.
        chunk_size: The most characters a chunk holds; chunks end at paragraphs or
            sentences where they can.
        overlap: How many characters a chunk cut inside a sentence repeats of the one before.
        batch_size: How many chunks are embedded in one call.
        progress: Called after each batch with the chunks stored so far of the total.

    Returns:
        The ids of the chunks stored, in order.

    Raises:
        UsageError: A size is invalid, `texts_or_paths` is a single text or path, or a file
            cannot be read as UTF-8 text.
        DimensionMismatchError: The embeddings' vectors do not fit the store.
        StorageError: The store could not be written.
    """
    _check_sizes(chunk_size, overlap)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise UsageError(f"batch_size must be an int >= 1, got {batch_size!r}")
    if isinstance(texts_or_paths, str | bytes | os.PathLike):
        raise UsageError(
            "texts_or_paths is a list of texts or paths, e.g. [Path('faq.md')]; "
            "wrap a single one in a list"
        )
    documents = [
        chunk_document(item, chunk_size=chunk_size, overlap=overlap) for item in texts_or_paths
    ]
    total = sum(len(chunks) for chunks in documents)
    stored = 0
    ids: list[str] = []
    for chunks in documents:
        if not chunks:
            continue
        first_vector: Sequence[float] | None = None
        for start in range(0, len(chunks), batch_size):
            batch = chunks[start : start + batch_size]
            vectors = await retriever.embeddings.embed([chunk.text for chunk in batch])
            await retriever.store.add(
                [chunk.id for chunk in batch],
                vectors,
                [chunk.text for chunk in batch],
                [chunk.metadata for chunk in batch],
            )
            if first_vector is None:
                first_vector = vectors[0]
            stored += len(batch)
            ids.extend(chunk.id for chunk in batch)
            if progress is not None:
                progress(IngestProgress(stored=stored, total=total, source=chunks[0].source))
        assert first_vector is not None
        await _delete_stale(retriever, chunks, first_vector)
    return ids


async def _delete_stale(
    retriever: Retriever, chunks: Sequence[Chunk], vector: Sequence[float]
) -> None:
    """Delete the chunks an earlier, longer version of this document left behind."""
    source = chunks[0].source
    limit = min(len(chunks) + _STALE_SCAN, _SCAN_LIMIT)
    rows = await retriever.store.search(vector, limit, where={"source": source})
    current = {chunk.id for chunk in chunks}
    stale = [row.id for row in rows if row.id not in current]
    if stale:
        await retriever.store.delete(stale)
