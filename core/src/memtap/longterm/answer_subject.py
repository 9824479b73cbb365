"""Whether a recalled fact is about the one a question asks about, for questions whose
near misses name that one beside someone else's answer (issue 34, abstention).

- **Whose work.** "What does Aoife do for a living?" is not answered by "Aoife's sister
  Ciara is a nurse" (Aoife only owns the one who works), nor by "Aoife loves early
  dinners" (nothing about work): some clause of the fact must name the one asked about,
  or say "he" / "she" / "they" in a fact that names them, beside a word about work. Only
  for someone else's work: the user speaks every turn, and says what they do in too many
  ways ("first week in the dispatch office done") for a rule.
- **Whose thing.** "What's our dog called?" is not answered by "the neighbour's dog,
  Bruno": when the question asks about *my* / *our* thing, a fact whose every mention of
  it is someone else's ("the neighbour's", "his", "her", "their") is about another one.
- **What number.** "How old is Rudi?" needs an age ("he's 9", "turned 9", "9 years"), not
  "six weeks of crate rest"; "how much did he pay?" needs an amount of money, not "4 days"
  or "25 years".
- **When it is.** "When is my sister's wedding?" needs a time said about it, not "my sister
  just got engaged" (a "when did ...?" question is not checked: its answer is often the
  day the fact was said).
- **Who, by relation.** "My missus" is "my wife", "our granddaughter" one of "my
  grandchildren", not "my sister" for "my brother-in-law" nor a wife for "my business
  partner"; people who type in lower case name people in lower case after the relation
  ("my roommate yaw").

Hand-written patterns over the question's and the fact's words; each a general rule of
English questions, none a model.
"""

from __future__ import annotations

import re
from functools import lru_cache
from itertools import pairwise

from memtap.longterm.temporal import CALENDAR_WORDS, speaks_of_a_day, speaks_of_a_time
from memtap.longterm.text import STOP_WORDS, stem, terms

#: Questions whose side of a check is kept (read once per question, not per recalled fact).
_PER_QUESTION = 1024

#: "what does my wife do for work?", "what did Imran do for a living?", "what's Kevin's
#: job?", "where does my flatmate work?": the words naming whose work is asked.
_ASKS_WORK = re.compile(
    r"\bwhat\s+(?:does|did|do)\s+(?P<a>[\w' -]+?)\s+do\s+for\s+(?:work|a\s+living|a\s+job|money)\b"
    r"|\bwhat(?:\s+is|\s+was|'s)\s+(?P<b>[\w -]+?)(?:'s|s')\s+"
    r"(?:job|occupation|profession|line\s+of\s+work)\b"
    r"|\bwhere\s+(?:does|did)\s+(?P<c>[\w' -]+?)\s+work\b",
    re.IGNORECASE,
)
#: The user and the assistant: their work is not checked (see the module's docstring).
_SPEAKERS = frozenset(["i", "you", "we", "me"])
#: Words about work or what someone is ("is a nurse", "works nights", "runs a bakery").
_WORK_WORDS = re.compile(
    r"\b(?:work(?:s|ed|ing)?|job|jobs|career|profession|occupation|employ\w*|hired|retired|"
    r"shifts?|office|clinic|firm|company|business|boss|colleagues?|salary|"
    r"(?:is|was|'s|as|became|becomes|become)\s+(?:a|an)\s+[\w-]+|"
    r"runs?\s+(?:a|an|the|his|her|their)\b|teach(?:es|ing)?|stud(?:ies|ying)|student)\b",
    re.IGNORECASE,
)
#: Pieces of a fact that say one thing each (a name and a word about work in one piece
#: are about each other; "X thinks I'm crazy, her sister is a teacher" is two).
_CLAUSE = re.compile(r"[.!?;,:()\u2014\u2013\n]|\s-\s|\bbut\b", re.IGNORECASE)
_PRONOUN = re.compile(r"\b(?:he|she|they)(?:'s|'re)?\b", re.IGNORECASE)
#: After "X's", a word saying "X's" is "X is" / "X has" ("Kevin's a teacher", "Mina's
#: been working"), not that X owns what follows.
_CONTRACTION_NEXT = frozenset(
    [
        "a",
        "an",
        "the",
        "been",
        "now",
        "working",
        "still",
        "just",
        "also",
        "got",
        "going",
        "not",
        "never",
        "always",
        "very",
        "so",
        "in",
        "at",
        "on",
    ]
)
_WORD_AT = re.compile(r"[\w-]+(?:['\u2019]s\b|s['\u2019](?!\w))?")
#: Words after "how old is" that name no one in particular.
_ANYONE = frozenset(["i", "you", "we", "me", "it", "he", "she", "they", "the", "this", "that"])
#: Words for one relation ("my wife's dad" may be "my father-in-law" in the fact).
_KIN = [
    frozenset(["dad", "father", "father-in-law", "papa", "stepdad", "stepfather"]),
    frozenset(["mum", "mom", "mother", "mother-in-law", "mama", "stepmum", "stepmom", "stepmother"]),
    frozenset(["wife", "husband", "spouse", "partner", "missus", "hubby"]),
    frozenset(["boyfriend", "girlfriend", "bf", "gf", "partner", "fiance", "fiancee", "fiancé", "fiancée"]),
    frozenset(["brother", "sister", "sibling", "brother-in-law", "sister-in-law"]),
    frozenset(["son", "daughter", "child", "kid", "boy", "girl"]),
    frozenset(["roommate", "flatmate", "housemate"]),
]
#: Words for the very same one, for a name asked ("what's my wife's name?" is answered by
#: "my missus, Sian"; not by "my sister Efua" for "my brother-in-law's name?"): synonyms,
#: and a general word with the words it covers.
_SAME_ONE = [
    frozenset(["dad", "father", "papa"]),
    frozenset(["mum", "mom", "mother", "mama"]),
    frozenset(["wife", "missus"]),
    frozenset(["husband", "hubby"]),
    frozenset(["boyfriend", "bf"]),
    frozenset(["girlfriend", "gf"]),
    frozenset(["son", "boy"]),
    frozenset(["daughter", "girl"]),
    frozenset(["roommate", "flatmate", "housemate"]),
]
_COVERS = {
    "spouse": frozenset(["wife", "husband", "missus", "hubby"]),
    "partner": frozenset(
        ["wife", "husband", "missus", "hubby", "boyfriend", "girlfriend", "bf", "gf", "fiance", "fiancee"]
    ),
    "sibling": frozenset(["brother", "sister"]),
    "child": frozenset(["son", "daughter", "boy", "girl"]),
    "kid": frozenset(["son", "daughter", "boy", "girl"]),
    "parent": frozenset(["mum", "mom", "mother", "mama", "dad", "father", "papa"]),
    "grandchild": frozenset(["grandson", "granddaughter"]),
    "grandchildren": frozenset(["grandson", "granddaughter"]),
    "grandkid": frozenset(["grandson", "granddaughter"]),
}
_COVERS["family"] = frozenset(word for group in _SAME_ONE[:-1] for word in group).union(
    *(_COVERS[k] for k in ("sibling", "grandchild"))
)
#: Words that name someone by relation ("my sister", "Zosia's boyfriend"): a name asked of
#: one of them is written beside the word (:func:`names_the_relation`).
_RELATIONS = frozenset(
    [word for group in (*_KIN, *_SAME_ONE) for word in group]
    + [word for covered in _COVERS.values() for word in covered]
    + list(_COVERS)
    + [
        "grandson",
        "granddaughter",
        "grandma",
        "grandpa",
        "grandmother",
        "grandfather",
        "aunt",
        "uncle",
        "cousin",
        "niece",
        "nephew",
        "friend",
        "boss",
        "manager",
        "neighbour",
        "neighbor",
        "colleague",
        "coworker",
        "twin",
    ]
)
_RELATION_STEMS = frozenset(stem(w) for w in _RELATIONS)
_THEIRS = frozenset(["his", "her", "their", "your"])
#: The user named as an owner in a fact written in the third person.
_USERS = frozenset(["user's", "users'"])
#: "how old is Rudi?": the one named after the verb (not "my sons": a fact may name them
#: instead, "Daan is 16"; "what age did I start?" names no one).
_ASKS_AGE = re.compile(
    r"\bhow\s+old\s+(?:is|are|was|were|will)\s+(?!my\b|our\b|your\b)(?P<who>[\w-]+)|\bhow\s+old\b|\bwhat\s+age\b",
    re.IGNORECASE,
)
_AGE_NUMBER = (
    r"(?:\d+|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|"
    r"fifteen|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety)"
)
_AGE = re.compile(
    r"\b(?:old|aged?|born|birthdays?|turn(?:s|ed|ing)?)\b|\b\d+\s*(?:yo|y/o|yrs?|years?|months?)\b|"
    rf"(?:'s|\bis|\bwas|\bare|\bat)\s+{_AGE_NUMBER}\b",
    re.IGNORECASE,
)
_ASKS_MONEY = re.compile(
    r"\bhow\s+much\b.*\b(?:pay|paid|cost|costs|spend|spent|charge|charged|price|earn|earns|"
    r"make|makes|worth|rent|salary|sell|sold|loan|mortgage|fees?|bills?|debt|budget|savings|saved|"
    r"allowance|tuition|deposit|wage|income)\b",
    re.IGNORECASE,
)
_MONEY = re.compile(
    r"[$£€¥₹]|\b\d[\d,.]*\s*(?:k|m|bn|ksh|kes|usd|gbp|eur|won)\b|"
    r"\b(?:grand|bucks|quid|dollars?|pounds?|euros?|rupees?|shillings?|pesos?|reais|zloty|yen|cents?|pence|"
    r"paid|pay|cost|costs|spent|price|priced|worth|budget|afford|salary|rent|per\s+month|a\s+month)\b",
    re.IGNORECASE,
)


#: Sentences of a fact (an age, a word of what was said, belong to the one named in theirs).
_SENTENCES = re.compile(r"[.!?;\n]+\s*")
_QUANTITY = re.compile(
    rf"[$£€¥₹]?\b(?:\d[\d,.]*(?:k|m|bn)?|{_AGE_NUMBER}|hundred|thousand|million|grand)\b", re.IGNORECASE
)
_NOT_MONEY_UNIT = re.compile(
    r"\s*(?:years?|yrs?|months?|weeks?|days?|hours?|hrs?|minutes?|mins?|seconds?|secs?|km|kms|"
    r"miles?|kg|kgs|lbs?|am|pm|%|percent|people|times)\b",
    re.IGNORECASE,
)
#: "when is my sister's wedding?", "when's the party?": an event's time, which a fact gives
#: in its words (not "when did ...?": the answer to that is often the day it was said).
_ASKS_WHEN_IS = re.compile(r"\bwhen(?:'s|\s+is|\s+are|\s+will)\b", re.IGNORECASE)
#: "on what date do we fly out?", "which day is the party?": a day, not a month.
_ASKS_DAY = re.compile(r"\b(?:what|which)\s+(?:date|day)\b", re.IGNORECASE)
#: "what did the vet say was wrong?", "what did Mum think of the flat?": what someone said.
_ASKS_SAID = re.compile(
    r"\bwhat\s+(?:did|does|do)\s+(?!you\b|i\b|we\b)(?P<who>[\w.' -]+?)\s+"
    r"(?:say|think|tell|reckon|recommend|suggest|make\s+of|feel\s+about)\b",
    re.IGNORECASE,
)
_SAID = re.compile(
    r"\b(?:said|says|say|told|tells|think|thinks|thought|reckons?|reckoned|feels?|felt|loved?|loves|"
    r"liked?|likes|hated?|hates|recommended|recommends|suggested|suggests|decided|found|diagnosed|"
    r"verdict|feedback|according\s+to|called\s+it)\b",
    re.IGNORECASE,
)


@lru_cache(maxsize=_PER_QUESTION)
def work_subject(question: str) -> str | None:
    """The word naming whose work ``question`` asks, when it is someone else's ("what does
    my wife do for a living?": "wife"; "what's Kevin's job?": "kevin"), else ``None``."""
    m = _ASKS_WORK.search(question.replace("\u2019", "'"))
    if not m:
        return None
    words = (m.group("a") or m.group("b") or m.group("c") or "").split()
    last = words[-1].lower().removesuffix("'s") if words else ""
    return None if not last or last in _SPEAKERS else last


@lru_cache(maxsize=_PER_QUESTION)
def kin_terms(word: str) -> frozenset[str]:
    """The index terms (:func:`memtap.longterm.text.terms`) of ``word`` and of every other
    word for the very same one ("wife": "missus"; "grandchildren": "granddaughter",
    "grandson")."""
    low = word.lower()
    base = stem(low)
    words = {low}.union(*(same for same in _SAME_ONE if low in same or base in {stem(w) for w in same}))
    for general, covered in _COVERS.items():
        if base == stem(general):
            words |= covered
    return frozenset(terms(" ".join(words)))


_OWNERS = frozenset(["my", "our", "your", "his", "her", "their"])
#: "what's", "who's": a verb, not an owner.
_NOT_OWNERS = frozenset(
    ["what's", "who's", "where's", "when's", "how's", "that's", "it's", "there's", "he's", "she's"]
)


@lru_cache(maxsize=_PER_QUESTION)
def relations_asked(question: str) -> frozenset[str]:
    """The words of ``question`` naming someone by relation, right after an owner ("my
    partner", "Zosia's boyfriend"): "my business partner" asks about no life partner."""
    words = _OWNED_TOKEN.findall(question.lower().replace("\u2019", "'"))
    found = set()
    for before, word in pairwise(words):
        owner = before in _OWNERS or (before.endswith(("'s", "s'")) and before not in _NOT_OWNERS)
        base = word.removesuffix("'s").removesuffix("'")
        if owner and stem(base) in _RELATION_STEMS:
            found.add(base)
    return frozenset(found)


_OWNED_TOKEN = re.compile(r"[\w'-]+")


def _same_one(word: str, other: str) -> bool:
    """Whether ``other`` is ``word`` (stemmed) or a word for the same relation."""
    return stem(word) == stem(other) or any(word in kin and other in kin for kin in _KIN)


def _named_as_itself(word: str, clause: str) -> bool:
    """Whether ``clause`` names ``word`` (or another word for the same relation: "dad",
    "father") other than as the owner of something ("Imran's brother"), compared stemmed."""
    words = _WORD_AT.findall(clause)
    want = word.lower()
    for i, token in enumerate(words):
        low = token.lower().replace("\u2019", "'")
        owner = low.endswith(("'s", "s'"))
        base = low.removesuffix("'s").removesuffix("'")
        if not _same_one(want, base):
            continue
        following = words[i + 1].lower() if i + 1 < len(words) else ""
        if not owner or following in _CONTRACTION_NEXT:
            return True
    return False


def says_their_work(subject: str, fact_text: str) -> bool:
    """Whether ``fact_text`` says something about the work of ``subject``: some clause names
    them (not as an owner) or, when the fact names them, says he / she / they, beside a word
    about work."""
    clauses = _CLAUSE.split(fact_text.replace("\u2019", "'"))
    named = [_named_as_itself(subject, c) for c in clauses]
    if not any(named):
        return False
    return any((n or _PRONOUN.search(c)) and _WORK_WORDS.search(c) for n, c in zip(named, clauses))


@lru_cache(maxsize=_PER_QUESTION)
def first_person_focus(question: str, focus: str) -> bool:
    """Whether ``question`` asks about the user's own ``focus`` ("our dog", "my new car"),
    not someone else's ("my kids' school", "Zosia's boyfriend")."""
    pattern = r"\b(?:my|our)\s+(?:[\w-]+\s+){0,2}?" + re.escape(focus) + r"\b"
    m = re.search(pattern, question.replace("\u2019", "'"), re.IGNORECASE)
    return m is not None and "'" not in m.group(0)


def only_someone_elses(focus: str, fact_text: str) -> bool:
    """Whether every mention of ``focus`` in ``fact_text`` is owned by someone else ("the
    neighbour's dog", "his memoir"); false when it is not mentioned. An owner named ("Alice's
    dog") or "the user's" may be the user: facts about the user are often written in the
    third person (remembered by an app, memorized from a conversation), so only an owner
    by relation or pronoun makes the thing someone else's."""
    words = _WORD_AT.findall(fact_text)
    want = stem(focus.lower())
    seen = False
    for i, token in enumerate(words):
        if stem(token.lower().removesuffix("'s").removesuffix("'")) != want:
            continue
        seen = True
        before = words[i - 1].replace("\u2019", "'") if i else ""
        owner = before.lower()
        by_name = before[:1].isupper() and owner not in _THEIRS
        if owner in _USERS or by_name or not (owner in _THEIRS or owner.endswith(("'s", "s'"))):
            return False
    return seen


@lru_cache(maxsize=_PER_QUESTION)
def asks_for_age(question: str) -> bool:
    """Whether ``question`` asks how old someone or something is."""
    return _ASKS_AGE.search(question) is not None


def gives_their_age(question: str, fact_text: str) -> bool:
    """Whether ``fact_text`` gives an age ("she's 20", "turned 9", "9 years") and, when
    ``question`` asks the age of someone it names ("how old is Rudi?", "how old is my
    wife?"), names them (by relation, in the age's sentence)."""
    text = fact_text.replace("\u2019", "'")
    if _AGE.search(text) is None:
        return False
    m = _ASKS_AGE.search(question)
    who = (m.group("who") or "").lower() if m else ""
    if who and who not in _ANYONE:
        return _named_as_itself(who, text)
    # "how old is my wife Yumi?": her, by relation or by name, in the age's sentence.
    relations = relations_asked(question)
    if not relations or lower_case_writer(text):
        return True  # in lower case, names cannot be told from other words
    wanted = frozenset().union(*(kin_terms(r) for r in relations)) | _names_in(question)
    return any(
        _AGE.search(sentence) and not wanted.isdisjoint(terms(sentence))
        for sentence in _SENTENCES.split(text)
    )


@lru_cache(maxsize=_PER_QUESTION)
def asks_for_money(question: str) -> bool:
    """Whether ``question`` asks an amount of money ("how much did he pay for it?")."""
    return _ASKS_MONEY.search(question) is not None


def gives_money(fact_text: str, question: str = "") -> bool:
    """Whether ``fact_text`` gives an amount of money: a word of money ("paid", "cost", a
    currency) and a number that is not a time or a measure ("25 years" is how long a loan
    runs, not what it cost); with ``question``, about what it asks ("how much is my student
    loan?" is not answered by "rent is £520 a month"; "how much does Juliana earn?" by a
    salary, not by what she saved)."""
    if _MONEY.search(fact_text) is None:
        return False
    if not any(_NOT_MONEY_UNIT.match(fact_text, m.end()) is None for m in _QUANTITY.finditer(fact_text)):
        return False
    wanted = _money_things(question) if question else frozenset()
    return not wanted or not wanted.isdisjoint(terms(fact_text))


#: What one earns, and what one spends, each said in several ways.
_INCOME = frozenset(terms("earn earns earned salary wage wages income raise makes paycheck"))
_SPENDING = frozenset(terms("spend spent budget cost costs price pay paid afford"))
#: Words of a money question that are no thing it is about.
_MONEY_ASIDE = frozenset(terms("much month monthly year yearly week weekly day daily each per now currently"))


@lru_cache(maxsize=_PER_QUESTION)
def _money_things(question: str) -> frozenset[str]:
    """What a money question asks the amount of: its words but people's names and times
    ("how much does Juliana earn?": what she earns, said in any of the ways of earning)."""
    asked = set(terms(question)) - _MONEY_ASIDE - _names_in(question)
    for way in (_INCOME, _SPENDING):
        if not asked.isdisjoint(way):
            asked |= way
    return frozenset(asked)


@lru_cache(maxsize=_PER_QUESTION)
def _names_in(question: str) -> frozenset[str]:
    """The terms of the capitalised words of ``question`` past its first word (names)."""
    words = _WORD_AT.findall(question)[1:]
    return frozenset(
        t
        for w in words
        if w[:1].isupper() and w.lower() not in CALENDAR_WORDS and w != "I"
        for t in terms(w.removesuffix("'s"))
    )


@lru_cache(maxsize=_PER_QUESTION)
def asks_when_it_is(question: str) -> bool:
    """Whether ``question`` asks when something is or will be ("when is my sister's
    wedding?"), not when it was."""
    return _ASKS_WHEN_IS.search(question.replace("\u2019", "'")) is not None


@lru_cache(maxsize=_PER_QUESTION)
def _event_terms(question: str) -> frozenset[str]:
    """What a "when is ..." question is about: its terms but the names in it (all of them
    when it has nothing else)."""
    asked = frozenset(terms(question))
    return asked - _names_in(question) or asked


def gives_its_time(question: str, fact_text: str) -> bool:
    """Whether ``fact_text`` says a time (:func:`memtap.longterm.temporal.speaks_of_a_time`;
    a day when ``question`` asks a date) and shares a word with ``question`` besides the
    names in it (what is asked about: "my sister just got engaged" has no time; "my first
    parkrun this weekend" is about something else; "Marge is busy this week" is not
    Marge's surgery)."""
    if _event_terms(question).isdisjoint(terms(fact_text)):
        return False
    return speaks_of_a_day(fact_text) if asks_for_a_day(question) else speaks_of_a_time(fact_text)


#: Words right after a relation that are no name of it ("my son really wants", "my
#: roommate says"): besides stop words and -s / -ed / -ing / -ly words.
_NOT_A_NAME = frozenset(
    [
        "said",
        "got",
        "went",
        "came",
        "made",
        "took",
        "told",
        "left",
        "lost",
        "won",
        "bought",
        "sent",
        "kept",
        "found",
        "gave",
        "felt",
        "ran",
        "saw",
        "sat",
        "met",
        "fell",
        "put",
        "can",
        "could",
        "will",
        "would",
        "should",
        "must",
        "might",
        "just",
        "also",
        "still",
        "really",
        "always",
        "never",
        "finally",
        "literally",
        "basically",
        "lol",
        "haha",
        "tho",
        "though",
        "too",
        "here",
        "there",
        "now",
        "then",
    ]
)
_LOWER_WORD = re.compile(r"[a-z][a-z'-]*")


def lower_case_writer(text: str) -> bool:
    """Whether ``text`` is written without capitals at its start (typed casually: names in
    it may be lower case too)."""
    first = re.search(r"[^\W\d_]", text)
    return first is not None and first.group().islower()


def names_in_lower_case(focus: str, fact_text: str) -> bool:
    """Whether ``fact_text``, written in lower case, names the relation ``focus`` (or another
    word for it) right after it ("my roommate yaw", "a boy, yonas", "my gf mina"): a word
    that is no stop word, and no verb or adverb by its ending or its kind (an -s word only
    when set off by a comma). Only relations: a thing's name is written with capitals even
    by those who type in lower case, and "company insurance" names no company."""
    wanted = kin_terms(focus)
    if len(wanted) < 2 or not lower_case_writer(fact_text):
        return False
    for m in _AFTER_WORD.finditer(fact_text):
        if stem(m.group("word").lower()) not in wanted:
            continue
        name, apposed = m.group("name"), bool(m.group("comma"))
        if len(name) < 2 or name in STOP_WORDS or name in _NOT_A_NAME:
            continue
        if name.endswith(("ed", "ing", "ly")) or (name.endswith("s") and not apposed):
            continue
        return True
    return False


#: A word and the next, with nothing but spaces or a comma between ("boy, yonas").
_AFTER_WORD = re.compile(r"\b(?P<word>[\w-]+)(?=(?P<comma>\s*,)?\s+(?P<name>[a-z][a-z'-]*)\b)")


@lru_cache(maxsize=_PER_QUESTION)
def asks_for_a_day(question: str) -> bool:
    """Whether ``question`` asks for a date or a day ("on what date do we fly?")."""
    return _ASKS_DAY.search(question) is not None


@lru_cache(maxsize=_PER_QUESTION)
def asks_what_was_said(question: str) -> bool:
    """Whether ``question`` asks what someone else said or thought ("what did the vet
    say?"), not what the user or the assistant did."""
    return _ASKS_SAID.search(question.replace("\u2019", "'")) is not None


def reports_what_was_said(question: str, fact_text: str, speaker: str = "") -> bool:
    """Whether ``fact_text`` reports what the one ``question`` asks about said or thought
    (a sentence naming them, or saying he / she / they, with "said", "thinks", "loved"...:
    "the vet said", "Mum loved it"), or is said by someone (a ``speaker`` label: their own
    words)."""
    if speaker:
        return True
    m = _ASKS_SAID.search(question.replace("\u2019", "'"))
    who = m.group("who").split()[-1].lower().rstrip(".") if m else ""
    wanted = (kin_terms(who) | frozenset(terms(who))) if who else frozenset()
    for sentence in _SENTENCES.split(fact_text):
        if _SAID.search(sentence) and (
            not wanted or not wanted.isdisjoint(terms(sentence)) or _PRONOUN.search(sentence)
        ):
            return True
    return False


#: Words before a name ("my brother, Dr. Okafor").
_TITLES = frozenset(["dr", "mr", "mrs", "ms", "miss", "prof", "professor", "aunt", "auntie", "uncle", "sir"])
_TOKEN = re.compile(r"[\w'-]+|,")


def names_the_relation(relation: str, fact_text: str) -> bool:
    """Whether ``fact_text`` gives the name of ``relation`` ("sister") beside it: right
    after it ("my sister Efua", "my sister, Efua", "my brother, Dr. Okafor"), right before
    it ("Efua, my sister"), or in lower case after it (:func:`names_in_lower_case`); not a
    name elsewhere in its sentence ("my sister who lives in Birmingham")."""
    wanted = kin_terms(relation)
    tokens = _TOKEN.findall(fact_text.replace("\u2019", "'"))
    for i, token in enumerate(tokens):
        if stem(token.lower().removesuffix("'s").removesuffix("'")) not in wanted:
            continue
        j = i + 1
        while j < len(tokens) and (tokens[j] == "," or tokens[j].lower().rstrip(".") in _TITLES):
            j += 1
        if j < len(tokens) and tokens[j].lower() in ("is", "was", "called", "named"):
            j += 1  # "my dentist is Dr Patel", "my wife is called Priya"
            while j < len(tokens) and (
                tokens[j].lower() in ("called", "named") or tokens[j].lower().rstrip(".") in _TITLES
            ):
                j += 1
            if j < len(tokens) and (_is_name(tokens[j]) or tokens[j - 1].lower() in ("called", "named")):
                return True
        elif j < len(tokens) and _is_name(tokens[j]):
            return True
        k = i - 1
        while k >= 0 and tokens[k].lower() in _OWNERS:
            k -= 1
        if k >= 1 and tokens[k] == "," and _is_name(tokens[k - 1]):
            return True
    return names_in_lower_case(relation, fact_text)


def _is_name(word: str) -> bool:
    return word[:1].isupper() and word != "I" and word.lower() not in CALENDAR_WORDS and not word.isupper()
