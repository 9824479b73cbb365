"""`memtap import-transcript`: a JSONL transcript of timestamped messages becomes an
entity's memory through Memory.capture(at=) on a DuckDB file: exchanges at their times,
episodes with their dates, idempotent re-imports, and recall (through the real openai SDK)
that injects the imported turns with their dates."""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

import openai
import pytest
from click.testing import CliRunner, Result

import memtap
from memtap.cli.main import main
from memtap.cli.transcript import read_transcript, transcript_session
from memtap.testing.server import ScriptedModelServer

UTC = _dt.timezone.utc
MAY_8 = _dt.datetime(2023, 5, 8, 13, 56, tzinfo=UTC)

TRANSCRIPT = [
    {"role": "user", "content": "I adopted a beagle called Mochi last week", "at": "2023-05-08T13:56:00Z"},
    {"role": "assistant", "content": "Congratulations, Mochi is a lovely name!", "timestamp": 1683554170},
    {
        "role": "user",
        "content": [{"type": "text", "text": "She loves the park near the river"}],
        "at": "2023-05-08T14:00:00+00:00",
    },
    {"role": "assistant", "content": "Parks by the river are great for beagles", "at": "2023-05-08T14:00:05"},
    {
        "role": "user",
        "content": "I start my new job at the bakery in June",
        "at": "2023-05-09T08:00:00Z",
        "session_id": "second",
    },
    {"role": "assistant", "content": "Good luck at the bakery", "at": 1683619205000, "session_id": "second"},
]


def write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


# Own store: a DuckDB URL (the CLI under test opens it).
@pytest.fixture
def store(tmp_path: Path) -> str:
    return f"duckdb:///{tmp_path / 'memory.duckdb'}"


def test_a_transcript_becomes_memory_at_its_times(tmp_path: Path, store: str) -> None:
    file = write(tmp_path / "chat.jsonl", TRANSCRIPT)
    result = run("import-transcript", str(file), "--entity", "alice", "--store", store)
    assert result.exit_code == 0, result.output
    assert "imported 3 new turn(s) of 'alice' in 2 session(s)" in result.output
    with memtap.Memory(store, spool=False, embedder=False) as mem:
        exchanges = list(mem.store.exchanges(entity_id="alice"))
        imported = exchanges[0].attribution.session_id
        assert imported == transcript_session(read_transcript([json.dumps(TRANSCRIPT[0])])[0])
        assert [(e.attribution.session_id, e.started_at) for e in exchanges] == [
            (imported, MAY_8),  # --session not given: named after the first message
            (imported, MAY_8 + _dt.timedelta(minutes=4)),
            ("second", _dt.datetime(2023, 5, 9, 8, tzinfo=UTC)),
        ]
        assert [str(m) for m in mem.history(imported, entity_id="alice")] == [
            "user: I adopted a beagle called Mochi last week",
            "assistant: Congratulations, Mochi is a lovely name!",
            "user: She loves the park near the river",
            "assistant: Parks by the river are great for beagles",
        ]
        # Episodes of both sides, at the time they were said, with their neighbours.
        episodes = {f.text: f for f in mem.facts(entity_id="alice")}
        mochi = episodes["I adopted a beagle called Mochi last week"]
        assert mochi.created_at == MAY_8 and "park near the river" in mochi.metadata["context"]
        assert episodes["Parks by the river are great for beagles"].metadata["role"] == "assistant"
        # Recall uses those times: "last week", said on 8 May 2023, was 1-7 May.
        hits = mem.recall("what happened on 3 May?", entity_id="alice", k=1, now=MAY_8)
        assert hits[0].fact.id == mochi.id


def test_importing_again_adds_nothing_and_says_so(tmp_path: Path, store: str) -> None:
    file = write(tmp_path / "chat.jsonl", TRANSCRIPT[:4])
    assert (
        run(
            "import-transcript", str(file), "--entity", "alice", "--session", "s1", "--store", store
        ).exit_code
        == 0
    )
    with memtap.Memory(store, spool=False, embedder=False) as mem:
        before = mem.stats()
    again = run("import-transcript", str(file), "--entity", "alice", "--session", "s1", "--store", store)
    assert again.exit_code == 0, again.output
    assert "imported 0 new turn(s)" in again.output and "2 turn(s) were already present" in again.output
    # The transcript grew: only its new turns are imported.
    write(file, TRANSCRIPT[:4] + [{**r, "session_id": None} for r in TRANSCRIPT[4:]])
    grown = run("import-transcript", str(file), "--entity", "alice", "--session", "s1", "--store", store)
    assert "imported 1 new turn(s)" in grown.output and "2 turn(s) were already present" in grown.output
    with memtap.Memory(store, spool=False, embedder=False) as mem:
        after = mem.stats()
        assert after["exchanges"] == before["exchanges"] + 1
        assert after["facts"] == before["facts"] + 2
        assert len(mem.history("s1", entity_id="alice")) == 6


@pytest.mark.parametrize("copy", ["renamed", "copied elsewhere", "grown"])
def test_a_transcript_is_known_by_its_content_not_its_file_name(
    tmp_path: Path, store: str, copy: str
) -> None:
    # Before: the session came from the file name, and a renamed copy imported every turn again.
    first = write(tmp_path / "chat.jsonl", TRANSCRIPT)
    assert (
        "imported 3 new turn(s)"
        in run("import-transcript", str(first), "--entity", "alice", "--store", store).output
    )
    (tmp_path / "elsewhere").mkdir()
    target = {
        "renamed": tmp_path / "chat-2023-05.jsonl",
        "copied elsewhere": tmp_path / "elsewhere" / "chat.jsonl",
    }
    later = {"role": "user", "content": "Mochi learned to sit", "at": "2023-05-10T09:00:00Z"}
    if copy == "grown":
        again = write(tmp_path / "chat (1).jsonl", [*TRANSCRIPT, later])
    else:
        again = write(target[copy], TRANSCRIPT)
    result = run("import-transcript", str(again), "--entity", "alice", "--store", store)
    assert result.exit_code == 0, result.output
    new = 1 if copy == "grown" else 0
    assert (
        f"imported {new} new turn(s)" in result.output and "3 turn(s) were already present" in result.output
    )
    with memtap.Memory(store, spool=False, embedder=False) as mem:
        assert mem.store.stats()["exchanges"] == 3 + new


def test_a_transcript_imported_under_its_file_name_before_is_not_imported_again(
    tmp_path: Path, store: str
) -> None:
    file = write(tmp_path / "chat.jsonl", TRANSCRIPT)
    # What an earlier version did: the session named after the file.
    run("import-transcript", str(file), "--entity", "alice", "--session", "import-chat", "--store", store)
    result = run("import-transcript", str(file), "--entity", "alice", "--store", store)
    assert "imported 0 new turn(s)" in result.output and "3 turn(s) were already present" in result.output


def test_a_transcript_on_stdin_is_read_twice_from_a_temporary_copy(tmp_path: Path, store: str) -> None:
    text = "".join(json.dumps(r) + "\n" for r in TRANSCRIPT)
    for expected in ("imported 3 new turn(s)", "3 turn(s) were already present"):
        result = CliRunner().invoke(
            main, ["import-transcript", "-", "--entity", "alice", "--store", store], input=text
        )
        assert result.exit_code == 0 and expected in result.output, result.output


def test_a_secret_in_a_transcript_is_not_stored_and_the_import_stays_idempotent(
    tmp_path: Path, store: str
) -> None:
    secret = "sk-proj-" + "A1b2C3d4E5f6G7h8J9k0" * 3
    file = write(tmp_path / "chat.jsonl", [{"role": "user", "content": f"my key is {secret}", "at": 0}])
    for expected in ("imported 1 new turn(s)", "1 turn(s) were already present"):
        result = run("import-transcript", str(file), "--entity", "alice", "--store", store)
        assert expected in result.output, result.output
    with memtap.Memory(store, spool=False, embedder=False) as mem:
        (exchange,) = mem.store.exchanges(entity_id="alice")
        assert secret not in exchange.input[0].content


def test_bad_lines_are_listed_one_per_line_and_nothing_is_imported(tmp_path: Path, store: str) -> None:
    file = tmp_path / "bad.jsonl"
    file.write_text(
        json.dumps(TRANSCRIPT[0]) + "\n"
        + '{"role": "narrator", "content": "x", "at": 0}\n'
        + "not json\n"
        + json.dumps({"role": "user", "content": "no time"}) + "\n",
        encoding="utf-8",
    )  # fmt: skip
    result = CliRunner().invoke(main, ["import-transcript", str(file), "--entity", "alice", "--store", store])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output.splitlines() == [
        "bad.jsonl:2: role 'narrator' is not one of system, user, assistant, tool",
        "bad.jsonl:3: not JSON (Expecting value: line 1 column 1 (char 0))",
        "bad.jsonl:4: no time: give 'at' or 'timestamp' (ISO 8601, or seconds since 1970)",
        "Error: bad.jsonl: 3 line(s) cannot be read; nothing was imported",
    ]
    assert not (tmp_path / "memory.duckdb").exists()  # refused before the store was opened


def test_memtap_import_of_an_export_still_works(tmp_path: Path, store: str) -> None:
    """The export format's own `memtap import` is a different command, untouched."""
    write(tmp_path / "chat.jsonl", TRANSCRIPT)
    run("import-transcript", str(tmp_path / "chat.jsonl"), "--entity", "alice", "--store", store)
    exported = tmp_path / "export.jsonl"
    assert run("export", "--store", store, "-o", str(exported)).exit_code == 0
    other = f"duckdb:///{tmp_path / 'other.duckdb'}"
    result = run("import", str(exported), "--store", other)
    assert "imported 3 new exchange(s)" in result.output, result.output


def test_imported_turns_are_injected_with_their_dates(tmp_path: Path, store: str) -> None:
    """After an import, a registered client's call about that time gets the imported turn
    in its memory block, dated, with what "yesterday" meant (on the wire)."""
    now = memtap.protocol.model.utcnow()
    two_days_ago = now - _dt.timedelta(days=2)
    records = [
        {
            "role": "user",
            "content": "We went to the pottery workshop yesterday",
            "at": two_days_ago.isoformat(),
        },
        {"role": "assistant", "content": "Pottery sounds like fun", "at": two_days_ago.isoformat()},
    ]
    file = write(tmp_path / "chat.jsonl", records)
    assert run("import-transcript", str(file), "--entity", "alice", "--store", store).exit_code == 0
    with ScriptedModelServer() as server, memtap.Memory(store, spool=False, embedder=False) as mem:
        client = mem.register(
            openai.OpenAI(base_url=server.openai_base_url, api_key="sk-test", max_retries=0)
        )
        question = "what did we do three days ago?"
        with mem.scope(entity_id="alice", session_id="today"):
            for _ in range(50):  # the entity's index loads in the background on the first call
                client.chat.completions.create(model="m", messages=[{"role": "user", "content": question}])
                sent = json.dumps(server.last_json())
                if "pottery" in sent:
                    break
        day = two_days_ago.date()
        line = (
            f"- [{day.isoformat()}] the user said: We went to the pottery workshop yesterday "
            f"(yesterday = {(day - _dt.timedelta(days=1)).isoformat()})"
        )
        assert any(line in str(m["content"]) for m in json.loads(sent)["messages"]), sent
