"""Who may read and change memory through the UI: forgetting needs the form's CSRF token and
a request from the UI's own pages (Origin, Referer, Sec-Fetch-Site); a token, when set, is
needed by every request; without one, only loopback host names are answered."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

import memtap
from memtap.cli.main import main
from memtap_ui import create_app
from memtap_ui.guard import COOKIE, check_bind

ORIGIN = "http://127.0.0.1:8097"


@pytest.fixture
def client(mem: memtap.Memory) -> Iterator[TestClient]:
    with TestClient(create_app(mem), base_url=ORIGIN, follow_redirects=False) as c:
        yield c


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert found is not None
    return found.group(1)


def kyoto(mem: memtap.Memory) -> memtap.Fact:
    return next(f for f in mem.facts(entity_id="alice") if f.text == "Alice lives in Kyoto")


def test_forget_a_fact_through_the_form(client, mem):
    fact = kyoto(mem)
    csrf = csrf_of(client.get("/entities/alice").text)
    answer = client.post(
        "/entities/alice/forget",
        data={"csrf": csrf, "fact_id": fact.id},
        headers={"origin": ORIGIN, "sec-fetch-site": "same-origin"},
    )
    assert answer.status_code == 303
    assert answer.headers["location"] == "/entities/alice?forgotten=2"  # with the Osaka version it replaced
    texts = [f.text for f in mem.store.facts(entity_id="alice", include_superseded=True)]
    assert "Alice lives in Kyoto" not in texts and "Alice lives in Osaka" not in texts
    assert "Alice prefers green tea" in texts
    page = client.get(answer.headers["location"])
    assert "Forgotten: 2 fact(s)." in page.text and "Alice lives in Kyoto" not in page.text


def test_forget_an_entity_through_the_form(client, mem):
    csrf = csrf_of(client.get("/entities/bob").text)
    answer = client.post(
        "/entities/bob/forget", data={"csrf": csrf, "entity": "yes"}, headers={"origin": ORIGIN}
    )
    assert answer.status_code == 303 and answer.headers["location"] == "/?forgotten=bob"
    assert mem.facts(entity_id="bob") == [] and mem.sessions(entity_id="bob") == []
    assert mem.facts(entity_id="alice")
    assert client.get("/entities/bob").status_code == 404


def counts(mem: memtap.Memory) -> tuple[int, int]:
    return len(mem.store.facts(entity_id="alice", include_superseded=True)), len(
        mem.sessions(entity_id="bob")
    )


@pytest.mark.parametrize(
    ("headers", "form"),
    [
        pytest.param({"origin": ORIGIN}, {}, id="no-csrf"),
        pytest.param({"origin": ORIGIN}, {"csrf": "0" * 64}, id="wrong-csrf"),
        pytest.param({"origin": "http://evil.example"}, None, id="other-origin"),
        pytest.param({"origin": "null"}, None, id="null-origin"),
        pytest.param({"origin": "http://127.0.0.1:9999"}, None, id="other-port"),
        pytest.param({"origin": "https://127.0.0.1:8097"}, None, id="other-scheme"),
        pytest.param({"referer": "http://evil.example/page"}, None, id="other-referer"),
        pytest.param({"sec-fetch-site": "cross-site"}, None, id="cross-site"),
        pytest.param({"sec-fetch-site": "same-site", "origin": ORIGIN}, None, id="same-site"),
    ],
)
def test_a_forged_forget_deletes_nothing(client, mem, headers, form):
    csrf = csrf_of(client.get("/entities/alice").text)
    before = counts(mem)
    fact = kyoto(mem)
    data = {"csrf": csrf} if form is None else form  # None: a valid token from another page
    answer = client.post("/entities/alice/forget", data={**data, "fact_id": fact.id}, headers=headers)
    assert answer.status_code in (400, 403)
    answer = client.post("/entities/bob/forget", data={**data, "entity": "yes"}, headers=headers)
    assert answer.status_code in (400, 403)
    assert "Nothing was deleted" in answer.text or "nothing was deleted" in answer.text
    assert counts(mem) == before


def test_forget_by_get_is_not_a_route(client, mem):
    fact = kyoto(mem)
    csrf = csrf_of(client.get("/entities/alice").text)
    answer = client.get(f"/entities/alice/forget?csrf={csrf}&fact_id={fact.id}")
    assert answer.status_code in (404, 405)  # GET /entities/<id> with id "alice/forget": no such entity
    assert kyoto(mem) == fact


def test_without_a_token_only_loopback_host_names_are_answered(mem):
    app = create_app(mem, bound_host="127.0.0.1")
    for host in ("127.0.0.1:8097", "localhost:8097", "[::1]:8097", "ui.localhost"):
        with TestClient(app, base_url=f"http://{host}") as c:
            assert c.get("/").status_code == 200, host
    with TestClient(app, base_url="http://rebound.example:8097") as c:
        page = c.get("/")
        assert page.status_code == 403 and "alice" not in page.text
    allowed = create_app(mem, bound_host="127.0.0.1", allow_hosts=["devbox.lan"])
    with TestClient(allowed, base_url="http://devbox.lan:8097") as c:
        assert c.get("/").status_code == 200


def test_binding_beyond_loopback_needs_a_token():
    check_bind("127.0.0.1", None)
    check_bind("localhost", None)
    check_bind("0.0.0.0", "t")
    with pytest.raises(ValueError, match="--token"):
        check_bind("0.0.0.0", None)
    result = CliRunner().invoke(main, ["ui", "--host", "0.0.0.0", "--store", "memory://"])
    assert result.exit_code == 2
    assert "refusing to serve the memory browser on 0.0.0.0" in result.output and "--token" in result.output


TOKEN = "s3cret-token"


@pytest.fixture
def guarded(mem: memtap.Memory) -> Iterator[TestClient]:
    app = create_app(mem, token=TOKEN, bound_host="0.0.0.0")
    with TestClient(app, base_url="http://devbox.lan:8097", follow_redirects=False) as c:
        yield c


def test_a_token_is_needed_by_every_request(guarded):
    for path in ("/", "/entities/alice", "/entities/alice/recall?q=tea", "/static/style.css"):
        page = guarded.get(path)
        assert page.status_code == 401, path
        assert "alice" not in page.text.lower().replace("memtap ui", "")
    assert guarded.get("/", params={"token": "wrong"}).status_code == 401
    assert guarded.get("/", headers={"x-memtap-token": "wrong"}).status_code == 401
    assert guarded.get("/", headers={"x-memtap-token": TOKEN}).status_code == 200
    assert guarded.get("/", headers={"authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_token_login_sets_a_cookie_and_drops_the_token_from_the_address(guarded):
    login = guarded.get("/entities/alice", params={"token": TOKEN, "x": "1"})
    assert login.status_code == 303
    assert login.headers["location"] == "/entities/alice?x=1"
    cookie = login.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=") and TOKEN not in cookie
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    page = guarded.get("/entities/alice")  # the client keeps the cookie
    assert page.status_code == 200 and "Alice lives in Kyoto" in page.text
    odd = guarded.get("/entities/a b%2Fc", params={"token": TOKEN})
    assert odd.headers["location"] == "/entities/a%20b%2Fc"
    guarded.cookies.clear()
    guarded.cookies.set(COOKIE, "0" * 64)
    assert guarded.get("/entities/alice").status_code == 401


def test_with_a_token_forgetting_still_needs_csrf_and_the_same_origin(guarded, mem):
    guarded.get("/", params={"token": TOKEN})
    own = "http://devbox.lan:8097"
    csrf = csrf_of(guarded.get("/entities/alice").text)
    fact = kyoto(mem)
    assert (
        guarded.post("/entities/alice/forget", data={"fact_id": fact.id}, headers={"origin": own}).status_code
        == 403
    )
    assert (
        guarded.post(
            "/entities/alice/forget",
            data={"csrf": csrf, "fact_id": fact.id},
            headers={"origin": "http://evil.example"},
        ).status_code
        == 403
    )
    assert kyoto(mem) == fact
    answer = guarded.post(
        "/entities/alice/forget", data={"csrf": csrf, "fact_id": fact.id}, headers={"origin": own}
    )
    assert answer.status_code == 303
    assert all(f.id != fact.id for f in mem.facts(entity_id="alice"))
