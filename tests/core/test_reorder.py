"""``EntityIndex._reorder`` (the user's words first, the newest first) only looks at the
pairs of facts that could ever move; it must order, supersede and lift exactly as the
pair-by-pair walk it replaced, over random rankings of user and assistant turns of shared
exchanges, near-duplicate vectors, both kinds of reordering on and off, and questions about
what the assistant said."""

from __future__ import annotations

import datetime as _dt
import random

import numpy as np
import pytest

from memtap.longterm.index import EntityIndex, Fusion
from memtap.protocol.model import Fact

T0 = _dt.datetime(2025, 1, 1, tzinfo=_dt.timezone.utc)


def pairwise_reorder(
    index: EntityIndex, ranked: list[tuple[int, float]], about_assistant: bool
) -> tuple[list[tuple[int, float]], dict[int, int], dict[int, float]]:
    """The reference: every later fact of the ranking is tried against each, in order."""
    f = index.fusion
    newer: dict[int, int] = {}
    lifted: dict[int, float] = {}
    user_first = f.user_first_margin > 0 and not about_assistant
    updates = f.update_similarity <= 1
    if len(ranked) < 2 or not (user_first or updates):
        return ranked, newer, lifted
    slots = [slot for slot, _ in ranked]
    m = len(slots)
    alike = np.zeros((m, m), bool)
    echoes = np.ones((m, m), bool)
    if index._vecs is not None:
        has = index._has_vec[slots]
        vecs = index._vecs[slots]
        both = has[:, None] & has[None, :]
        cosines = vecs @ vecs.T
        alike = (cosines >= f.update_similarity) & both
        echoes = (cosines >= f.echo_similarity) | ~both
    apart = max(f.update_margin, f.user_first_margin if user_first else 0.0)
    role = index._assistant[slots].tolist()
    created = index._created[slots].tolist()
    exchange = [index.facts[s].source_exchange_id for s in slots]
    order = list(range(m))
    scores = [score for _, score in ranked]
    i = moves = 0
    while i < len(order) and moves < 4 * len(order):
        a = order[i]
        found = None
        for j in range(i + 1, len(order)):
            b = order[j]
            gap = scores[i] - scores[j]
            if (
                user_first
                and role[a]
                and not role[b]
                and (
                    (exchange[a] is not None and exchange[a] == exchange[b] and echoes[a][b])
                    or (alike[a][b] and gap <= f.user_first_margin)
                )
            ):
                found = j
                break
            if (
                updates
                and role[a] == role[b]
                and gap <= f.update_margin
                and alike[a][b]
                and created[b] > created[a]
            ):
                newer[slots[a]] = slots[b]
                found = j
                break
            if gap > apart and not (user_first and role[a]):
                break
        if found is None:
            i += 1
            continue
        b = order.pop(found)
        lifted[slots[b]] = lifted.get(slots[b], 0.0) + scores[i] - scores.pop(found)
        order.insert(i, b)
        scores.insert(i, scores[i])
        moves += 1
    return [(slots[p], score) for p, score in zip(order, scores)], newer, lifted


def random_case(rng: random.Random) -> tuple[EntityIndex, list[tuple[int, float]]]:
    """An index of user and assistant turns (some of one exchange, some vectors repeated
    nearly: echoes and restatements) and a ranking of some of its slots, best first."""
    fusion = Fusion(
        update_similarity=rng.choice([2.0, 0.9, 0.6]),
        update_margin=rng.choice([0.0, 0.05, 0.2]),
        user_first_margin=rng.choice([0.0, 0.1, 0.3]),
        echo_similarity=rng.choice([0.5, 0.8]),
    )
    index = EntityIndex(fusion)
    n = rng.randint(2, 30)
    bases = [np.asarray([rng.uniform(-1, 1) for _ in range(8)], np.float32) for _ in range(4)]
    facts, vectors = [], {}
    for i in range(n):
        exchange = rng.choice([None, f"x{rng.randint(0, n // 3)}"])
        fact = Fact(
            entity_id="alice",
            text=f"turn {i}",
            created_at=T0 + _dt.timedelta(minutes=rng.choice([rng.randint(0, 500), 100])),
            metadata={"role": rng.choice(["user", "assistant"])},
            source_exchange_id=exchange,
            id=f"f{i}",
        )
        facts.append(fact)
        if rng.random() < 0.85:
            base = rng.choice(bases)
            vectors[fact.id] = base + np.asarray(
                [rng.gauss(0, rng.choice([0.05, 0.5])) for _ in range(8)], np.float32
            )
    index.add(facts)
    if vectors:
        index.set_vectors(vectors, "test")
    picked = rng.sample(range(n), rng.randint(0, n))
    scores = sorted((rng.choice([rng.random(), 0.5]) for _ in picked), reverse=True)
    return index, list(zip(picked, scores))


@pytest.mark.parametrize("seed", range(40))
def test_reorder_moves_exactly_the_pairs_the_pairwise_walk_moves(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(50):
        index, ranked = random_case(rng)
        about_assistant = rng.random() < 0.2
        assert index._reorder(list(ranked), about_assistant) == pairwise_reorder(
            index, list(ranked), about_assistant
        )


def test_the_cases_move_facts_both_ways() -> None:
    """The random cases are not trivial: some put the user's words first, some supersede."""
    rng = random.Random(7)
    lifted = superseded = 0
    for _ in range(400):
        index, ranked = random_case(rng)
        _, newer, moved = pairwise_reorder(index, list(ranked), False)
        superseded += bool(newer)
        lifted += bool(moved) and not newer
    assert lifted > 20 and superseded > 20
