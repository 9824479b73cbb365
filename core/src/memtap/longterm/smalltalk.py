# ruff: noqa: RUF001, RUF003 - word lists in other scripts (Cyrillic, CJK punctuation) on purpose
"""Small talk: turns that say nothing worth remembering on their own.

"ok", "thanks!", "yes please", "sure, sounds great", "haha", "👍", "Thanks, Mel!", "merci
beaucoup", "好的谢谢": a conversation is full of them, and as episodes they only crowd recall
(they match any question about thanks or plans, in any session). :func:`is_small_talk` tells
them apart from short turns that do say something ("I'm vegan", "call me Bob", "no nuts",
"Tokyo", "42").

The rule, kept simple enough to predict: a turn is small talk when, once a leading speaker
label ("Caroline: ") is set aside, every word in it is a filler word — an acknowledgement,
thanks, greeting or farewell, a reaction ("wow", "awesome"), laughter ("hahaha", "lol",
"jajaja", "ㅋㅋ"), hesitation ("hmm"), an English function word — or the name of the person
addressed: a capitalised word next to a word of thanks, greeting or farewell ("Thanks,
Mel!", "Bye Nate", "Thank you Claude"), or ending a reaction ("Wow, Mel!", "That's
wonderful, Caroline!"; but "Great, Paris it is" says something). A turn with no word at all
(emoji, punctuation) is small talk too. Any other word makes it worth keeping: when unsure,
keep. So a name after a word of agreement is kept ("Sure, Bob." like "Yes, Tokyo.", which
answers a question). Filler words are listed for English, French, German, Spanish,
Italian, Portuguese, Dutch and Russian; Chinese, Japanese and Korean runs (no spaces
between words) are small talk when nothing is left once their filler phrases are taken
out.

Hand-written rather than a library: no small-talk or dialogue-act classifier runs offline
without a model, and a word list is cheap (a few microseconds per turn) and reviewable.
"""

from __future__ import annotations

import re
from functools import lru_cache

from memtap.longterm.text import _CJK, STOP_WORDS  # the tokenizer's stop words and CJK letters

#: Words that only acknowledge, thank, greet, react or hesitate, by language (lower case).
_FILLER_TEXT = {
    "en": """yes yeah yep yup ya yah yea aye sure ok okay k kk alright right correct exactly
        absolutely definitely totally indeed agreed agree true fine cool great good nice
        awesome amazing wonderful perfect excellent fantastic brilliant lovely neat sweet
        super fab fabulous terrific incredible impressive beautiful cute fun funny
        interesting exciting inspiring hilarious adorable wow whoa woah omg gosh yay woo
        woohoo hooray hmm hm um umm uh uhh er erm ah ahh aw aww ooh thanks thank thx ty tysm
        tnx thankyou appreciate appreciated grateful cheers please pls plz sorry apologies
        hear hello hey heya hiya howdy yo greetings morning afternoon evening night gn gm
        bye goodbye cya later see soon take care talk ttyl farewell sound sounds seems looks
        glad welcome pleasure course worries problem sense makes means job done well luck
        idea help helped helpful check congrats congratulations bless love same wait go
        ahead keep going goes noted understood gotcha know posted bet stay safe catch hang
        chat enjoy hope time one wanted say buddy bud pal mate dude man guys folks gonna
        gotta wanna yoohoo support thing like deal plan anytime np yw nvm lol lmao lmfao rofl xd""",
    "fr": """oui ouais merci beaucoup bien super génial genial parfait accord salut bonjour
        bonsoir coucou bonne nuit journée soirée top mdr ptdr rien c est ça très tout""",
    "de": """ja jawohl danke dank vielen schön bitte gut toll klar genau prima hallo tschüss
        tschüs moin servus alles sehr gerne""",
    "es": """sí si vale claro gracias muchas muchísimas perfecto genial bueno buena buenas
        buenos días noches tardes hola adiós chao de nada muy bien igualmente""",
    "it": """sì grazie mille prego perfetto certo ottimo benissimo bene va ciao buongiorno
        buonanotte buonasera""",
    "pt": """sim obrigado obrigada valeu beleza ótimo otimo legal olá ola oi tchau tudo bem""",
    "nl": """ja dank bedankt je wel prima top hoi doei dag fijn""",
    "ru": """да ага угу конечно спасибо большое благодарю ок хорошо ладно отлично понятно
        привет пока здравствуйте супер класс круто""",
}


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


FILLER_WORDS = frozenset().union(*map(_words, _FILLER_TEXT.values()), STOP_WORDS)

#: Words of thanks, greeting or farewell: a capitalised word next to one is the person
#: addressed ("Thanks, Mel!", "Hi Jon", "Bye Nate!", "Take care, Deb").
_ADDRESSING = _words(
    """thanks thank thx ty cheers hello hi hey heya hiya howdy yo bye goodbye cya night
    morning care soon later luck congrats congratulations welcome merci danke gracias grazie
    obrigado obrigada bedankt salut hallo hola ciao oi tchau hoi"""
)
#: Reactions: a capitalised word after one, ending its clause, is the person addressed
#: ("Wow, Mel!", "That's wonderful, Caroline!").
_REACTIONS = _words(
    """wow whoa great awesome wonderful amazing nice cool lovely perfect brilliant fantastic
    sweet job done"""
)

#: Words that may stand between a word of thanks or greeting and the name it addresses
#: ("Thank you, Claude", "Thanks so much Mel", "Hi there Jon").
_BETWEEN = _words("you so much a lot again there all")

#: Filler phrases of languages written without spaces (Chinese, Japanese, Korean), longest
#: first so that a phrase is taken out before the shorter ones inside it.
_CJK_FILLERS = sorted(
    _words(
        """好的 好滴 好吧 好 谢谢你 谢谢 多谢 感谢 嗯嗯 嗯 是的 是 对的 对 没问题 收到 哈哈 可以 行
        明白 了解 知道了
        はい ええ うん ありがとうございます ありがとう どうも 了解です 了解 わかりました
        分かりました なるほど そうですね よろしく おはよう こんにちは こんばんは おやすみ
        すごい いいね 笑
        네 넵 예 응 감사합니다 고맙습니다 고마워 좋아요 좋아 알겠습니다 알겠어 안녕하세요 안녕"""
    ),
    key=len,
    reverse=True,
)
_CJK_FILLER = re.compile("|".join(map(re.escape, _CJK_FILLERS)))

#: Laughter however long: haha, hehe, jaja, jeje, lolol, ахаха, kkkk, rsrs, wwww, ㅋㅋ, ㅎㅎ.
_LAUGHTER = re.compile(
    r"(?:a?h[aeiou]){2,}h?|a?(?:j[aeiou]){2,}j?|(?:lo)+l|l[uo]l+|(?:а?х[аеи]){2,}х?|k{3,}|(?:rs){2,}|w{3,}"
    r"|ㅋ+|ㅎ+"
)
_WORD = re.compile(r"[^\W_]+")
#: A heart or a smiley written with a digit ("<3", ":3"): not a number said.
_EMOTICON = re.compile(r"[<:;]3+")
#: "Caroline: ", "Dr. Smith: ", "User: ": who speaks, at the start of an imported turn (one
#: to three capitalised words).
_SPEAKER = re.compile(r"^\s*([^\W\d_][\w.'’-]*(?: [^\W\d_][\w.'’-]*){0,2}):\s")
_REPEATS = re.compile(r"(.)\1{2,}")
_CLAUSE_END = re.compile(r"[.,!?;:…。，！？、]")
_SENTENCE_END = re.compile(r"[.!?…。！？]")


@lru_cache(maxsize=4096)
def _is_filler(word: str) -> bool:
    if _CJK.search(word):
        return not _CJK_FILLER.sub("", word)
    if _LAUGHTER.fullmatch(word):
        return True
    # "sooo", "yesss", "coooool": letters said longer than they are spelled.
    return any(w in FILLER_WORDS for w in (word, _REPEATS.sub(r"\1\1", word), _REPEATS.sub(r"\1", word)))


def _addressed(lowered: list[str], sentence: list[int], i: int, ends_clause: bool) -> bool:
    """Whether word ``i`` names the person addressed: next to a word of thanks, greeting or
    farewell in its sentence (only :data:`_BETWEEN` words in between), on either side, or
    ending its clause right after a reaction."""
    for step in (-1, 1):
        j = i + step
        while 0 <= j < len(lowered) and sentence[j] == sentence[i] and lowered[j] in _BETWEEN:
            j += step
        if 0 <= j < len(lowered) and sentence[j] == sentence[i] and lowered[j] in _ADDRESSING:
            return True
    return ends_clause and i > 0 and sentence[i - 1] == sentence[i] and lowered[i - 1] in _REACTIONS


def _said(text: str) -> str:
    """``text`` without a leading speaker label."""
    label = _SPEAKER.match(text)
    if label is None or not all(w[0].isupper() for w in label.group(1).split()):
        return text
    return text[label.end() :]


def is_small_talk(text: str) -> bool:
    """Whether ``text`` (one turn) is small talk: only acknowledgement, thanks, greeting,
    reaction, laughter or emoji, with nothing to remember in it (see the module's rule)."""
    said = _EMOTICON.sub(" ", _said(text))
    found = list(_WORD.finditer(said))
    lowered = [m.group().lower() for m in found]
    # What follows each word up to the next: where clauses and sentences end.
    gaps = [
        said[m.end() : found[i + 1].start() if i + 1 < len(found) else len(said)] for i, m in enumerate(found)
    ]
    sentence = [0] * len(found)
    for i in range(1, len(found)):
        sentence[i] = sentence[i - 1] + bool(_SENTENCE_END.search(gaps[i - 1]))
    for i, match in enumerate(found):
        if _is_filler(lowered[i]):
            continue
        ends_clause = i + 1 == len(found) or bool(_CLAUSE_END.search(gaps[i]))
        if not (match.group()[0].isupper() and _addressed(lowered, sentence, i, ends_clause)):
            return False
    return True


__all__ = ["FILLER_WORDS", "is_small_talk"]
