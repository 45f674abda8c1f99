"""Answer questions from a handful of bundled documents: index them, retrieve, then answer.

    python examples/rag.py                                 # offline: scripted model
    PES_MODEL=openai:gpt-4o-mini python examples/rag.py    # a real model (needs its key)

The text files in `examples/data/` are cut into chunks, embedded and stored in an in-memory
vector store (`store_documents`). The agent is given a `Retriever` over that store: before each
plan it searches for passages, records a RETRIEVAL observation (printed below: ids and scores),
and shows the passages to the planning and synthesis calls as quoted reference data, never as
instructions.

Embeddings: `LocalEmbeddings` (a small sentence model that runs offline on the CPU) when the
`local` extra is installed, else `HashingEmbeddings`, which needs nothing but matches shared
words rather than meaning. Offline, the scripted model answers by quoting the best passage it
was shown, so what you read is exactly what retrieval found.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import re
from pathlib import Path

from pes_agent import AgentProps, Observation, ObservationType, ProviderConfig, create_agent
from pes_agent.providers.base import LLMProvider, LLMRequest
from pes_agent.providers.registry import parse_provider_spec
from pes_agent.retrieval import EmbeddingProvider, HashingEmbeddings, InMemoryVectorStore
from pes_agent.retrieval.ingest import IngestProgress, store_documents
from pes_agent.retrieval.retriever import Retriever
from pes_agent.testing import ScriptedProvider

DATA = Path(__file__).resolve().parent / "data"
QUESTIONS = [
    "How often should I descale the kettle, and with what?",
    "How do I make a warranty claim?",
]
KEYS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
_PASSAGE = re.compile(r'<passage id="([^"]*)"[^>]*>\n(.*?)\n</passage>', re.DOTALL)


def choose_embeddings() -> EmbeddingProvider:
    """LocalEmbeddings when its extra is installed, else HashingEmbeddings."""
    local = getattr(importlib.import_module("pes_agent.retrieval"), "LocalEmbeddings", None)
    if local is not None:
        try:
            embeddings: EmbeddingProvider = local()
        except Exception as error:  # the extra is missing: say so and go on offline
            print(f"LocalEmbeddings unavailable ({error}); using HashingEmbeddings")
        else:
            print("embeddings: LocalEmbeddings (a sentence model, offline)")
            return embeddings
    print("embeddings: HashingEmbeddings (shared words, no model)")
    return HashingEmbeddings(256)


def _words(text: str) -> set[str]:
    return {word for word in re.findall(r"[a-z]+", text.lower()) if len(word) > 3}


def scripted_answer(request: LLMRequest) -> str:
    """The offline model: no tools to plan; the answer quotes, from the best passage it was
    shown, the two sentences sharing the most words with the question."""
    if request.phase == "planning":
        return json.dumps(
            {"intent": "answer from the documents", "plan": "1. answer", "toolCalls": []}
        )
    prompt = request.messages[-1].content
    found = _PASSAGE.search(prompt)
    if found is None:
        return "I found nothing about that in the documents."
    question = _words(prompt.split("# User query\n", 1)[-1].split("\n", 1)[0])
    source, text = found.group(1), found.group(2)
    sentences = [" ".join(s.split()) for s in re.split(r"(?<=[.!?])\s+|\n\n", text)]
    if len(sentences) > 1 and sentences[0][:1].islower():
        sentences = sentences[1:]  # the overlap carried over from the chunk before
    candidates = [sentence for sentence in sentences if sentence.endswith((".", "!", "?"))]
    ranked = sorted(candidates, key=lambda sentence: -len(_words(sentence) & question))
    best = [sentence for sentence in sentences if sentence in ranked[:2]]
    return " ".join(best) + f" [{Path(source).name}]"


def choose_model() -> LLMProvider | ProviderConfig:
    """PES_MODEL when it is set and its API key is present, else the scripted model."""
    spec = os.environ.get("PES_MODEL")
    if spec:
        config = parse_provider_spec(spec)
        key = KEYS.get(config.provider)
        if key is None or os.environ.get(key):
            return config
        print(f"{key} is not set: running offline on a scripted model instead")
    return ScriptedProvider([scripted_answer], repeat=True)


def show_retrieval(observation: Observation) -> None:
    content = observation.content
    if content.get("status") != "done":
        print(f"  retrieval failed: {content.get('error')}")
        return
    hits = ", ".join(
        f"{Path(id).name} ({score:.2f})"
        for id, score in zip(content["ids"], content["scores"], strict=True)
    )
    print(f"  retrieved in {content['durationMs']:.1f} ms: {hits}")


async def main() -> None:
    embeddings = choose_embeddings()
    retriever = Retriever(embeddings, InMemoryVectorStore(embeddings.dimension), top_k=3)
    files = sorted(p for p in DATA.iterdir() if p.suffix in {".txt", ".md"})

    def progress(step: IngestProgress) -> None:
        if step.stored == step.total:
            print(f"indexed {step.total} chunks from {len(files)} files in {DATA.name}/")

    await store_documents(retriever, files, chunk_size=500, overlap=50, progress=progress)

    async with create_agent(provider=choose_model(), retriever=retriever) as agent:
        agent.observations.subscribe(show_retrieval, types=[ObservationType.RETRIEVAL])
        for number, question in enumerate(QUESTIONS, 1):
            print(f"\nQ{number}: {question}")
            result = await agent.process(AgentProps(question, f"rag-{number}"))
            print(f"A{number}: {result.response.content}  ({result.metadata.status})")
    await retriever.aclose()


if __name__ == "__main__":
    asyncio.run(main())
