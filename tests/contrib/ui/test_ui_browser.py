"""The memory browser in real headless Chromium (Debian's `chromium`, driven by Playwright;
no browser is downloaded): every page renders with its content, hostile text stays text,
forgetting works through the form, and a form posted from another origin deletes nothing.
Screenshots of the main pages are saved (into $MEMTAP_UI_SCREENSHOTS, e.g. docs/images).

Run by `nox -s ui`, which installs Chromium when it is missing."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from ui_support import HOSTILE, fill

import memtap
import memtap_ui

pytestmark = pytest.mark.browser
playwright_api = pytest.importorskip("playwright.sync_api", reason="the browser tests need playwright")

#: Where the screenshots go (default: the test's temporary folder).
SCREENSHOTS_ENV = "MEMTAP_UI_SCREENSHOTS"


def chromium_path() -> str:
    path = os.environ.get("MEMTAP_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail("no chromium: install Debian's package (`apt-get install chromium`), or run `nox -s ui`")
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with playwright_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=chromium_path(), headless=True, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[memtap.Memory, str]]:
    """The UI served by uvicorn over a store filled with the default embedder (score parts
    with a vector part, as users see them)."""
    path = tmp_path_factory.mktemp("ui-browser") / "memtap.duckdb"
    fill(f"duckdb:///{path}", embedder=None)
    mem = memtap.Memory(f"duckdb:///{path}", spool=False)
    server = memtap_ui.start(mem, port=0)
    yield mem, server.url.rstrip("/")
    server.stop()
    mem.close()


@pytest.fixture
def page(browser: object) -> Iterator[object]:
    context = browser.new_context(viewport={"width": 1200, "height": 360})  # type: ignore[attr-defined]
    tab = context.new_page()
    dialogs: list[str] = []
    tab.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    yield tab
    assert dialogs == [], "a stored text ran as script"
    assert tab.title() != "pwned"
    context.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = Path(os.environ.get(SCREENSHOTS_ENV) or tmp_path_factory.mktemp("screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def shoot(page: object, shots: Path, name: str) -> None:
    target = shots / f"ui-{name}.png"
    page.screenshot(path=str(target), full_page=True)  # type: ignore[attr-defined]
    assert target.stat().st_size > 5_000


def test_every_page_renders_in_chromium(page, live, shots):
    mem, url = live
    page.goto(f"{url}/")
    assert page.locator("h1").inner_text() == "Entities"
    assert page.locator("table.entities a").all_inner_texts() == ["alice", "bob"]
    # the stylesheet is served and applied (nothing comes from elsewhere)
    assert page.eval_on_selector("header", "e => getComputedStyle(e).display") == "flex"
    shoot(page, shots, "entities")

    page.click("text=alice")
    assert page.url == f"{url}/entities/alice"
    assert page.locator("table.facts .text", has_text="Alice lives in Kyoto").count() == 1
    assert HOSTILE in page.locator("table.facts").inner_text()
    page.click("text=replaced 1 earlier version(s)")
    assert page.locator(".history .old").first.inner_text() == "Alice lives in Osaka"
    shoot(page, shots, "entity")

    page.click("text=tuesday")
    assert page.locator("h1").inner_text() == "Session tuesday"
    assert "What should I feed Miso, my beagle?" in page.locator("main").inner_text()
    assert "2 recalled fact(s)" in page.locator(".injected").inner_text()
    page.goto(f"{url}/sessions/monday?entity=alice")
    assert HOSTILE in page.locator("main").inner_text()
    shoot(page, shots, "session")

    page.goto(f"{url}/sessions/tuesday?entity=alice")
    page.click("text=call 1")
    assert page.locator("h3").first.inner_text().startswith("Recalled facts: 2 injected")
    exchange_id = page.url.rsplit("/", 1)[1]
    explanation = mem.explain(exchange_id)
    (block,) = explanation.blocks
    shown = page.locator("tr.explained-fact").evaluate_all("rows => rows.map(r => r.dataset.factId)")
    assert shown == [f.fact_id for f in (*block.facts, *block.left_out)]
    assert page.locator("tr.explained-fact td.score").first.inner_text() == f"{block.facts[0].score:.3f}"
    assert "vector" in page.locator("table.explained thead").first.inner_text()
    shoot(page, shots, "call")

    # The entity's index loaded first: the page ranks a cold entity's facts only once it is
    # (it says "still loading" rather than wait past its deadline).
    expected = mem.recall("what dog do I have?", entity_id="alice", k=10)
    assert expected
    page.goto(f"{url}/entities/alice")
    page.fill("form.recall input[name=q]", "what dog do I have?")  # not the search box
    page.click("text=Rank facts")
    assert "/entities/alice/recall?q=" in page.url
    scores = page.locator("table.ranked td.score").all_inner_texts()
    texts = page.locator("table.ranked td.text").all_inner_texts()
    assert list(zip(scores, texts)) == [(f"{s.score:.3f}", s.text) for s in expected]
    shoot(page, shots, "recall")


class AttackerPage(BaseHTTPRequestHandler):
    """A page on another origin that posts a forget form to the UI as soon as it loads
    (with a valid CSRF token: the worst case)."""

    html = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(self.html)))
        self.end_headers()
        self.wfile.write(self.html)

    def log_message(self, *args: object) -> None:
        pass


def test_a_form_posted_from_another_origin_deletes_nothing_and_the_ui_form_works(page, live):
    mem, url = live
    fact = next(f for f in mem.facts(entity_id="alice") if f.text == "Alice prefers green tea")
    page.goto(f"{url}/entities/alice")
    csrf = page.locator("input[name=csrf]").first.get_attribute("value")
    AttackerPage.html = (
        f'<form id=f method=post action="{url}/entities/alice/forget">'
        f'<input name=csrf value="{csrf}"><input name=fact_id value="{fact.id}"></form>'
        "<script>document.getElementById('f').submit()</script>"
    ).encode()
    attacker = ThreadingHTTPServer(("127.0.0.1", 0), AttackerPage)
    threading.Thread(target=attacker.serve_forever, daemon=True).start()
    try:
        with page.expect_response(f"{url}/entities/alice/forget") as answer:
            page.goto(f"http://localhost:{attacker.server_address[1]}/")
        assert answer.value.status == 403
        assert "nothing was deleted" in page.locator("body").inner_text().lower()
    finally:
        attacker.shutdown()
    assert any(f.id == fact.id for f in mem.facts(entity_id="alice"))

    page.goto(f"{url}/entities/alice")
    row = page.locator(f"#fact-{fact.id}")
    row.locator("button", has_text="forget").click()
    page.wait_for_url(f"{url}/entities/alice?forgotten=1")
    assert page.locator(".notice").inner_text() == "Forgotten: 1 fact(s)."
    assert page.locator(f"#fact-{fact.id}").count() == 0
    assert all(f.id != fact.id for f in mem.facts(entity_id="alice"))
