"""What a conversation through the proxy becomes in memory (issue 17): both sides as
episodes, each indexed with the turns around it in its session."""

from __future__ import annotations

import openai
from proxy_support import API_KEY

from memtap.testing.server import Reply
from memtap_proxy import ProxyThread


def test_a_conversation_through_the_proxy_is_remembered_with_its_neighbours(
    proxy: ProxyThread, upstream, mem
):
    oai = openai.OpenAI(base_url=proxy.url + "/v1", api_key=API_KEY, max_retries=0)
    upstream.script(
        Reply(text="Lisbon in June sounds wonderful, enjoy the trams."),
        Reply(text="I recommend The Hobbit by Tolkien, light enough for a flight."),
    )
    history = [{"role": "user", "content": "We booked a trip to Lisbon for June with my sister"}]
    first = oai.chat.completions.create(model="m", messages=history)
    history += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "Any book for the flight?"},
    ]
    oai.chat.completions.create(model="m", messages=history)
    assert mem.flush(10)
    episodes = {f.text: f for f in mem.facts(entity_id="default")}
    answer = episodes["I recommend The Hobbit by Tolkien, light enough for a flight."]
    assert answer.metadata["role"] == "assistant"
    assert "Any book for the flight?" in answer.metadata["context"] and "Lisbon" in answer.metadata["context"]
    # The first reply's context holds the question that followed it, in the next call.
    trams = episodes["Lisbon in June sounds wonderful, enjoy the trams."]
    assert "Any book for the flight?" in trams.metadata["context"]
    found = mem.recall("which book did you recommend?", entity_id="default", k=3)
    assert found[0].fact.id == answer.id


def test_small_talk_through_the_proxy_is_no_episode(proxy: ProxyThread, upstream, mem):
    """Issue 20: what the proxy captures makes episodes by the same rule as in-process."""
    oai = openai.OpenAI(base_url=proxy.url + "/v1", api_key=API_KEY, max_retries=0)
    turns = [
        ("I'm vegan", "Noted: no animal products."),
        ("ok thanks", "You're welcome!"),
        ("🙏", "Anytime!"),
    ]
    upstream.script(*(Reply(text=answer) for _, answer in turns))
    for said, _ in turns:
        oai.chat.completions.create(model="m", messages=[{"role": "user", "content": said}])
    assert mem.flush(10)
    episodes = {f.text for f in mem.facts(entity_id="default") if f.kind == "episode"}
    assert episodes == {"I'm vegan", "Noted: no animal products."}
