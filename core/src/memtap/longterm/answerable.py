"""Whether a recalled fact can answer the question at all, by the kind of answer the
question asks for. A question asking for a name ("what's my dentist's name?", "what is my
cat called?") is not answered by a fact that names no one but whom the question names
("my husband is a dentist") or names someone it is not about ("my brother Tom plays the
cello", "Zosia is at her mum's with Kasia" for "what's Zosia's boyfriend called?": the one
asked about, its *focus*, is the boyfriend), however close in meaning; a question asking a
title or a name of something ("what's the title of my memoir?", "the name of my kids'
school") not by a fact that never mentions that thing; one asking for a number ("how old
is Rudi?", "how much did he pay?") not by a fact without one. The recall injector leaves
such facts out, so that a question whose answer was never said injects nothing rather
than an invitation to make one up.

Hand-written patterns, not a model: they run on every injection, and say nothing about
other questions (any fact may answer those).
"""

from __future__ import annotations

import re
from functools import lru_cache

# The question's side of each check is read once per question, not once per recalled fact
# (the injector asks can_answer for every hit, and a tool loop asks the same question again
# on each request): answer_subject's _PER_QUESTION bounds those caches here too.
from memtap.longterm.answer_subject import (
    _PER_QUESTION,
    asks_for_a_day,
    asks_for_age,
    asks_for_money,
    asks_what_was_said,
    asks_when_it_is,
    first_person_focus,
    gives_its_time,
    gives_money,
    gives_their_age,
    kin_terms,
    lower_case_writer,
    names_in_lower_case,
    names_the_relation,
    only_someone_elses,
    relations_asked,
    reports_what_was_said,
    says_their_work,
    work_subject,
)
from memtap.longterm.temporal import CALENDAR_WORDS
from memtap.longterm.text import terms

#: "what make of guitar?": a brand answers, which need not say "guitar" ("a Fender").
_ASKS_MAKE = re.compile(r"\bwhat\s+(?:make|brand|model)\b", re.IGNORECASE)
_ASKS_NAME = re.compile(
    r"\bname\b|\bnamed\b|\bcalled\b|\bwho\s+(?:is|was|are|were)\s+my\b|\bwhat\s+(?:make|brand|model)\b",
    re.IGNORECASE,
)
_ASKS_NUMBER = re.compile(
    r"\bhow\s+(?:old|much|far|tall|long(?!\s+ago)|heavy)\b|\bwhat\s+(?:number|year|age|size|time)\b",
    re.IGNORECASE,
)
#: A capitalised word that does not start a sentence piece ("Dr Patel", "Miso", "Leeds"),
#: as names are written in English; "I" and its contractions are not names.
_CAPITALISED = re.compile(r"(?<![.!?:]\s)(?<!^)\b(?!I\b|I'[a-z]+\b)([A-Z][\w-]*)")
_NAMING = re.compile(r"\b(?:called|named|name\s+is|name's|names\s+are)\s+([\w-]+)", re.IGNORECASE)
_NUMBER = re.compile(
    r"\d|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|"
    r"thirty|forty|fifty|sixty|hundred|thousand|million|dozen|half|twice|once)\b",
    re.IGNORECASE,
)
#: Words of a question asking a name that say it asks one, not whom it is about.
_NAMING_WORDS = frozenset(terms("name named names called call"))
#: "Speaker: " labels at the start of a turn (imported transcripts) are not names said.
_LABEL = re.compile(r"^\s*[\w .'-]{1,40}:\s+")
_WORD = re.compile(r"[^\W_]+")
#: A title asked ("the title of my memoir"); a job title is a role ("I'm a senior analyst
#: now" answers "what's my job title?"), not a name of the job.
_ASKS_TITLE = re.compile(r"(?<!\bjob\s)(?<!\bwork\s)\btitle\b(?!\s+(?:at|for)\s+work\b)", re.IGNORECASE)
#: "the name of my kids' school": the words after "name of" up to the one named.
_NAME_OF = re.compile(r"\b(?:name|title)\s+of\s+(.*)$", re.IGNORECASE)
#: "Zosia's boyfriend called", "my dentist's name": the word before the name asked.
#: "name" only after a possessive: "why did Joanna name the dog Tilly?" asks no name.
_BEFORE_NAME = re.compile(r"([\w-]+)(?:(?:'s|s')\s+name|(?:'s|s')?\s+(?:called|title))\b", re.IGNORECASE)
_PHRASE_WORD = re.compile(r"[\w'-]+")
#: Words before the thing named ("the name of my new ...").
_LEADING = frozenset(
    ["the", "my", "our", "his", "her", "their", "your", "a", "an", "new", "late", "old", "current", "first"]
)
#: Words after it ("the company I worked at", "the guy my parents wanted me to marry").
_TRAILING = frozenset(
    [
        "i",
        "he",
        "she",
        "we",
        "they",
        "you",
        "my",
        "that",
        "who",
        "where",
        "which",
        "at",
        "in",
        "for",
        "to",
        "did",
        "does",
        "do",
        "is",
        "was",
        "are",
        "were",
        "from",
        "on",
        "with",
    ]
)
_NOT_FOCUS = frozenset(
    ["what", "whats", "what's", "is", "was", "my", "our", "your", "his", "her", "their", "its", "the"]
)


@lru_cache(maxsize=_PER_QUESTION)
def asks_for_name(question: str) -> bool:
    """Whether ``question`` asks for a name ("what's my dentist's name?", "what is my cat
    called?", "who is my doctor?")."""
    return _ASKS_NAME.search(question) is not None


@lru_cache(maxsize=_PER_QUESTION)
def asks_for_number(question: str) -> bool:
    """Whether ``question`` asks for a number ("how old is Rudi?", "how much did I pay?",
    "what number is my plot?")."""
    return _ASKS_NUMBER.search(question) is not None


def names_something(text: str, besides: str = "") -> bool:
    """Whether ``text`` gives a name other than the words of ``besides`` (the question:
    "Zosia got a 7" names no one new for "what's Zosia's boyfriend called?"): a
    capitalised word after the start of a sentence, or a word after "called" / "named" /
    "name is"."""
    body = _LABEL.sub("", text, count=1)
    known = _lowered_words(besides)
    found = [m.group(1) for m in _NAMING.finditer(body)] + [
        m.group(1) for m in _CAPITALISED.finditer(body) if m.group(1).lower() not in CALENDAR_WORDS
    ]
    return any(name.lower().removesuffix("'s") not in known for name in found)


@lru_cache(maxsize=_PER_QUESTION)
def _lowered_words(text: str) -> frozenset[str]:
    return frozenset(w.lower() for w in _WORD.findall(text))


@lru_cache(maxsize=_PER_QUESTION)
def _asked_terms(question: str) -> frozenset[str]:
    """The question's terms besides the words asking for a name."""
    return frozenset(terms(question)) - _NAMING_WORDS


def about_the_one_named(question: str, fact_text: str) -> bool:
    """Whether ``fact_text`` shares a word with ``question`` besides the words asking for a
    name, or another word for a relation it asks about: "my dentist is Dr Patel" is about
    "what's my dentist's name?", "our granddaughter Poppy" about "what are my grandchildren
    called?", "my brother Tom plays the cello" (a name, of someone else) is not."""
    wanted = _asked_with_kin(question)
    return not wanted or not wanted.isdisjoint(terms(_LABEL.sub("", fact_text, count=1)))


@lru_cache(maxsize=_PER_QUESTION)
def _asked_with_kin(question: str) -> frozenset[str]:
    asked = _asked_terms(question)
    return asked.union(
        *(kin_terms(word) for word in _WORD.findall(question.lower()) if kin_terms(word) - {word})
    )


@lru_cache(maxsize=_PER_QUESTION)
def name_focus(question: str) -> str | None:
    """The thing whose name or title ``question`` asks ("what's Zosia's boyfriend called?":
    "boyfriend"; "the name of the company Venkat works for": "company"), or ``None``."""
    q = question.strip().rstrip("?").replace("\u2019", "'")
    after = _NAME_OF.search(q)
    if after:
        taken: list[str] = []
        for word in _PHRASE_WORD.findall(after.group(1)):
            low = word.lower()
            if not taken and (low in _LEADING or low.endswith(("'s", "s'"))):
                continue
            if taken and (low in _TRAILING or word[:1].isupper()):
                break
            taken.append(low)
        return taken[-1] if taken else None
    before = _BEFORE_NAME.search(q)
    if before and before.group(1).lower() not in _NOT_FOCUS:
        return before.group(1).lower()
    return None


def mentions_the_focus(question: str, fact_text: str) -> bool:
    """Whether ``fact_text`` mentions what ``question`` asks the name or title of (its
    :func:`name_focus`, stemmed: "kids" for "kid"), and, when the question asks about the
    user's own ("our dog"), not only as someone else's ("the neighbour's dog"); true when
    the question has none."""
    focus = name_focus(question)
    wanted = set(kin_terms(focus) if focus in relations_asked(question) else terms(focus)) if focus else set()
    body = _LABEL.sub("", fact_text, count=1)
    if not wanted or wanted.isdisjoint(terms(body)):
        return not wanted
    return not (focus and first_person_focus(question, focus) and only_someone_elses(focus, body))


#: Sentences and dashed-off pieces of a fact: a name answers for the thing asked about when
#: both are in one ("our cat is called Biscuit", "the school play is next week. Eleni is a
#: tree" is not the school's name). Commas stay: they set names off ("our dog, Bruno").
_PRONOUN_START = re.compile(r"(?:he|she|it|they|his|her|its|their)\b", re.IGNORECASE)
#: Clauses joined by "and" / "but" / "so" are apart too ("ended up in the Heath, and the
#: cardiologist put a stent in": the Heath is no cardiologist's name).
_SENTENCE = re.compile(r"[.!?;:\n]+\s|\s[\u2014\u2013-]\s|[()]|,?\s(?:and|but|so)\s", re.IGNORECASE)


def names_the_focus(question: str, fact_text: str) -> bool:
    """Whether a sentence of ``fact_text`` mentions what ``question`` asks the name of and
    gives a name (:func:`names_something`), or the sentence after it, when that one starts
    with a pronoun ("I got a puppy! Her name's Coco."); true when the question asks no
    thing's name."""
    focus = name_focus(question)
    if not focus:
        return True
    pieces = [p.strip() for p in _SENTENCE.split(_LABEL.sub("", fact_text, count=1))]
    for i, piece in enumerate(pieces):
        if not mentions_the_focus(question, piece):
            continue
        after = pieces[i + 1] if i + 1 < len(pieces) else ""
        if names_something(piece, besides=question) or (
            _PRONOUN_START.match(after) and names_something(after, besides=question)
        ):
            return True
    return names_in_lower_case(focus, fact_text)


@lru_cache(maxsize=_PER_QUESTION)
def asks_for_title(question: str) -> bool:
    """Whether ``question`` asks a thing's title ("what's the title of the book?"; not a
    job title)."""
    return _ASKS_TITLE.search(question) is not None


@lru_cache(maxsize=_PER_QUESTION)
def asks_a_kind_of_answer(question: str) -> bool:
    """Whether ``question`` asks for any kind of answer :func:`can_answer` checks a fact
    for (a question that asks none is answered by any fact: recall asks this once per
    question instead of once per fact it found)."""
    return (
        asks_for_name(question)
        or asks_for_title(question)
        or asks_for_number(question)
        or asks_for_age(question)
        or asks_for_money(question)
        or asks_what_was_said(question)
        or asks_when_it_is(question)
        or asks_for_a_day(question)
        or work_subject(question) is not None
    )


def can_answer(question: str, fact_text: str) -> bool:
    """Whether a fact of ``fact_text`` could answer ``question`` by the kind of answer it
    asks for (a name of the one asked about, a title or name of a thing it mentions, a
    number, an age of the one asked about, an amount of money, the time of an event asked
    "when is", what someone else does for work: :mod:`memtap.longterm.answer_subject`;
    other questions: always). Names written in lower case count after the relation asked
    about, in a fact typed in lower case ("my roommate yaw")."""
    if not asks_a_kind_of_answer(question):
        return True
    label = _LABEL.match(fact_text)
    body = fact_text[label.end() :] if label else fact_text
    focus = name_focus(question)
    if focus and asks_for_name(question) and focus in relations_asked(question):
        # Someone by relation ("my sister"): the name beside the relation, not one elsewhere.
        if not names_the_relation(focus, body):
            return False
    else:
        if asks_for_name(question) and not (
            (
                names_something(fact_text, besides=question)
                or (focus and names_in_lower_case(focus, fact_text))
                or (_ASKS_MAKE.search(question) and lower_case_writer(fact_text))
            )
            and (_ASKS_MAKE.search(question) or about_the_one_named(question, fact_text))
        ):
            return False
        if (asks_for_name(question) or asks_for_title(question)) and not (
            mentions_the_focus(question, fact_text) and names_the_focus(question, fact_text)
        ):
            return False
    if asks_for_number(question) and _NUMBER.search(body) is None:
        return False
    if asks_for_age(question) and not gives_their_age(question, body):
        return False
    if asks_for_money(question) and not gives_money(body, question):
        return False
    if asks_what_was_said(question) and not reports_what_was_said(
        question, body, speaker=label.group() if label else ""
    ):
        return False
    if (asks_when_it_is(question) or asks_for_a_day(question)) and not gives_its_time(question, body):
        return False
    subject = work_subject(question)
    return subject is None or says_their_work(subject, body)
