"""How fast memtap-minilm's model embeds, with its int8 weights multiplied as int8 (the
default, ``memtap_minilm.int8``) and as the float32 graph onnxruntime makes of the shipped
file (``MiniLMEmbedder(int8_matmul=False)``), side by side in the same run.

    python benchmarks/embedding_rate.py [--texts 400] [--rounds 3]

Texts: the turns of ``benchmarks/longmem``'s users (a seeded sample: what memorize embeds
in practice), embedded one at a time (what the background worker does while calls come)
and in batches of 8 and 32 (a backlog), on one thread; the two models alternate round by
round, so the machine's noise hits both. Prints texts per second (median of the rounds),
the ratio, and how alike the two vectors of each text are.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import numpy as np

from memtap_minilm import MiniLMEmbedder

LONGMEM = Path(__file__).parent / "longmem"


def turns(count: int) -> list[str]:
    """A seeded sample of ``count`` turns of the LongMem-shaped set."""
    texts: list[str] = []
    for path in sorted(LONGMEM.glob("users_*.json")):
        data = json.loads(path.read_text())
        for user in data if isinstance(data, list) else data["users"]:
            for session in user["sessions"]:
                texts.extend(turn["text"] for turn in session["turns"])
    return random.Random(7).sample(texts, min(count, len(texts)))


def rate(embedder: MiniLMEmbedder, texts: list[str], batch: int) -> float:
    """Texts per second, embedding ``texts`` ``batch`` at a time."""
    embedder.batch_size = batch
    start = time.perf_counter()
    if batch == 1:
        for text in texts:
            embedder.embed([text])
    else:
        embedder.embed(texts)
    return len(texts) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--texts", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    texts = turns(args.texts)
    models = {"int8 products": MiniLMEmbedder(), "float32 graph": MiniLMEmbedder(int8_matmul=False)}
    for embedder in models.values():
        embedder.load()
        embedder.embed(texts[:8])
    rates: dict[tuple[str, int], list[float]] = {}
    for _ in range(args.rounds):
        for batch in (1, 8, 32):
            for name, embedder in models.items():
                rates.setdefault((name, batch), []).append(rate(embedder, texts, batch))
    tokens = [len(models["int8 products"]._tokenizer.encode(t).ids) for t in texts]
    print(f"{len(texts)} LongMem turns, {statistics.median(tokens):.0f} tokens median (max {max(tokens)})")
    print(f"{'batch':>5} {'int8 products':>15} {'float32 graph':>15} {'ratio':>6}   texts/s, one thread")
    for batch in (1, 8, 32):
        fast = statistics.median(rates[("int8 products", batch)])
        slow = statistics.median(rates[("float32 graph", batch)])
        print(f"{batch:>5} {fast:>15.1f} {slow:>15.1f} {fast / slow:>6.2f}")
    a = models["int8 products"].embed(texts)
    b = models["float32 graph"].embed(texts)
    alike = np.sum(a * b, axis=1)
    print(
        f"the two vectors of a text: cosine median {np.median(alike):.4f}, "
        f"1st percentile {np.percentile(alike, 1):.4f}, lowest {alike.min():.4f}"
    )


if __name__ == "__main__":
    main()
