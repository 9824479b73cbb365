"""Forgetting a fact in the UI offers the facts and episodes that repeat it (issue 38: the
model's echo "You said: My order number is 1234." stayed the top recall after the fact was
forgotten), each with its own forget button; unrelated facts are not offered."""

from __future__ import annotations

import re
from html import unescape

from starlette.testclient import TestClient

import memtap
from memtap import Fact
from memtap_ui import create_app

ORIGIN = "http://127.0.0.1:8097"


def test_forgetting_a_fact_offers_what_repeats_it(mem: memtap.Memory) -> None:
    fact = mem.remember("My order number is 1234", entity_id="carol")
    echoes = [
        Fact(
            entity_id="carol",
            text="You said: My order number is 1234.",
            kind="episode",
            metadata={"role": "assistant"},
        ),
        Fact(entity_id="carol", text="my order number is 1234, please check it", kind="episode"),
    ]
    other = Fact(entity_id="carol", text="Carol's favourite colour is teal")
    mem.store.add_facts([*echoes, other])
    mem.longterm.forget("carol")  # the index sees the facts written behind its back
    with TestClient(create_app(mem), base_url=ORIGIN) as client:
        page = client.get("/entities/carol")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
        done = client.post("/entities/carol/forget", data={"fact_id": fact.id, "csrf": csrf})
        assert done.status_code == 200  # the redirect followed
        text = unescape(done.text)
        offered = re.search(r'<section class="repeats">(.*?)</section>', done.text, re.S)
        assert offered is not None, text[:2000]
        block = offered.group(1)
        for echo in echoes:
            assert f'value="{echo.id}"' in block
        assert other.id not in block and fact.id not in block
        assert "repeat" in text
        # The offer is the page's own forms: forgetting an echo from it works.
        again = client.post("/entities/carol/forget", data={"fact_id": echoes[0].id, "csrf": csrf})
        assert again.status_code == 200
    assert {f.id for f in mem.facts(entity_id="carol")} == {echoes[1].id, other.id}
