"""`pes-agent index` and the retriever `pes-agent run --retrieve` searches.

The index lives in the same SQLite file as the threads (`--db`), in a `SQLiteVectorStore`
table named after the embeddings (`pes_index_hashing`, `pes_index_openai_text_embedding_3_small`,
...), so an index is only ever searched with the embeddings that built it. `--embeddings` is
`hashing` (the default: deterministic and offline, matching shared words rather than meaning)
or `openai:MODEL` (OPENAI_API_KEY and OPENAI_BASE_URL as for the models).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pes_agent.cli.errors import CLIError, ExitCode
from pes_agent.cli.paths import StoreLocation
from pes_agent.errors import PESAgentError, RunError
from pes_agent.retrieval.base import EmbeddingProvider
from pes_agent.retrieval.ingest import IngestProgress, store_documents
from pes_agent.retrieval.retriever import Retriever

__all__ = [
    "DEFAULT_EMBEDDINGS",
    "TEXT_SUFFIXES",
    "index_command",
    "index_files",
    "index_table",
    "open_retriever",
]

DEFAULT_EMBEDDINGS = "hashing"
#: What `pes-agent index DIR` picks up inside a directory (files named directly are always read).
TEXT_SUFFIXES = frozenset({".txt", ".md", ".markdown", ".rst"})
_HASHING_DIMENSION = 256
_NOT_IDENTIFIER = re.compile(r"[^A-Za-z0-9]+")


def index_table(embeddings: str) -> str:
    """The store table that holds the index built with `embeddings` (an `--embeddings` value)."""
    name = "pes_index_" + _NOT_IDENTIFIER.sub("_", embeddings).strip("_").lower()
    return name[:51].rstrip("_")


def _embeddings(spec: str) -> EmbeddingProvider:
    if spec == "hashing":
        from pes_agent.retrieval.hashing import HashingEmbeddings

        return HashingEmbeddings(_HASHING_DIMENSION)
    name, sep, model = spec.partition(":")
    if name == "openai" and sep and model:
        from pes_agent.retrieval.openai import OpenAIEmbeddings

        return OpenAIEmbeddings(model)
    raise CLIError(f"--embeddings {spec!r}: use 'hashing' or 'openai:MODEL'")


def open_retriever(
    store: StoreLocation, embeddings: str = DEFAULT_EMBEDDINGS, *, top_k: int = 4
) -> Retriever:
    """A retriever over the index in `store`'s SQLite file; a one-line `CLIError` when it
    cannot be opened (not an SQLite file, sqlite-vec missing, no API key)."""
    if store.path is None:
        raise CLIError(
            f"the index is kept in the SQLite file of --db, but the store is "
            f"{store.describe()}; pass --db PATH (a file) to index and --retrieve"
        )
    try:
        provider = _embeddings(embeddings)
        from pes_agent.retrieval.sqlite import SQLiteVectorStore

        vectors = SQLiteVectorStore(
            store.path, table=index_table(embeddings), dimension=provider.dimension
        )
        return Retriever(provider, vectors, top_k)
    except PESAgentError as error:
        raise CLIError(error.message) from None


def index_files(paths: Sequence[str]) -> list[Path]:
    """The files to index: files as named, directories searched for text files, sorted."""
    files: list[Path] = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES)
            if not found:
                suffixes = ", ".join(sorted(TEXT_SUFFIXES))
                raise CLIError(f"{name}: no text files ({suffixes}) in this directory")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise CLIError(f"{name}: no such file or directory")
    return list(dict.fromkeys(files))


async def index_command(
    *,
    paths: Sequence[str],
    store: StoreLocation,
    embeddings: str,
    chunk_size: int,
    overlap: int,
    console: Console,
) -> ExitCode:
    """`pes-agent index`: chunk, embed and store files in the index of `store`'s file."""
    files = index_files(paths)
    if store.path is not None:
        store.path.parent.mkdir(parents=True, exist_ok=True)
    retriever = open_retriever(store, embeddings)
    progress = Progress(
        TextColumn("[bold]indexing[/bold] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("chunks"),
        TimeElapsedColumn(),
        console=console,
        transient=not console.is_terminal,
    )
    task = progress.add_task(f"{len(files)} file(s)", total=None)

    def advance(step: IngestProgress) -> None:
        progress.update(task, completed=step.stored, total=step.total, description=step.source)

    try:
        with progress:
            ids = await store_documents(
                retriever, files, chunk_size=chunk_size, overlap=overlap, progress=advance
            )
        total = await retriever.store.count()
    except RunError as error:
        raise CLIError(error.message, ExitCode.RUN_ERROR) from None
    except PESAgentError as error:
        raise CLIError(error.message) from None
    finally:
        await retriever.aclose()
    ask = ["pes-agent", "run", "--retrieve"]
    if store.source != "default":
        ask += ["--db", store.describe()]
    if embeddings != DEFAULT_EMBEDDINGS:
        ask += ["--embeddings", embeddings]
    console.print(
        f"indexed {len(ids)} chunk(s) from {len(files)} file(s) into {store.describe()} "
        f"(table {index_table(embeddings)}, {total} chunk(s) in all); "
        f"ask with: {shlex.join(ask)} QUERY",
        highlight=False,
        soft_wrap=True,
    )
    return ExitCode.OK
