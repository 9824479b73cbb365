"""The in-process recall index of one entity: BM25 postings and a vector matrix, updated
incrementally on every write (no rebuild), searched with hybrid fusion.

numpy is imported when an index is first built, never by ``import memtap``.

What is indexed: a fact's ``text`` and, with a lower weight, its ``metadata["context"]``
(for an episode: the turns around it) and its date (:func:`date_text`), so that a short
reply ("Yes, last Tuesday!") is still found by the words of the question it answered, and
"in May" by when it was said. The vector is the embedding of :func:`embedding_text`.

Fusion (chosen on the tuning halves of LOCOMO, the paraphrase set and the
LongMemEval-shaped set together, see ``benchmarks/fusion_grid.py`` and docs/benchmarks.md):
each signal is turned into a [0, 1] score that keeps its absolute meaning (BM25 saturates
as ``s / (s + bm25_half)`` and is scaled by the share of the question's IDF mass the fact
covers, cosine is rescaled from ``cos_floor`` .. 1), the two are mixed linearly, assistant
turns are discounted, a question about now favours newer facts, and recency breaks ties.
Absolute scores make ``min_score`` meaningful: an unrelated query gets low scores rather
than a re-normalised "best of the bad".
"""

from __future__ import annotations

import bisect
import functools
import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import attrs

from memtap.longterm.products import product, rows_dot
from memtap.longterm.temporal import TimeWindow, mentioned_window
from memtap.longterm.text import term_counts, terms
from memtap.protocol.model import CONTEXT_KEY, Fact

#: The kind of a fact that records a deletion (it supersedes the fact deleted).
TOMBSTONE = "tombstone"
#: Fact kinds that are never recalled (a tombstone records a deletion).
HIDDEN_KINDS = frozenset({TOMBSTONE})


def date_text(fact: Fact) -> str:
    """A fact's date as words ("8 May 2023"), indexed with it."""
    at = fact.created_at
    return f"{at.day} {at:%B} {at.year}"


def embedding_text(fact: Fact) -> str:
    """The text whose embedding represents ``fact`` (its own words, not the context: a
    vector of several turns says less about each of them)."""
    return fact.text


@attrs.frozen
class Fusion:
    """How lexical and vector evidence are combined into one score in [0, 1].

    The defaults are what ``benchmarks/fusion_grid.py`` and the evaluation
    (``benchmarks/memory_eval.py``) chose on tuning halves only (docs/benchmarks.md, "Ranking
    on data never tuned on"): a lexical weight of 0.5 whose words count by the share of the
    question's IDF mass they cover (one common shared word cannot outvote a strong match in
    meaning), a cosine floor of 0.1 (below 0.2, a fact that only meaning finds was dropped
    altogether), an assistant turn below the user's turn it echoes (not discounted: that cost LOCOMO), and a
    present-tense boost for questions about now."""

    #: Weight of the lexical (BM25) score; the vector score gets ``1 - lexical_weight``.
    lexical_weight: float = 0.5
    #: BM25 score that maps to 0.5 (saturation point).
    bm25_half: float = 6.0
    #: Cosine similarity that maps to 0 (MiniLM puts unrelated sentences around 0.1-0.2;
    #: at 0.2 a fact that only meaning finds, at 0.15, was not ranked at all).
    cos_floor: float = 0.1
    #: BM25 parameters.
    k1: float = 1.2
    b: float = 0.75
    #: Weight of a context term relative to a term of the fact's own text.
    context_weight: float = 0.5
    #: Weight of the terms of a fact's date (:func:`date_text`: day, month, year), so
    #: "in May" or "2023" finds what was said then.
    date_weight: float = 0.5
    #: IDF is computed as if the entity had at least this many facts: with only a handful,
    #: every term would look common and a clear match would score near zero.
    idf_prior: int = 200
    #: Weight of the recency tie-breaker (newest fact gets the full amount).
    recency_weight: float = 0.01
    #: For a question about the present ("where do I live now?", "what's my job these
    #: days?": :func:`memtap.longterm.temporal.asks_present`) a fact's match (words and
    #: vector) is multiplied by ``1 + present_boost * age`` (``age``: 0 for the entity's
    #: oldest fact, 1 for its newest): of two facts that match it about as well, the newer
    #: states how things are, while a new fact that does not match gains next to nothing.
    present_boost: float = 3.0
    #: Added to the score of a fact said in, or speaking of, the time a question names
    #: ("yesterday", "in May 2023": :mod:`memtap.longterm.temporal`), so that it ranks above facts
    #: of other times that match the question about as well.
    time_weight: float = 0.1
    #: The lexical score is multiplied by the share of the query's IDF mass the fact's
    #: terms cover, to this power: one common word shared with a long question adds next
    #: to nothing, so it cannot outvote a strong match in meaning (0: no gating).
    coverage_power: float = 1.0
    #: A fact covering at least this share of the query's IDF mass keeps its whole
    #: lexical score; below it, the share is ``coverage / coverage_full``.
    coverage_full: float = 1.0
    #: A fact scores at least this share of its vector score alone (before the time and
    #: recency parts), so a strong match in meaning is not outvoted by words: 0 gives the
    #: plain linear mix.
    meaning_floor: float = 0.0
    #: An assistant turn's score (an episode whose ``metadata["role"]`` is
    #: ``"assistant"``) is multiplied by this, unless the question asks what the assistant
    #: said (:func:`memtap.longterm.roles.asks_assistant`): the user's words come first.
    assistant_factor: float = 1.0
    #: Two hits whose vectors are at least this similar are taken to be about the same
    #: thing: the newer ranks first when it scores within :attr:`update_margin` of the
    #: older (a knowledge update: "I work as a surveyor now" over "I'm a teacher").
    #: Above 1: never.
    update_similarity: float = 2.0
    #: How far below an older, similar hit a newer one may score and still rank above it.
    update_margin: float = 0.0
    #: Whether (above 0) a user's turn ranks above its exchange's assistant turn when both
    #: are among the hits (the echo, "Congratulations on Miso!", is context for what the
    #: user said), and how far below an assistant turn about the same thing (vectors
    #: :attr:`update_similarity` alike) a user turn may score and still rank above it.
    user_first_margin: float = 0.1
    #: A user's turn ranks above its own exchange's assistant turn only when that turn
    #: echoes it: their vectors at least this alike ("Congratulations on Miso!" after "we
    #: named her Miso"). Two people talking, paired by position (LOCOMO), answer each other
    #: rather than repeat: the second speaker's turn keeps its place. Above 1: never; a
    #: pair without both vectors counts as an echo (words alone cannot tell).
    echo_similarity: float = 0.5


class ScoreParts(NamedTuple):
    """What one hit's fused score is made of, as :meth:`EntityIndex.search` computed it
    (kept raw on the request path; :meth:`as_dict` names the parts, in the background)."""

    bm25: float
    #: Cosine with the query vector (``None``: no query vector; ``-1``: the fact has none).
    cosine: float | None
    in_time: bool
    recency: float
    fusion: Fusion
    #: Share of the query's IDF mass the fact's terms cover (0 to 1).
    coverage: float = 1.0
    #: Whether the fact is an assistant turn ranked below the user's words.
    demoted: bool = False
    #: The id of a newer fact about the same thing ranked above this one (an update).
    newer: str | None = None
    #: What the fact gained by taking the place of a fact ranked above it (a newer
    #: statement over an older one, the user's words over the assistant's echo).
    lifted: float = 0.0
    #: The fact's age factor (0 oldest .. 1 newest) when the question is about the
    #: present (:attr:`Fusion.present_boost`), else 0.
    present_age: float = 0.0

    def as_dict(self) -> dict[str, float]:
        """``words``, ``vector``, ``role``, ``time`` and ``recency`` add up to the score
        with ``moved`` (what the fact gained by taking the place of one ranked above it:
        a newer statement, the user's words over an echo), before it is capped at 1;
        ``superseded`` is 1 on an older statement a newer one now ranks above; ``bm25``,
        ``coverage`` and ``cosine`` are the raw signals."""
        f = self.fusion
        gate = min(1.0, self.coverage / f.coverage_full) ** f.coverage_power
        words = self.bm25 / (self.bm25 + f.bm25_half) * gate
        out: dict[str, float] = {}
        if self.cosine is None:
            out["words"] = words
        else:
            out["words"] = f.lexical_weight * words
            vector = min(1.0, max(0.0, (self.cosine - f.cos_floor) / (1 - f.cos_floor)))
            out["vector"] = (1 - f.lexical_weight) * vector
            if f.meaning_floor * vector > out["words"] + out["vector"]:
                out["words"], out["vector"] = 0.0, f.meaning_floor * vector
        if self.demoted:
            out["role"] = -(1 - f.assistant_factor) * (out["words"] + out.get("vector", 0.0))
        if self.present_age and f.present_boost:
            match = out["words"] + out.get("vector", 0.0) + out.get("role", 0.0)
            out["present"] = match * f.present_boost * self.present_age
        out["time"] = f.time_weight if self.in_time else 0.0
        out["recency"] = self.recency
        if self.lifted:
            out["moved"] = self.lifted
        out["bm25"] = self.bm25
        out["coverage"] = self.coverage
        if self.cosine is not None:
            out["cosine"] = self.cosine
        if self.newer is not None:
            out["superseded"] = 1.0
        return out


class _Postings:
    __slots__ = ("slots", "tf")

    def __init__(self) -> None:
        self.slots = array("i")
        self.tf = array("f")


def _np() -> Any:
    import numpy

    return numpy


class EntityIndex:
    """One entity's current facts, searchable by BM25 and by vector.

    Not thread-safe by itself: :class:`memtap.longterm.recall.IndexCache` serialises writers and
    lets readers search a consistent state under a lock.
    """

    #: Up to this many slots, :meth:`search` scores in plain Python (one product for the
    #: vectors): numpy's fixed cost per operation (~1-3 µs, some forty of them) is most
    #: of a search over a handful of facts, which is what most entities have.
    SMALL_UP_TO = 48
    #: From this many vectors on, search scans 256-bit sketches instead of the vectors
    #: (see :meth:`_vector_scores`); below it the exact scan is cheap enough.
    SKETCH_FROM = 4096
    #: How many of the best sketch-estimated slots get their exact cosine.
    SKETCH_RESCORE = 512
    #: A query term whose BM25 weight is below this (one that nearly every fact uses: about
    #: 99% of them) is left out of the lexical scan: it would add under a hundredth to a
    #: score, at the cost of a pass over every fact, so a search over an entity whose facts
    #: all share some words ("note", "bought" in a log of purchases) grew with the entity.
    WEIGHTLESS_IDF = 0.01

    def __init__(self, fusion: Fusion | None = None) -> None:
        np = _np()
        self.fusion = fusion or Fusion()
        self.facts: list[Fact | None] = []
        self.slot_of: dict[str, int] = {}
        self.postings: dict[str, _Postings] = {}
        self.total_len = 0.0
        self.alive_count = 0
        #: Live facts that have a vector (the full model's or a quick one).
        self.vector_count = 0
        #: Live facts whose vector is the full model's.
        self.full_count = 0
        self.dim = 0
        self.model: str | None = None
        cap = 64
        self._doclen = np.zeros(cap, np.float32)
        self._alive = np.zeros(cap, bool)
        self._has_vec = np.zeros(cap, bool)
        #: Slots whose vector is the full model's (else a quick one, or none): a quick
        #: vector makes a fact findable by meaning at once, until the full one replaces it.
        self._full = np.zeros(cap, bool)
        #: Assistant turns (episodes of the model's words: ranked below the user's).
        self._assistant = np.zeros(cap, bool)
        self._created = np.zeros(cap, np.float64)
        #: The span of time a fact's text speaks of (:func:`mentioned_window`), as
        #: timestamps; NaN when it names none.
        self._mention_start = np.full(cap, np.nan)
        self._mention_end = np.full(cap, np.nan)
        #: Oldest and newest ``created_at`` ever indexed (the recency scale).
        self._created_range = (math.inf, -math.inf)
        self._process = np.zeros(cap, np.int32)
        self._process_codes: dict[str | None, int] = {None: 0}
        self._vecs: Any = None
        #: Sign sketches of the vectors, one row of slots per 64-bit word (contiguous per
        #: word, so a scan is a few long vector operations).
        self._sketch: Any = None
        #: Counts the writes (facts added or removed, vectors set or dropped): a search
        #: remembered with a version is still the search's answer while it is unchanged.
        self.version = 0
        #: :meth:`in_window`'s last answer: (the window asked, :attr:`version`, the slots).
        self._in_window: tuple[TimeWindow, int, Any] | None = None

    def __len__(self) -> int:
        return self.alive_count

    # -- writes --------------------------------------------------------------------------

    def _grow(self, need: int) -> None:
        np = _np()
        cap = len(self._alive)
        if need <= cap:
            return
        new = max(need, cap * 2)
        for name in (
            "_doclen",
            "_alive",
            "_has_vec",
            "_full",
            "_assistant",
            "_created",
            "_process",
            "_mention_start",
            "_mention_end",
        ):
            old = getattr(self, name)
            grown = np.full(new, np.nan if name.startswith("_mention") else 0, old.dtype)
            grown[:cap] = old
            setattr(self, name, grown)
        if self._vecs is not None:
            grown = np.zeros((new, self._vecs.shape[1]), np.float32)
            grown[:cap] = self._vecs
            self._vecs = grown
            sketch = np.zeros((self._sketch.shape[0], new), np.uint64)
            sketch[:, :cap] = self._sketch
            self._sketch = sketch

    def add(self, facts: Iterable[Fact], vectors: Mapping[str, Any] | None = None) -> None:
        """Index ``facts`` (known ids and hidden kinds are skipped) with their vectors,
        if given; a fact that supersedes an indexed one removes it."""
        if self.add_prepared(prepare_facts(facts, self.fusion)) and vectors:
            self.set_vectors(vectors)

    def add_prepared(self, prepared: Sequence[IndexedFact]) -> int:
        """:meth:`add` of facts read by :func:`prepare_facts` (with this index's fusion):
        the index is changed only by what is left, the share of an add that must hold it.
        Returns how many facts were new."""
        # A fact named twice (identical episodes of repeated requests share an id) takes
        # one slot: a second would be a live duplicate the id map no longer reaches.
        fresh: dict[str, IndexedFact] = {}
        for item in prepared:
            if item.fact.id not in self.slot_of:
                fresh.setdefault(item.fact.id, item)
        batch = list(fresh.values())
        if not batch:
            return 0
        self.version += 1
        start = len(self.facts)
        self._grow(start + len(batch))
        for offset, item in enumerate(batch):
            slot = start + offset
            fact = item.fact
            self.facts.append(fact)
            self.slot_of[fact.id] = slot
            for term, n in item.terms.items():
                p = self.postings.get(term)
                if p is None:
                    p = self.postings[term] = _Postings()
                p.slots.append(slot)
                p.tf.append(n)
            self._doclen[slot] = item.length
            self.total_len += item.length
            self._alive[slot] = True
            self._assistant[slot] = item.assistant
            self._created[slot] = item.created
            if item.mentioned is not None:
                self._mention_start[slot], self._mention_end[slot] = item.mentioned
            self._created_range = (
                min(self._created_range[0], item.created),
                max(self._created_range[1], item.created),
            )
            code = self._process_codes.setdefault(fact.process_id, len(self._process_codes))
            self._process[slot] = code
            self.alive_count += 1
        self.remove(item.fact.supersedes for item in batch if item.fact.supersedes)
        return len(batch)

    def replace_context(self, facts: Iterable[Fact]) -> list[Fact]:
        """Index these facts' ``metadata["context"]`` in place of the one their indexed
        versions have (an episode's following turns arrived): their context terms are
        indexed again in their slots, whose text, date and vector stay. Facts not indexed,
        or indexed with that context already, are skipped. Returns the facts whose
        :func:`embedding_text` changed with it: their vectors are dropped, to be made again."""
        stale: list[Fact] = []
        for fact in facts:
            slot = self.slot_of.get(fact.id)
            old = self.facts[slot] if slot is not None else None
            if slot is None or old is None or old.metadata.get(CONTEXT_KEY) == fact.metadata.get(CONTEXT_KEY):
                continue
            new = old.with_context_of(fact)
            self.version += 1
            self._reindex_terms(slot, indexed_terms(old, self.fusion), indexed_terms(new, self.fusion))
            self.facts[slot] = new
            if embedding_text(new) != embedding_text(old) and self._has_vec[slot]:
                self._clear_vector(slot)
                stale.append(new)
        return stale

    def _reindex_terms(self, slot: int, before: Mapping[str, float], after: Mapping[str, float]) -> None:
        """Move ``slot`` in the postings from the terms ``before`` to the terms ``after``
        (postings stay sorted by slot: a term's slot is found, inserted or taken out by
        bisection)."""
        for term in before.keys() | after.keys():
            was, now = before.get(term, 0.0), after.get(term, 0.0)
            if was == now:
                continue
            p = self.postings.get(term)
            if p is None:
                if not now:
                    continue
                p = self.postings[term] = _Postings()
            at = bisect.bisect_left(p.slots, slot)
            present = at < len(p.slots) and p.slots[at] == slot
            if now and present:
                p.tf[at] = now
            elif now:
                p.slots.insert(at, slot)
                p.tf.insert(at, now)
            elif present:
                p.slots.pop(at)
                p.tf.pop(at)
                if not p.slots:
                    del self.postings[term]  # a term no fact uses is unseen again
        length = float(sum(after.values()))
        self.total_len += length - float(self._doclen[slot])
        self._doclen[slot] = length

    def remove(self, fact_ids: Iterable[str]) -> None:
        """Stop recalling these facts (superseded, deleted)."""
        for fact_id in fact_ids:
            slot = self.slot_of.pop(fact_id, None)
            if slot is None or not self._alive[slot]:
                continue
            self.version += 1
            self._alive[slot] = False
            self._clear_vector(slot)
            self.facts[slot] = None
            self.total_len -= float(self._doclen[slot])
            self.alive_count -= 1

    def _clear_vector(self, slot: int) -> None:
        if self._has_vec[slot]:
            self._has_vec[slot] = False
            self.vector_count -= 1
        if self._full[slot]:
            self._full[slot] = False
            self.full_count -= 1

    def set_vectors(
        self, vectors: Mapping[str, Any], model: str | None = None, *, quick: bool = False
    ) -> None:
        """Attach embeddings to indexed facts (unknown ids are ignored). ``quick`` vectors
        (the embedder's cheap approximation, in the same space) only go where a fact has
        no vector yet; the full model's replace them."""
        self.set_prepared_vectors(prepare_vectors(vectors), model, quick=quick)

    def set_prepared_vectors(
        self, prepared: PreparedVectors | None, model: str | None = None, *, quick: bool = False
    ) -> None:
        """:meth:`set_vectors` of vectors read by :func:`prepare_vectors` (normalised and
        sketched before: only their placing changes the index)."""
        np = _np()
        if model is not None and self.model not in (None, model):
            self._drop_vectors()
        if model is not None:
            self.model = model
        if prepared is None:
            return
        rows: list[int] = []
        slots: list[int] = []
        for row, fact_id in enumerate(prepared.ids):
            slot = self.slot_of.get(fact_id)
            if slot is None or (quick and self._has_vec[slot]):
                continue
            rows.append(row)
            slots.append(slot)
        if not slots:
            return
        if self._vecs is None:
            self.dim = prepared.dim
            self._vecs = np.zeros((len(self._alive), self.dim), np.float32)
            self._sketch = np.zeros((sketch_words(), len(self._alive)), np.uint64)
        if prepared.dim != self.dim:
            return
        self.version += 1
        where = np.asarray(slots, dtype=np.intp)
        self._vecs[where] = prepared.block[rows]
        self._sketch[:, where] = prepared.sketch[:, rows]
        # Each id has one slot, so ``where`` holds no slot twice (and np.unique's first
        # call costs 30 ms of imports, under the lock a search may be waiting for).
        new = where[~self._has_vec[where]]
        self._has_vec[new] = True
        self.vector_count += len(new)
        if not quick:
            upgraded = where[~self._full[where]]
            self._full[upgraded] = True
            self.full_count += len(upgraded)

    def _drop_vectors(self) -> None:
        self.version += 1
        self._vecs = None
        self._sketch = None
        self._has_vec[:] = False
        self._full[:] = False
        self.vector_count = 0
        self.full_count = 0
        self.dim = 0

    @property
    def unembedded(self) -> int:
        """How many live facts have no vector of the full model yet (a quick one at most)."""
        return self.alive_count - self.full_count

    def missing_vectors(self) -> list[Fact]:
        """Indexed facts that have no vector of the full model yet."""
        if not self.unembedded:
            return []
        return [f for f in self.facts if f is not None and not self._full[self.slot_of[f.id]]]

    def needs_compaction(self) -> bool:
        """More dead slots than live ones (rebuild to reclaim memory and keep df exact)."""
        return len(self.facts) > 1024 and self.alive_count < len(self.facts) // 2

    def live_facts(self) -> list[Fact]:
        """The indexed facts."""
        return [f for f in self.facts if f is not None]

    def vector_of(self, fact_id: str, *, full: bool = False) -> Any:
        """The (normalised) vector of a fact, or ``None``; with ``full``, only the full
        model's."""
        slot = self.slot_of.get(fact_id)
        if slot is None or self._vecs is None or not self._has_vec[slot]:
            return None
        if full and not self._full[slot]:
            return None
        return self._vecs[slot]

    # -- search --------------------------------------------------------------------------

    def bm25(self, query: str | Mapping[str, int]) -> Any:
        """BM25 score of every slot for ``query`` (its text or its :func:`term_counts`);
        0 where no term matches and for dead slots."""
        return self._lexical(query, matches=False)[0]

    def _lexical(self, query: str | Mapping[str, int], *, matches: bool) -> tuple[Any, Any, Any]:
        """:meth:`bm25`'s scores, with ``matches`` the live slots sharing a term with the
        query (sorted; else ``None``), and each slot's share of the query's IDF mass
        (:attr:`Fusion.coverage_power`; a query term no fact uses counts as the rarest)."""
        np = _np()
        n = len(self.facts)
        scores = np.zeros(n, np.float32)
        covered = np.zeros(n, np.float32)
        none = np.zeros(0, np.intp) if matches else None
        if not self.alive_count:
            return scores, none, covered
        f = self.fusion
        counts = term_counts(query) if isinstance(query, str) else query
        avgdl = max(self.total_len / self.alive_count, 1e-6)
        # The length norm k1 * (1 - b + b * len / avgdl), computed for the matching slots
        # only: a pass over every slot would cost more than most postings.
        base, per_len = f.k1 * (1 - f.b), f.k1 * f.b / avgdl
        # Each matching term's slots, term frequencies, IDF mass, and BM25 numerator's
        # factor (kept apart from the mass: rounded to float32 as the factor it is).
        matched: list[Any] = []
        tfs: list[Any] = []
        weights: list[float] = []
        gains: list[float] = []
        postings = 0
        mass = 0.0
        for term, qtf in counts.items():
            p = self.postings.get(term)
            if p is None:
                mass += self._idf(0) * qtf
                continue
            idf = self._idf(len(p.slots))
            mass += idf * qtf
            if idf < self.WEIGHTLESS_IDF:
                continue
            slots = np.frombuffer(p.slots, dtype=np.int32)
            matched.append(slots)
            tfs.append(np.frombuffer(p.tf, dtype=np.float32))
            weights.append(idf * qtf)
            gains.append(idf * qtf * (f.k1 + 1))
            postings += len(slots)
        if matched:
            # Every matching term's postings in one pass rather than a few numpy calls per
            # term (~1-2 µs each: most of a long question's BM25). np.add.at adds in the
            # order given, term by term in float32 as a loop over the terms would: the
            # scores are the same to the bit.
            hits = matched[0] if len(matched) == 1 else np.concatenate(matched)
            tf = tfs[0] if len(tfs) == 1 else np.concatenate(tfs)
            lengths = [len(m) for m in matched]
            np.add.at(covered, hits, np.repeat(np.array(weights, np.float32), lengths))
            norm = self._doclen[hits] * per_len
            norm += base
            norm += tf
            np.add.at(scores, hits, np.repeat(np.array(gains, np.float32), lengths) * tf / norm)
        if mass:
            covered *= 1 / mass
        if self.alive_count < n:
            scores[~self._alive[:n]] = 0  # postings keep the slots of removed facts
        if not matches or not matched:
            return scores, none, covered
        if len(matched) == 1 or postings * 4 < n:
            # Few matches: merge the postings (a sort of what matched, not a pass over n;
            # by hand, as np.unique's generality costs several times more here).
            hit = hits
            if len(matched) > 1:
                hit.sort()  # the scoring's own concatenation, no longer needed in term order
                first = np.empty(len(hit), bool)
                first[0] = True
                np.not_equal(hit[1:], hit[:-1], out=first[1:])
                hit = hit[first]
            if self.alive_count < n:
                hit = hit[self._alive[hit]]
            return scores, hit.astype(np.intp), covered
        return scores, np.flatnonzero(scores), covered

    def _idf(self, df: int) -> float:
        """BM25's weight of a term that ``df`` indexed facts use."""
        # At least 0: postings keep removed facts' slots, so df can exceed the live count,
        # and a negative weight would make a match count against a fact.
        n = max(self.alive_count, self.fusion.idf_prior)
        return max(0.0, math.log(1 + (n - df + 0.5) / (df + 0.5)))

    def shared_terms(
        self, fact_id: str, query: str | Mapping[str, int], *, own_words: bool = False
    ) -> tuple[int, float]:
        """How many of the query's terms the fact is indexed under (its text, context or
        date; with ``own_words``, its text alone), and their share of the query's BM25
        weight (0 to 1): how much of the question its words alone answer. A number no
        fact says ("note 1234") is left out of the weight: it cannot be matched at all, so
        it says nothing of whether the words found the right facts (it made every question
        with a new number ask the full model)."""
        counts = term_counts(query) if isinstance(query, str) else query
        slot = self.slot_of.get(fact_id)
        own: Mapping[str, int] | None = None
        if own_words:
            fact = self.facts[slot] if slot is not None else None
            own = term_counts(fact.text) if fact is not None else {}
        shared, weight, total = 0, 0.0, 0.0
        for term in counts:
            p = self.postings.get(term)
            if p is None and _has_digit(term):
                continue  # a number no fact says: no fact's words, nor any vector, can match it
            idf = self._idf(len(p.slots) if p is not None else 0)
            total += idf
            if term in own if own is not None else _posted(p, slot):
                shared += 1
                weight += idf
        return shared, (weight / total if total else 0.0)

    def unseen_terms(self, query: str | Mapping[str, int]) -> list[str]:
        """The query's words that no indexed fact uses (words search cannot see). Terms
        with digits (numbers, ids, dates) are left out: they have no paraphrase for a
        vector to find."""
        counts = term_counts(query) if isinstance(query, str) else query
        return [t for t in counts if t not in self.postings and not _has_digit(t)]

    def _unit_query(self, qvec: Any) -> Any:
        """``qvec`` as a unit float32 vector, or ``None`` when no stored vector can be
        compared with it (none stored, other dimension, zero vector)."""
        np = _np()
        if qvec is None or self._vecs is None or not self.vector_count:
            return None
        q = np.asarray(qvec, dtype=np.float32).ravel()
        if len(q) != self.dim:
            return None
        qn = math.sqrt(float(q @ q))
        return q / qn if qn else None

    def _exact_cosines(self, q: Any, n: int) -> Any:
        """Cosine of every slot with the unit vector ``q`` (``-1`` where there is no vector)."""
        out = rows_dot(self._vecs[:n], q)
        if self.vector_count < n:
            out[~self._has_vec[:n]] = -1.0
        return out

    def _sketch_candidates(
        self, q: Any, lex: Any, covered: Any, matched: Any, eligible: Any
    ) -> tuple[Any, Any]:
        """The slots worth ranking and their exact cosines, for an index of many vectors.

        Reading every float32 vector is what costs (100k 384-d vectors are 150 MB: ~13 ms
        of memory bandwidth here), so the scan reads 256-bit sign sketches instead
        (random hyperplanes: the share of differing bits estimates the angle, 3 MB at
        100k), fuses the estimates with the BM25 scores ``lex`` (non-zero at ``matched``;
        IDF coverage ``covered``) as :meth:`search` will, and computes the exact cosine of the best
        :attr:`SKETCH_RESCORE` slots. ``eligible`` is ``None`` when every slot is."""
        np = _np()
        n = len(self.facts)
        f = self.fusion
        distance = sketch_distances(self._sketch[:, :n], query_sketch(q))
        rough = _vector_weight_of_distance(f)[distance]
        if self.vector_count < n:
            rough[~self._has_vec[:n]] = 0.0  # no vector: words only
        if len(matched):
            rough[matched] += f.lexical_weight * self._words(lex[matched], covered[matched])
        if eligible is not None:
            rough[~eligible] = -1.0
        take = min(self.SKETCH_RESCORE, n)
        # Selecting the smallest of the negated scores: numpy's introselect takes ~25x
        # longer for the largest when most scores tie at 0, as they do here.
        best = np.argpartition(-rough, take - 1)[:take]
        if eligible is not None:
            best = best[eligible[best]]
        cos = np.full(len(best), -1.0, np.float32)
        known = self._has_vec[best]
        cos[known] = rows_dot(self._vecs[best[known]], q)
        return best, cos

    def _eligible(self, n: int, process_id: str | None, exclude: Sequence[str]) -> Any:
        """Slots a search may return (live, of ``process_id`` or of no process, not
        ``exclude``d), or ``None`` when that is every slot."""
        np = _np()
        eligible = None if self.alive_count == n else self._alive[:n].copy()
        if process_id is not None and len(self._process_codes) > 1:
            # Facts with no process belong to every process of the entity.
            code = self._process_codes.get(process_id, -1)
            mine = (self._process[:n] == code) | (self._process[:n] == 0)
            eligible = mine if eligible is None else eligible & mine
        slots = [s for s in (self.slot_of.get(fact_id) for fact_id in exclude) if s is not None]
        if slots:
            if eligible is None:
                eligible = np.ones(n, bool)
            eligible[slots] = False
        return eligible

    def in_window(self, window: TimeWindow) -> Any:
        """Which slots hold a live fact said within ``window`` or whose text speaks of a
        time that meets it (a read-only boolean array over the slots). The answer for the
        last ``window`` asked is kept while the index is unchanged: a search asks it twice
        (whether any fact is of the time the question names, then which)."""
        known = self._in_window
        if known is not None and known[0] is window and known[1] == self.version:
            return known[2]
        n = len(self.facts)
        start, end = window.start.timestamp(), window.end.timestamp()
        created = self._created[:n]
        inside = (created >= start) & (created < end)
        # NaN (no time mentioned) compares false: those facts count by when they were said.
        inside |= (self._mention_start[:n] < end) & (self._mention_end[:n] > start)
        inside &= self._alive[:n]
        inside.flags.writeable = False  # kept for the next ask: read-only
        self._in_window = (window, self.version, inside)
        return inside

    def search(
        self,
        query: str | Mapping[str, int],
        qvec: Any = None,
        *,
        k: int = 5,
        process_id: str | None = None,
        min_score: float = 0.0,
        exclude: Sequence[str] = (),
        window: TimeWindow | None = None,
        parts: dict[str, ScoreParts] | None = None,
        about_assistant: bool = False,
        present: bool = False,
    ) -> list[tuple[Fact, float]]:
        """The ``k`` best facts for ``query`` (its text or its :func:`term_counts`) and
        its vector, if any, best first, with fused scores in [0, 1]; with
        ``process_id``, only that process's facts and facts of no process. With
        ``window`` (the time the question names), facts :meth:`in_window` get
        :attr:`Fusion.time_weight` more, and are ranked even when nothing else matches.

        Only slots that can score are ranked: with vectors, every slot (below
        :attr:`SKETCH_FROM` vectors) or the sketch scan's candidates; without, the slots
        sharing a word with the query; and the slots in ``window``.

        Assistant turns are ranked below the user's words (:attr:`Fusion.assistant_factor`)
        unless ``about_assistant`` (the question asks what the assistant said); among hits
        about the same thing the newer ranks first (:attr:`Fusion.update_similarity`), and
        recency counts more for a question about the ``present``
        (:attr:`Fusion.present_boost`).

        With ``parts``, the score parts of each fact returned are put in it by fact id
        (:meth:`score_parts`: what ``memtap explain`` shows)."""
        np = _np()
        n = len(self.facts)
        if not n or k <= 0 or not self.alive_count:
            return []
        if n <= self.SMALL_UP_TO:
            return self._search_small(
                query, qvec, k, process_id, min_score, exclude, window, parts, about_assistant, present
            )
        f = self.fusion
        q = self._unit_query(qvec)
        exact = q is not None and self.vector_count < self.SKETCH_FROM
        lex, matched, covered = self._lexical(query, matches=not exact)
        eligible = self._eligible(n, process_id, exclude)
        cos = None
        if q is None:
            slots = matched
            if eligible is not None:
                slots = slots[eligible[slots]]
        elif exact:
            cos = self._exact_cosines(q, n)
            if eligible is None:
                slots = np.arange(n)
            else:
                slots = np.flatnonzero(eligible)
                cos = cos[slots]
        else:
            slots, cos = self._sketch_candidates(q, lex, covered, matched, eligible)
        timely = None
        if window is not None:
            timely = self.in_window(window)
            if eligible is not None:
                timely = timely & eligible
            if not exact or q is None:
                # Facts of the time asked about are candidates even if nothing else matched.
                extra = np.setdiff1d(np.flatnonzero(timely), slots, assume_unique=True)
                if len(extra):
                    slots = np.concatenate([slots, extra])
                    if cos is not None:
                        more = np.full(len(extra), -1.0, np.float32)
                        known = self._has_vec[extra]
                        more[known] = rows_dot(self._vecs[extra[known]], q)
                        cos = np.concatenate([cos, more])
        fused = self._words(lex[slots], covered[slots])
        if cos is not None:
            vec_score = np.clip((cos - f.cos_floor) * (1 / (1 - f.cos_floor)), 0, 1)
            fused = f.lexical_weight * fused + (1 - f.lexical_weight) * vec_score
            if f.meaning_floor:
                np.maximum(fused, f.meaning_floor * vec_score, out=fused)
        demote = f.assistant_factor != 1 and not about_assistant
        if demote:
            fused[self._assistant[slots]] *= f.assistant_factor
        if present and f.present_boost:
            fused *= 1 + f.present_boost * self._age(self._created[slots])
        if timely is not None:
            fused[timely[slots]] += f.time_weight
        keep = fused > 0
        slots, fused = slots[keep], fused[keep]
        if not len(slots):
            return []
        if f.recency_weight:
            oldest, newest = self._created_range
            span = (newest - oldest) or 1.0
            fused += (self._created[slots] - oldest) * (f.recency_weight / span)
        # A newer fact about the same thing may rank above an older one from below the k.
        take = min(2 * k if self._reorders(about_assistant) else k, len(slots))
        top = np.argpartition(-fused, take - 1)[:take]
        top = top[np.argsort(-fused[top], kind="stable")]
        ranked, newer, lifted = self._reorder(
            list(zip(slots[top].tolist(), fused[top].tolist())), about_assistant
        )
        out: list[tuple[Fact, float]] = []
        facts = self.facts
        for slot, value in ranked[:k]:
            score = min(1.0, value)
            fact = facts[slot]
            if fact is not None and score >= min_score:
                out.append((fact, score))
                if parts is not None:
                    cosine = None
                    if q is not None:
                        cosine = float(self._vecs[slot] @ q) if self._has_vec[slot] else -1.0
                    in_time = timely is not None and bool(timely[slot])
                    parts[fact.id] = self.score_parts(
                        slot,
                        float(lex[slot]),
                        cosine,
                        in_time,
                        coverage=float(covered[slot]),
                        demoted=demote and bool(self._assistant[slot]),
                        newer=self._id_of(newer.get(slot)),
                        lifted=lifted.get(slot, 0.0),
                        present_age=float(self._age(self._created[slot])) if present else 0.0,
                    )
        return out

    def _words(self, bm25: Any, covered: Any) -> Any:
        """The lexical part of the fused score (before its weight) of BM25 scores
        ``bm25`` whose facts cover ``covered`` of the query's IDF mass."""
        f = self.fusion
        words = bm25 / (bm25 + f.bm25_half)
        if f.coverage_power:
            gate = _np().minimum(covered * (1 / f.coverage_full), 1.0)
            words = words * gate**f.coverage_power
        return words

    def _id_of(self, slot: int | None) -> str | None:
        fact = self.facts[slot] if slot is not None else None
        return fact.id if fact is not None else None

    def _reorders(self, about_assistant: bool) -> bool:
        """Whether :meth:`_reorder` may change an order (it then ranks twice ``k``)."""
        f = self.fusion
        return f.update_similarity <= 1 or (f.user_first_margin > 0 and not about_assistant)

    def _reorder(
        self, ranked: list[tuple[int, float]], about_assistant: bool
    ) -> tuple[list[tuple[int, float]], dict[int, int], dict[int, float]]:
        """``ranked`` (slot, score, best first) with two kinds of pair put in order, the
        one moved up taking the other's place and score (nothing is removed: an older
        statement is still evidence, "where did I work before?"):

        - the user's words first: an assistant turn ranked above a user turn of the same
          exchange that it echoes (vectors at least :attr:`Fusion.echo_similarity` alike:
          "Congratulations on Miso!"), or above one about the same
          thing (vectors at least :attr:`Fusion.update_similarity` alike) that scores within
          :attr:`Fusion.user_first_margin` of it (unless ``about_assistant``);
        - newest first: a fact ranked above a newer one of the same speaker about the same
          thing that scores within :attr:`Fusion.update_margin` of it.

        Also which slot each fact moved down for being older was superseded by, and what
        each fact moved up gained."""
        f = self.fusion
        newer: dict[int, int] = {}
        lifted: dict[int, float] = {}
        user_first = f.user_first_margin > 0 and not about_assistant
        updates = f.update_similarity <= 1
        if len(ranked) < 2 or not (user_first or updates):
            return ranked, newer, lifted
        slots = [slot for slot, _ in ranked]
        apart = max(f.update_margin, f.user_first_margin if user_first else 0.0)
        role = self._assistant[slots].tolist()
        created = self._created[slots].tolist()
        exchange = [getattr(self.facts[s], "source_exchange_id", None) for s in slots]
        # The pairs (by position in ``ranked``) that could ever move, whatever the scores:
        # an assistant turn and the user turn of its exchange that it echoes, and two facts
        # about the same thing. Most facts are in none, and the loop below only tries
        # these (a Python walk over every pair was most of a recall's reordering time).
        echoes: set[tuple[int, int]] = set()
        alike: set[tuple[int, int]] = set()
        if user_first:
            users_of: dict[str, list[int]] = {}
            for p, (assistant, said_in) in enumerate(zip(role, exchange)):
                if not assistant and said_in is not None:
                    users_of.setdefault(said_in, []).append(p)
            for a, (assistant, said_in) in enumerate(zip(role, exchange)):
                if assistant and said_in is not None:
                    echoes.update(
                        (a, b) for b in users_of.get(said_in, ()) if self._echoes(slots[a], slots[b])
                    )
        if f.update_similarity <= 1 and self._vecs is not None:
            np = _np()
            has = self._has_vec[slots]
            vecs = self._vecs[slots]
            close = (product(vecs, vecs.T) >= f.update_similarity) & has[:, None] & has[None, :]
            alike = {(a, b) for a, b in np.argwhere(close).tolist() if a != b}
        possible_of: list[set[int]] = [set() for _ in slots]
        for a, b in echoes:
            possible_of[a].add(b)
        for a, b in alike:
            if (user_first and role[a] and not role[b]) or (
                updates and role[a] == role[b] and created[b] > created[a]
            ):
                possible_of[a].add(b)
        order = list(range(len(ranked)))  # positions into ``ranked``
        scores = [score for _, score in ranked]
        i = 0
        moves = 0
        while i < len(order) and moves < 4 * len(order):
            a = order[i]
            found = None
            # The later positions of the facts ``a`` could give way to, nearest first:
            # scores only fall along ``order``, so the first that is too far below ends
            # the search, as a pair further down is further apart still (an assistant
            # turn's echo of its own exchange's user turn has no distance limit).
            later = possible_of[a]
            for j in sorted(at for at in map(order.index, later) if at > i) if later else ():
                b = order[j]
                gap = scores[i] - scores[j]
                if (
                    user_first
                    and role[a]
                    and not role[b]
                    and ((a, b) in echoes or ((a, b) in alike and gap <= f.user_first_margin))
                ):
                    found = j
                    break
                if (
                    updates
                    and role[a] == role[b]
                    and gap <= f.update_margin
                    and (a, b) in alike
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

    def _echoes(self, slot: int, other: int) -> bool:
        """Whether the fact at ``slot`` echoes the one at ``other`` (vectors at least
        :attr:`Fusion.echo_similarity` alike; without both vectors, taken as an echo)."""
        vecs = self._vecs
        if vecs is None or not (self._has_vec[slot] and self._has_vec[other]):
            return True
        return float(vecs[slot] @ vecs[other]) >= self.fusion.echo_similarity

    def _age(self, created: Any) -> Any:
        """Where ``created`` (timestamps) lies between the entity's oldest fact (0) and its
        newest (1)."""
        oldest, newest = self._created_range
        return (created - oldest) * (1 / ((newest - oldest) or 1.0))

    def score_parts(
        self,
        slot: int,
        bm25: float,
        cosine: float | None,
        in_time: bool,
        *,
        coverage: float = 1.0,
        demoted: bool = False,
        newer: str | None = None,
        lifted: float = 0.0,
        present_age: float = 0.0,
    ) -> ScoreParts:
        """What the fused score of ``slot`` is made of, given its BM25 score, its cosine
        with the query vector (``None``: no query vector; ``-1``: the fact has none),
        whether it is of the time the question names, and what :meth:`search` knows of
        its place (the :class:`ScoreParts` fields of those names; :meth:`ScoreParts.as_dict`
        names the parts). Made once per hit returned: on the request path."""
        f = self.fusion
        recency = 0.0
        if f.recency_weight:
            oldest, newest = self._created_range
            recency = (float(self._created[slot]) - oldest) * (f.recency_weight / ((newest - oldest) or 1.0))
        return ScoreParts(bm25, cosine, in_time, recency, f, coverage, demoted, newer, lifted, present_age)

    def _search_small(
        self,
        query: str | Mapping[str, int],
        qvec: Any,
        k: int,
        process_id: str | None,
        min_score: float,
        exclude: Sequence[str],
        window: TimeWindow | None = None,
        parts: dict[str, ScoreParts] | None = None,
        about_assistant: bool = False,
        present: bool = False,
    ) -> list[tuple[Fact, float]]:
        """:meth:`search` for an index of at most :attr:`SMALL_UP_TO` slots: the same
        scores (BM25, coverage, cosine, fusion, role, time, recency, newest first),
        computed per slot in Python."""
        n = len(self.facts)
        f = self.fusion
        counts = term_counts(query) if isinstance(query, str) else query
        alive = self._alive[:n].tolist()
        doclen = self._doclen[:n].tolist()
        avgdl = max(self.total_len / self.alive_count, 1e-6)
        base, per_len = f.k1 * (1 - f.b), f.k1 * f.b / avgdl
        lex = [0.0] * n
        covered = [0.0] * n
        mass = 0.0
        for term, qtf in counts.items():
            p = self.postings.get(term)
            if p is None:
                mass += self._idf(0) * qtf
                continue
            idf = self._idf(len(p.slots)) * qtf
            mass += idf
            weight = idf * (f.k1 + 1)
            for slot, tf in zip(p.slots, p.tf):
                lex[slot] += weight * tf / (doclen[slot] * per_len + base + tf)
                covered[slot] += idf
        if mass:
            covered = [c / mass for c in covered]
        power = f.coverage_power
        demote = f.assistant_factor != 1 and not about_assistant
        assistant = self._assistant[:n].tolist() if demote else None
        q = self._unit_query(qvec)
        cos: list[float] | None = None
        if q is not None:
            cos = rows_dot(self._vecs[:n], q).tolist()
            has_vec = self._has_vec[:n].tolist()
        code = None
        if process_id is not None and len(self._process_codes) > 1:
            code = self._process_codes.get(process_id, -1)
            process = self._process[:n].tolist()
        excluded = {self.slot_of[i] for i in exclude if i in self.slot_of}
        half, lw, floor = f.bm25_half, f.lexical_weight, f.cos_floor
        oldest, newest = self._created_range
        recency = f.recency_weight / ((newest - oldest) or 1.0) if f.recency_weight else 0.0
        boost = f.present_boost if present else 0.0
        created = self._created[:n].tolist() if recency else None
        created_all = self._created[:n].tolist() if boost else None
        timely = self.in_window(window).tolist() if window is not None else None
        scored: list[tuple[float, int]] = []
        for slot in range(n):
            if not alive[slot] or slot in excluded or (code is not None and process[slot] not in (code, 0)):
                continue
            value = lex[slot] / (lex[slot] + half)
            if power:
                value *= min(1.0, covered[slot] / f.coverage_full) ** power
            if cos is not None:
                c = cos[slot] if has_vec[slot] else -1.0
                vector = min(1.0, max(0.0, (c - floor) / (1 - floor)))
                value = max(lw * value + (1 - lw) * vector, f.meaning_floor * vector)
            elif not lex[slot] and not (timely is not None and timely[slot]):
                continue  # a candidate shares a word with the query or is of its time
            if assistant is not None and assistant[slot]:
                value *= f.assistant_factor
            if created_all is not None:
                value *= 1 + boost * self._age(created_all[slot])
            if timely is not None and timely[slot]:
                value += f.time_weight
            if value <= 0:
                continue
            if created is not None:
                value += (created[slot] - oldest) * recency
            scored.append((value, slot))
        scored.sort(key=lambda pair: -pair[0])
        take = 2 * k if self._reorders(about_assistant) else k
        ranked, newer, lifted = self._reorder(
            [(slot, value) for value, slot in scored[:take]], about_assistant
        )
        out: list[tuple[Fact, float]] = []
        facts = self.facts
        for slot, value in ranked[:k]:
            score = min(1.0, value)
            fact = facts[slot]
            if fact is not None and score >= min_score:
                out.append((fact, score))
                if parts is not None:
                    cosine = None if cos is None else (cos[slot] if has_vec[slot] else -1.0)
                    in_time = timely is not None and timely[slot]
                    late = (created[slot] - oldest) * recency if created is not None else 0.0
                    parts[fact.id] = ScoreParts(
                        lex[slot],
                        cosine,
                        in_time,
                        late,
                        f,
                        covered[slot],
                        assistant is not None and assistant[slot],
                        self._id_of(newer.get(slot)),
                        lifted.get(slot, 0.0),
                        float(self._age(created_all[slot])) if created_all is not None else 0.0,
                    )
        return out


#: Bits of a vector's sign sketch.
SKETCH_BITS = 256
_planes: dict[int, Any] = {}


def _posted(postings: _Postings | None, slot: int | None) -> bool:
    """Whether ``slot`` is among ``postings``' slots. A fact's slot occurs once per term,
    and slots grow as facts are added: postings are sorted, so membership is a bisection."""
    if postings is None or slot is None:
        return False
    at = bisect.bisect_left(postings.slots, slot)
    return at < len(postings.slots) and postings.slots[at] == slot


def _has_digit(term: str) -> bool:
    return any(c.isdigit() for c in term)


class IndexedFact(NamedTuple):
    """What indexing a fact reads from it (:func:`prepare_facts`), ready to be placed in an
    index (:meth:`EntityIndex.add_prepared`)."""

    fact: Fact
    #: Its weighted terms (:func:`indexed_terms`).
    terms: dict[str, float]
    length: float
    assistant: bool
    created: float
    #: The span of time its text speaks of (timestamps), or ``None``.
    mentioned: tuple[float, float] | None


def indexed_terms(fact: Fact, fusion: Fusion) -> dict[str, float]:
    """The weighted terms a fact is indexed under: its text's, its context's (weighted
    :attr:`Fusion.context_weight`) and its date's (:attr:`Fusion.date_weight`)."""
    counts: dict[str, float] = {t: float(n) for t, n in term_counts(fact.text).items()}
    context = fact.metadata.get(CONTEXT_KEY)
    if context:
        w = fusion.context_weight
        for term, times in term_counts(context).items():
            counts[term] = counts.get(term, 0.0) + w * times
    dw = fusion.date_weight
    if dw:
        for term, times in term_counts(date_text(fact)).items():
            counts[term] = counts.get(term, 0.0) + dw * times
    return counts


def prepare_facts(facts: Iterable[Fact], fusion: Fusion) -> list[IndexedFact]:
    """Read ``facts`` for an index of ``fusion`` (hidden kinds left out), apart from any
    index: a background thread does it before it takes the index a search may be waiting
    for, and holds it only to place them (:meth:`EntityIndex.add_prepared`)."""
    out: list[IndexedFact] = []
    for fact in facts:
        if fact.kind in HIDDEN_KINDS:
            continue
        terms = indexed_terms(fact, fusion)
        mentioned = mentioned_window(fact.text, fact.created_at)
        out.append(
            IndexedFact(
                fact,
                terms,
                float(sum(terms.values())),
                fact.metadata.get("role") == "assistant",
                fact.created_at.timestamp(),
                None if mentioned is None else (mentioned.start.timestamp(), mentioned.end.timestamp()),
            )
        )
    return out


class PreparedVectors(NamedTuple):
    """Vectors read by :func:`prepare_vectors`: unit rows and their sign sketches."""

    ids: list[str]
    dim: int
    #: One unit-length float32 row per id.
    block: Any
    #: Their sign sketches (:func:`sketch_of`).
    sketch: Any


def prepare_vectors(vectors: Mapping[str, Any]) -> PreparedVectors | None:
    """``vectors`` (by fact id) normalised and sketched, apart from any index (what
    :meth:`EntityIndex.set_prepared_vectors` would otherwise do while holding it); rows of
    another dimension than the first are left out. ``None`` when there is none."""
    np = _np()
    ids: list[str] = []
    rows: list[Any] = []
    for fact_id, vec in vectors.items():
        if vec is None:
            continue
        v = np.asarray(vec, dtype=np.float32).ravel()
        if rows and len(v) != len(rows[0]):
            continue
        ids.append(fact_id)
        rows.append(v)
    if not rows:
        return None
    block = np.stack(rows)
    norms = np.linalg.norm(block, axis=1, keepdims=True)
    block /= np.where(norms > 0, norms, 1.0)
    return PreparedVectors(ids, block.shape[1], block, sketch_of(block))


def sketch_words() -> int:
    """64-bit words per sketch."""
    return SKETCH_BITS // 64


def _planes_for(dim: int) -> Any:
    """The random hyperplanes of ``dim``-dimensional sketches (fixed per dimension, seeded,
    so sketches made in different processes agree)."""
    np = _np()
    planes = _planes.get(dim)
    if planes is None:
        planes = np.random.default_rng(20_240_601).standard_normal((dim, SKETCH_BITS))
        planes = _planes[dim] = planes.astype(np.float32)
    return planes


def sketch_of(rows: Any) -> Any:
    """Sign sketches of ``rows`` (n x dim) as ``(words, n)`` uint64: bit i says which side
    of random hyperplane i the vector is on."""
    np = _np()
    bits = np.packbits(product(rows, _planes_for(rows.shape[1])) > 0, axis=1, bitorder="little")
    words: Any = bits.view(np.uint64).T.copy()
    return words


def query_sketch(q: Any) -> Any:
    """The sign sketch of one vector, as ``(words,)`` uint64 (what :func:`sketch_of` makes
    for a single row)."""
    np = _np()
    return np.packbits(q @ _planes_for(len(q)) > 0, bitorder="little").view(np.uint64)


def sketch_distances(sketches: Any, query: Any) -> Any:
    """How many bits of each sketch (``(words, n)``) differ from ``query``'s (``(words,)``)."""
    np = _np()
    counts = np.bitwise_count(np.bitwise_xor(sketches, query[:, None]))
    return counts.sum(axis=0, dtype=np.uint16)


@functools.lru_cache(maxsize=1)
def _cosine_of_distance() -> Any:
    """The cosine each sketch distance stands for: with ``h`` of the bits differing, the
    angle is about ``pi * h / bits`` (``h`` from 0 to all bits)."""
    np = _np()
    return np.cos(np.pi * np.arange(SKETCH_BITS + 1) / SKETCH_BITS)


def sketch_cosines(sketches: Any, query: Any) -> Any:
    """Estimated cosine of each sketched vector with the query's sketch (the estimate the
    scan ranks by)."""
    np = _np()
    return _cosine_of_distance().astype(np.float32)[sketch_distances(sketches, query)]


@functools.lru_cache(maxsize=16)
def _vector_weight_of_distance(fusion: Fusion) -> Any:
    """The vector part of the fused score, ``(1 - lexical_weight) * clip((cos - cos_floor)
    / (1 - cos_floor))``, for each sketch distance (one table lookup per slot in the scan
    instead of five passes)."""
    np = _np()
    score = np.clip((_cosine_of_distance() - fusion.cos_floor) / (1 - fusion.cos_floor), 0, 1)
    # The meaning floor (:attr:`Fusion.meaning_floor`) as the scan can estimate it: a
    # candidate's vector part alone, never less than the floor's share of its score.
    weight = max(1 - fusion.lexical_weight, fusion.meaning_floor)
    return (weight * score).astype(np.float32)


def query_terms(query: str) -> list[str]:
    """The lexical terms recall would look up for ``query`` (for diagnostics)."""
    return terms(query)
