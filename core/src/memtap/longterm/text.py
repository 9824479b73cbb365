"""Text analysis for lexical recall: terms of a fact or a query, cheaply and without a
model.

Lower-cased word tokens, English stop words removed, a light suffix stemmer (plurals,
``-ing``, ``-ed``, ``-ly``) so "adopted"/"adopt" and "dogs"/"dog" meet, and character
bigrams for CJK runs (which have no spaces to split on).
"""

from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache

from memtap.protocol.normalise import normalise

__all__ = ["STOP_WORDS", "normalise", "stem", "term_counts", "terms"]

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")

_STOP_TEXT = """a about above after again against all am an and any are aren as at be because been
    before being below between both but by can could couldn d did didn do does doesn doing
    don down during each few for from further had hadn has hasn have haven having he her
    here hers herself him himself his how i if in into is isn it its itself just ll m me
    might more most must my myself no nor not now o of off on once only or other our ours
    ourselves out over own re s same shan she should shouldn so some such t than that the
    their theirs them themselves then there these they this those through to too under
    until up very was wasn we were weren what when where which while who whom why will
    with won would wouldn y you your yours yourself yourselves ve let also get got us
    really yeah oh hey hi ok okay thanks thank lot much many"""
#: Words too common to tell facts apart (questions are full of them).
STOP_WORDS = frozenset(_STOP_TEXT.split())


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """A light English suffix stemmer (conservative: short words are left alone)."""
    if len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith("sses"):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ingly", "edly", "ing", "ed", "ly"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            base = word[: -len(suffix)]
            if not any(c in "aeiouy" for c in base):
                break
            if len(base) > 3 and base[-1] == base[-2] and base[-1] not in "lsz":
                base = base[:-1]
            return base
    return word


def _cjk_bigrams(token: str) -> list[str]:
    if len(token) == 1:
        return [token]
    return [token[i : i + 2] for i in range(len(token) - 1)]


#: Texts up to this long have their terms remembered (:func:`_known_terms`).
_REMEMBERED_CHARS = 4096


def terms(text: str) -> list[str]:
    """The index terms of ``text``, in order (repeats kept)."""
    if len(text) <= _REMEMBERED_CHARS:
        return list(_known_terms(text))
    return _terms(text)


def term_counts(text: str) -> Counter[str]:
    """How often each index term occurs in ``text``."""
    return Counter(_known_terms(text) if len(text) <= _REMEMBERED_CHARS else _terms(text))


@lru_cache(maxsize=8192)
def _known_terms(text: str) -> tuple[str, ...]:
    """:func:`terms` of a text read lately: a turn is read as a fact, then again as the
    context of the turns around it (and each time that context grows), and a question as
    it is asked (issue 37: tokenizing was most of memorize's own CPU)."""
    return tuple(_terms(text))


def _terms(text: str) -> list[str]:
    out: list[str] = []
    for raw in _WORD.findall(text.lower()):
        if _CJK.search(raw):
            out.extend(_cjk_bigrams(raw))
        elif raw not in STOP_WORDS:
            out.append(stem(raw))
    return out
