"""Per-entity tokens (issue #14 item 4): ``memtap proxy --tokens FILE``.

A request may act only as entities matching its token's glob: anything else is a 403 before
anything is forwarded or read, ``mem:`` commands included; ``--token`` stays a token for
every entity. Tokens are compared in constant time and never logged or echoed.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from click.testing import CliRunner
from proxy_support import API_KEY, needs_anthropic

import memtap
from memtap.protocol.model import Message
from memtap.sdk.server import TokensFileError, load_tokens, parse_tokens
from memtap.testing.server import ScriptedModelServer
from memtap.testing.timing import wait_for
from memtap_proxy import Proxy, ProxyConfig, ProxyThread
from memtap_proxy.config import check_bind

ACME = "tok-acme-5d1c0a9e7f"
BOT = "tok-acmebot-81be44"
ALICE = "tok-alice-0f3a99c2"
ADMIN = "tok-admin-c0ffee1234"
TOKENS = f"""\
# team proxy tokens
{ACME}   acme:*

{BOT}    acme:*   acme:bot    # the bot acts as acme:bot unless it says otherwise
{ALICE}  alice
"""
CHAT = "/v1/chat/completions"


def tokens_file(tmp_path: Path, text: str = TOKENS) -> Path:
    path = tmp_path / "tokens"
    path.write_text(text)
    path.chmod(0o600)
    return path


@pytest.fixture
def team(tmp_path: Path, upstream: ScriptedModelServer, mem: memtap.Memory) -> Iterator[ProxyThread]:
    config = ProxyConfig(
        openai_upstream=upstream.base_url,
        anthropic_upstream=upstream.base_url,
        token=ADMIN,
        tokens=load_tokens(tokens_file(tmp_path)),
        session_id="default",  # one running session: a client's earlier turns come back
    )
    with ProxyThread(Proxy(config, mem)) as thread:
        yield thread


def client(proxy: ProxyThread, token: str | None, entity: str | None = None) -> openai.OpenAI:
    headers = {}
    if token is not None:
        headers["x-memtap-token"] = token
    if entity is not None:
        headers["x-memtap-entity"] = entity
    return openai.OpenAI(base_url=proxy.url + "/v1", api_key=API_KEY, max_retries=0, default_headers=headers)


def say(oai: openai.OpenAI, text: str, *, stream: bool = False) -> str:
    messages = [{"role": "user", "content": text}]
    if stream:
        chunks = oai.chat.completions.create(model="m", messages=messages, stream=True)  # type: ignore[arg-type]
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    r = oai.chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]
    return r.choices[0].message.content or ""


def wait_stored(mem: memtap.Memory, entity: str, text: str, limit: float = 10.0) -> None:
    """Wait until ``text`` is stored for ``entity`` (the proxy captures a call after its
    answer is written: the client may read the answer first)."""
    wait_for(lambda: text in stored_texts(mem, entity), limit, what=f"{text!r} stored for {entity!r}")


def stored_texts(mem: memtap.Memory, entity: str) -> str:
    """Every message and fact stored for ``entity``, as one text."""
    messages = [
        str(m.content)
        for s in mem.sessions(entity_id=entity)
        for m in mem.history(s.session_id, entity_id=entity)
    ]
    return "\n".join(messages + [f.text for f in mem.facts(entity_id=entity)])


# -- the reported hole: one token, every entity -----------------------------------------------


def test_a_bound_token_cannot_read_or_delete_another_entitys_memory(team, upstream, mem) -> None:
    mem.remember("victim's bank PIN hint: the cat's birthday", entity_id="victim")
    mem.capture(
        [Message(role="user", content="victim private turn")],
        [Message(role="assistant", content="noted")],
        entity_id="victim",
        session_id="default",
    )
    before = stored_texts(mem, "victim")
    assert "PIN hint" in before and "victim private turn" in before
    intruder = client(team, ACME, entity="victim")
    for text in ("tell me everything", "mem:recall PIN", "mem:status", "mem:forget --yes"):
        with pytest.raises(openai.PermissionDeniedError, match="may not act as entity 'victim'"):
            say(intruder, text)
    with pytest.raises(openai.PermissionDeniedError):
        say(intruder, "stream it", stream=True)
    assert upstream.requests == []  # nothing forwarded (so no victim history went out)
    assert stored_texts(mem, "victim") == before
    assert team.proxy.stats.commands == 0
    # passed-through routes are refused too, before the body is read
    r = httpx.get(team.url + "/v1/models", headers={"x-memtap-token": ACME, "x-memtap-entity": "victim"})
    assert r.status_code == 403 and upstream.requests == []


def test_a_bound_token_acts_within_its_glob(team, upstream, mem) -> None:
    mem.remember("acme ships on Fridays", entity_id="acme:alice")
    mem.remember("victim secret fact", entity_id="victim")
    acme = client(team, ACME, entity="acme:alice")
    say(acme, "remember: the release is blue")
    say(acme, "when do we ship?", stream=True)
    sent = upstream.requests[-1].body.decode()
    assert "the release is blue" in sent  # its own history comes back
    assert "victim" not in sent
    wait_stored(mem, "acme:alice", "the release is blue")
    assert "release" not in stored_texts(mem, "victim")
    recalled = say(acme, "mem:recall ship")
    assert "Fridays" in recalled and "victim" not in recalled


def test_an_all_entities_token_still_acts_as_anyone(team, mem) -> None:
    mem.remember("victim secret fact", entity_id="victim")
    assert "victim secret fact" in say(client(team, ADMIN, entity="victim"), "mem:recall secret")
    status = say(client(team, ADMIN, entity="victim"), "mem:status")
    assert "store memory://" in status and "recall since start" in status


def test_missing_or_unknown_tokens_get_401(team, upstream) -> None:
    for token in (None, "", "tok-acme", ACME + "x", ACME[:-1], ACME.upper()):
        with pytest.raises(openai.AuthenticationError, match="x-memtap-token"):
            say(client(team, token), "hi")
    assert upstream.requests == []


# -- which entity a request without x-memtap-entity acts as ------------------------------------


def test_without_an_entity_header(team, upstream, mem) -> None:
    # a plain-name glob acts as that name
    say(client(team, ALICE), "alice here")
    wait_stored(mem, "alice", "alice here")
    # a line's default entity
    say(client(team, BOT), "bot here")
    wait_stored(mem, "acme:bot", "bot here")
    # a glob without a default: the proxy's --entity (`default`), which acme:* does not match
    with pytest.raises(openai.PermissionDeniedError, match="x-memtap-entity"):
        say(client(team, ACME), "who am I?")
    assert [r.json["messages"][-1]["content"] for r in upstream.requests] == ["alice here", "bot here"]
    assert stored_texts(mem, "default") == ""
    # the bot naming another acme entity is allowed; naming a foreign one is not
    say(client(team, BOT, entity="acme:carol"), "carol here")
    wait_stored(mem, "acme:carol", "carol here")
    with pytest.raises(openai.PermissionDeniedError):
        say(client(team, ALICE, entity="alice2"), "hi")


def test_a_bound_tokens_status_shows_nothing_of_the_others(team, mem) -> None:
    mem.remember("victim secret fact", entity_id="victim")
    status = say(client(team, ALICE), "mem:status")
    assert "entity 'alice'" in status
    assert "memory://" not in status and "recall since start" not in status


@needs_anthropic
def test_anthropic_requests_obey_the_same_rule(team, upstream, mem) -> None:
    import anthropic

    def claude(token: str, entity: str) -> anthropic.Anthropic:
        return anthropic.Anthropic(
            base_url=team.url,
            api_key=API_KEY,
            max_retries=0,
            default_headers={"x-memtap-token": token, "x-memtap-entity": entity},
        )

    msg = [{"role": "user", "content": "mem:forget --yes"}]
    mem.remember("victim secret fact", entity_id="victim")
    with pytest.raises(anthropic.PermissionDeniedError, match="may not act as entity"):
        claude(ACME, "victim").messages.create(model="c", max_tokens=5, messages=msg)  # type: ignore[arg-type]
    assert mem.facts(entity_id="victim")
    out = claude(ACME, "acme:x").messages.create(model="c", max_tokens=5, messages=msg)  # type: ignore[arg-type]
    assert "deleted" in out.content[0].text  # type: ignore[union-attr]
    assert upstream.requests == []


# -- constant time, never shown -----------------------------------------------------------------


@pytest.mark.parametrize("presented", [ACME, ALICE, ADMIN, "nope", ""])
def test_every_token_is_compared_whatever_matches(team, monkeypatch, presented) -> None:
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)  # the module memtap.tokens calls through
    table = team.proxy.guard.tokens
    grant = table.match(presented)
    assert (grant is not None) == (presented in (ACME, ALICE, ADMIN))
    assert len(compared) == len(table) == 4  # no early exit, whichever token matched
    assert all(len(a) == len(b) == 32 for a, b in compared)  # digests: lengths say nothing


def test_tokens_are_never_logged_nor_kept_in_clear(team, caplog, tmp_path) -> None:
    with caplog.at_level(logging.DEBUG):
        for token in (ACME, ALICE, ADMIN, "tok-guess-123"):
            httpx.post(
                team.url + CHAT,
                json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                headers={"x-memtap-token": token, "x-memtap-entity": "victim"},
            )
        for bad in (f"{ACME}\n", f"{ACME} a b c\n", f"{ACME} a:*\n{ACME} b:*\n"):
            with pytest.raises(TokensFileError):
                parse_tokens(bad)
    text = caplog.text + repr(team.proxy.config) + repr(team.proxy.guard.tokens.rules)
    for token in (ACME, ALICE, ADMIN, BOT):
        assert token not in text


# -- the tokens file -------------------------------------------------------------------------


def test_tokens_file_format() -> None:
    rules = parse_tokens(TOKENS)
    assert [(r.line, r.grant.glob, r.grant.default_entity) for r in rules] == [
        (2, "acme:*", None),
        (4, "acme:*", "acme:bot"),
        (5, "alice", "alice"),
    ]
    acme = rules[0].grant
    assert acme.allows("acme:x") and acme.allows("acme:") and acme.allows("acme:a:b")
    assert not acme.allows("acme") and not acme.allows("ACME:x") and not acme.allows("xacme:y")
    assert not rules[2].grant.allows("alice2") and not rules[2].grant.allows("Alice")
    assert parse_tokens("t-1 team-[ab]?\n")[0].grant.allows("team-a1")


MALFORMED = {
    "one field": ("# x\n{tok}\n", "line 2: expected `<token> <entity-glob> [<default-entity>]`, found 1"),
    "four fields": ("{tok} a b c\n", "line 1: expected"),
    "non-ASCII token": ("{tok}é a\n", "line 1: the token must be printable ASCII"),
    "default outside glob": (
        "\n\n{tok} acme:* bob\n",
        "line 3: the default entity 'bob' does not match 'acme:*'",
    ),
    "same token twice": ("{tok} a\nother-token b\n{tok} c\n", "line 3: the same token as on line 1"),
    "empty": ("# nothing here\n\n", "no tokens"),
}


@pytest.mark.parametrize(("text", "error"), MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_tokens_files_name_the_line_never_the_token(text, error) -> None:
    with pytest.raises(TokensFileError) as caught:
        parse_tokens(text.format(tok=ACME), "tokens file t")
    assert error in str(caught.value)
    assert ACME not in str(caught.value)


def test_an_unreadable_or_shared_tokens_file(tmp_path, caplog) -> None:
    with pytest.raises(TokensFileError, match="cannot read the tokens file"):
        load_tokens(tmp_path / "missing")
    (tmp_path / "binary").write_bytes(ACME.encode() + b"\xff\xfe a\n")
    with pytest.raises(TokensFileError) as caught:
        load_tokens(tmp_path / "binary")
    assert ACME not in str(caught.value)
    shared = tokens_file(tmp_path)
    shared.chmod(0o644)
    with caplog.at_level(logging.WARNING):
        load_tokens(shared)
    assert "can be read by other users: chmod 600" in caplog.text


def test_cli_reports_a_bad_tokens_file_and_binds_with_tokens(tmp_path) -> None:
    from memtap.cli.main import main

    bad = tokens_file(tmp_path, f"{ACME} a:* b\n")
    result = CliRunner().invoke(main, ["proxy", "--tokens", str(bad), "--store", "memory://"])
    assert result.exit_code == 2
    assert "line 1: the default entity 'b' does not match 'a:*'" in result.output
    assert ACME not in result.output
    check_bind(ProxyConfig(host="0.0.0.0", tokens=parse_tokens(TOKENS)))
    env = {"MEMTAP_PROXY_TOKENS": str(bad)}
    result = CliRunner().invoke(main, ["proxy", "--store", "memory://"], env=env)
    assert result.exit_code == 2 and "line 1" in result.output


def test_a_bound_token_is_required_even_on_loopback(tmp_path, upstream, mem) -> None:
    config = ProxyConfig(openai_upstream=upstream.base_url, tokens=parse_tokens(TOKENS))
    with ProxyThread(Proxy(config, mem)) as thread:
        r = httpx.post(thread.url + CHAT, json={"model": "m", "messages": []})
        assert r.status_code == 401
    assert upstream.requests == []


def test_a_tokens_file_error_is_a_memtap_error():
    assert issubclass(TokensFileError, memtap.MemtapError)
    assert issubclass(TokensFileError, ValueError)
