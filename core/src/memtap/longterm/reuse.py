"""Vectors the full model need not make again (issue 37: embed less).

The full model costs ~6 ms of a core a text on a small machine, the bulk of what a captured
exchange costs in the background. Two kinds of text already have their vector:

- a text embedded recently (a user who says "thanks, that works" every few turns, an agent
  resending the same instruction): the same text has the same vector;
- a model's answer that restates the user's turn of the same exchange ("You moved to Tokyo
  in May." after "I moved to Tokyo in May"): its quick vector (the token-table
  approximation, same space) is at least :data:`RESTATES` alike to the turn's, so it says
  nothing the turn's vector does not; it gets the turn's. A real answer adds words of its
  own ("beagles are great dogs, how is she settling in?": 0.72 alike; a long letter drafted
  from a long request, 0.90) and is embedded.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from memtap.protocol.model import Fact

#: How alike (cosine of quick vectors) an answer and its exchange's user turn must be for
#: the answer to take the turn's vector, with memtap-minilm's quick vectors: "You said:
#: <the turn>" 0.997, "You moved to Tokyo in May." 0.999; "I bought a bike in Accra" /
#: "... in Lisbon" 0.68; of 972 real answers of ``benchmarks/longmem``, none above 0.91
#: (before its quick vectors weighed tokens by rarity: 6 of them above 0.95).
RESTATES = 0.95


def is_answer(fact: Fact) -> bool:
    """Whether ``fact`` is an episode of the model's words."""
    return fact.metadata.get("role") == "assistant"


class VectorReuse:
    """Recently made full vectors, by text and by exchange (its user turns' quick and full
    vectors), bounded."""

    def __init__(self, texts: int = 2048, exchanges: int = 512) -> None:
        self._texts: OrderedDict[str, Any] = OrderedDict()
        self._turns: OrderedDict[str, list[tuple[Any, Any]]] = OrderedDict()
        self._max_texts = texts
        self._max_exchanges = exchanges

    def known(self, fact: Fact, text: str, quick: Any) -> Any:
        """A vector ``fact`` (whose embedded text is ``text``, quick vector ``quick`` or
        ``None``) can have without the model, or ``None``."""
        vec = self._texts.get(text)
        if vec is not None:
            self._texts.move_to_end(text)
            return vec
        exchange = fact.source_exchange_id
        if quick is None or exchange is None or not is_answer(fact):
            return None
        for turn_quick, turn_vec in self._turns.get(exchange, ()):
            if _cosine(quick, turn_quick) >= RESTATES:
                return turn_vec
        return None

    def learn(self, fact: Fact, text: str, quick: Any, vector: Any) -> None:
        """The full model made ``vector`` for ``fact``."""
        self._texts[text] = vector
        self._texts.move_to_end(text)
        while len(self._texts) > self._max_texts:
            self._texts.popitem(last=False)
        exchange = fact.source_exchange_id
        if quick is None or exchange is None or is_answer(fact):
            return
        self._turns.setdefault(exchange, []).append((quick, vector))
        self._turns.move_to_end(exchange)
        while len(self._turns) > self._max_exchanges:
            self._turns.popitem(last=False)


def _cosine(a: Any, b: Any) -> float:
    import numpy as np

    u, v = np.asarray(a, np.float32).ravel(), np.asarray(b, np.float32).ravel()
    if u.shape != v.shape:
        return -1.0
    norms = float(np.linalg.norm(u) * np.linalg.norm(v))
    return float(u @ v) / norms if norms else -1.0
