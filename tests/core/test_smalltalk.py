# ruff: noqa: RUF001 - turns in other scripts (CJK punctuation, Cyrillic) on purpose
"""Episode quality (issue 20, item 5): small talk ("ok", "thanks", "yes please", emoji) is not
stored as an episode; short turns that say something ("I'm vegan", "call me Bob", "no
nuts") are. A corpus of turns for the rule, then the paths that make episodes:
``Memory.capture`` (transcripts with speaker labels too), memorize's fallback when the LLM
port fails; ``Memory.remember`` stores what it is asked to. A registered client's path is
in tests/plugins/openai/test_recall.py, the proxy's in
tests/contrib/proxy/test_proxy_episodes.py."""

from __future__ import annotations

import pytest

import memtap
from memtap.longterm.memorize import worth_keeping
from memtap.longterm.smalltalk import is_small_talk
from memtap.protocol.model import Message
from memtap.storage.store import InMemoryStore

#: Turns with nothing to remember on their own, in the languages the rule knows.
SMALL_TALK = [
    # acknowledgements, agreement
    "ok",
    "OK.",
    "okay",
    "k",
    "Okkk",
    "yes",
    "yes please",
    "Yep!",
    "sure",
    "Sure thing!",
    "alright",
    "Got it.",
    "Will do!",
    "Makes sense.",
    "Sounds good to me",
    "Sounds like a plan!",
    "It's a deal.",
    "Exactly!",
    "Agreed.",
    "Me too!",
    "You too!",
    "Same here!",
    "No problem.",
    "No worries!",
    "Anytime!",
    "Noted, thanks",
    # thanks, with or without the name of who is thanked
    "thanks",
    "ok thanks",
    "Thanks!",
    "thank you",
    "Thank you so much!!",
    "great, thank you",
    "Thanksss sooo much",
    "thx",
    "ty!",
    "Thanks for your help!",
    "I really appreciate it.",
    "That means a lot.",
    "Thank you, Claude!",
    "Thanks so much Mel",
    "Mel, thanks!",
    "Wow, Mel!",
    "That's wonderful, Caroline!",
    "Good luck, Nate!",
    "You're welcome!",
    # greetings and farewells
    "hi",
    "Hello!",
    "Hey there!",
    "Hi there Jon!",
    "Good morning!",
    "Good night!",
    "Bye!",
    "Bye Nate! Take care!",
    "See you later!",
    "Talk soon.",
    "Stay safe! Bye!",
    "Have a good one!",
    # reactions, laughter, hesitation
    "great",
    "Cool!",
    "Wow, that's awesome!",
    "Nice!",
    "Perfect.",
    "Awesome, keep it up!",
    "Congrats!",
    "Good luck!",
    "Can't wait!",
    "haha",
    "hahahaha",
    "lol",
    "LOLOL",
    "lmao",
    "hmm",
    "umm ok",
    "xD",
    # emoji, emoticons, punctuation, nothing
    "👍",
    "🙏❤️",
    "🎉🎉🎉",
    ":)",
    ":-D",
    "<3",
    "...",
    "?!",
    "",
    "   ",
    # other languages
    "merci",
    "merci beaucoup !",
    "d'accord, c'est parfait",
    "Oui, super",
    "danke",
    "Vielen Dank!",
    "Ja, klar",
    "¡Muchas gracias!",
    "sí, vale",
    "de nada",
    "jajaja",
    "grazie mille",
    "Va bene, ciao!",
    "obrigado!",
    "valeu, beleza",
    "kkkk",
    "bedankt",
    "спасибо большое",
    "Да, конечно",
    "хорошо",
    "ありがとうございます！",
    "はい、わかりました",
    "好的，谢谢！",
    "嗯嗯",
    "哈哈",
    "네 감사합니다",
    "ㅋㅋㅋ",
    # an imported transcript's turn, with its speaker label
    "Caroline: Thanks, Mel!",
    "Jolene:  I really appreciate it.",
    "Dr. Smith: Okay, see you.",
]

#: Short turns that do say something: kept.
SAYS_SOMETHING = [
    "I'm vegan",
    "call me Bob",
    "no nuts",
    "Tokyo",
    "Yes, Tokyo.",
    "42",
    "my flight is at 9",
    "ok, my flight is at 9",
    "Hi, I'm Bob",
    "Great, Paris it is",
    "Thanks! I'll catch you when I'm in Boston. Cheers!",
    "Thanks! Boston was great",
    "Sure, Bob.",
    "Thanks, I'll be in Paris next week",
    "I live in Tokyo.",
    "I adopted a beagle called Mochi",
    "Alice is allergic to peanuts",
    "I hate cilantro",
    "vegetarian",
    "No dairy please",
    "It's heavenly!",
    "Yes, in June!",
    "My favourite city: Tokyo",
    "Allergies: none",
    "Caroline: Yes, it was amazing! I went in June",
    "Caroline: I'm vegan",
    "Je suis végétarien",
    "Ich bin allergisch gegen Nüsse",
    "Soy vegano",
    "Sono celiaco",
    "Моя собака Шарик",
    "我是素食者",
    "私はベジタリアンです",
    "저는 채식주의자예요",
]


@pytest.mark.parametrize("text", SMALL_TALK)
def test_small_talk_is_not_worth_an_episode(text: str) -> None:
    assert is_small_talk(text)
    assert not worth_keeping(text)


@pytest.mark.parametrize("text", SAYS_SOMETHING)
def test_a_short_turn_that_says_something_is_kept(text: str) -> None:
    assert not is_small_talk(text)
    assert worth_keeping(text)


@pytest.mark.parametrize("text", ["Where do I live?", "What can't I eat? Any idea?", "Thanks! How are you?"])
def test_a_turn_of_only_questions_is_not_kept_either(text: str) -> None:
    assert not worth_keeping(text)


def test_the_words_that_say_something_are_what_is_kept_for() -> None:
    # A filler word in a turn that says something else does not drop it.
    assert worth_keeping("Thanks! My daughter's birthday is on 3 May.")
    assert worth_keeping("ok so I moved to Berlin")


def episodes(mem: memtap.Memory, entity: str = "alice") -> set[str]:
    return {f.text for f in mem.facts(entity_id=entity) if f.kind == "episode"}


CONVERSATION = [  # (user, assistant), one session
    ("I'm vegan", "Noted: no animal products in what I suggest."),
    ("ok thanks", "You're welcome!"),
    ("call me Bob", "Will do!"),
    ("👍", "Great!"),
    ("no nuts either", "Got it."),
    ("yes please", "Perfect."),
]
KEPT = {"I'm vegan", "Noted: no animal products in what I suggest.", "call me Bob", "no nuts either"}


def test_capture_stores_what_says_something_and_leaves_small_talk_out(mem):
    for said, answered in CONVERSATION:
        mem.capture(
            [Message("user", said)], [Message("assistant", answered)], entity_id="alice", session_id="s"
        )
    assert mem.flush()
    assert episodes(mem) == KEPT
    # Small talk is still history: the conversation is stored whole.
    assert len(mem.history("s", entity_id="alice")) == 2 * len(CONVERSATION)


def test_an_imported_transcript_with_speaker_labels(mem):
    turns = [
        ("Caroline: I started volunteering at the shelter", "Melanie: That's wonderful, Caroline!"),
        ("Caroline: Thanks, Mel!", "Melanie: Bye Caroline! Take care!"),
    ]
    for said, answered in turns:
        mem.capture(
            [Message("user", said)], [Message("assistant", answered)], entity_id="alice", session_id="t"
        )
    assert mem.flush()
    assert episodes(mem) == {"Caroline: I started volunteering at the shelter"}


class FailingPort:
    """An LLM port that is down: memorize keeps the turns as episodes instead."""

    def complete(self, prompt: str) -> str:
        raise RuntimeError("LLM down")


def test_memorize_falls_back_to_episodes_without_small_talk():
    mem = memtap.Memory(InMemoryStore(), entry_points=False, embedder=False, spool=False, llm=FailingPort())
    try:
        for said, answered in CONVERSATION:
            mem.capture([Message("user", said)], [Message("assistant", answered)], entity_id="alice")
        assert mem.flush()
        kept = episodes(mem)
        assert kept and kept <= KEPT  # what it keeps says something
        assert {"I'm vegan", "call me Bob", "no nuts either"} <= kept
    finally:
        mem.close()


def test_remember_stores_what_it_is_asked_to_even_small_talk(mem):
    fact = mem.remember("ok thanks", entity_id="alice")
    assert [f.id for f in mem.facts(entity_id="alice")] == [fact.id]
