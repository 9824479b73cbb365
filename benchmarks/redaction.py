"""Cost of secret redaction: the scanner alone, and the journal on a real request path.

1. ``redact_text`` on 70 KB texts, in µs per KB: ordinary agent text (an agent's system
   prompt with words such as "task-notification" and "risk-first", code, tool JSON), text
   dense with candidates (every line an assignment, a hyphenated id or a URL) and text with
   a fake credential every 200 characters. "cold" scans every time (cache cleared), "warm"
   is the same text again (the cache: an agent's system prompt comes back on every call).
   Next to it, in the same run, the scanner before issue #15: one regex per format (``\\b``
   first) over the text, after a marker pre-check.
2. The journal on the request path: a registered openai client against the local scripted
   server (in a process of its own, as a real upstream), a 70 KB system prompt plus one
   user message, a new session every call, the durability spool on and off, interleaved
   with a bare client (house style of ``benchmarks/overhead.py``). ``journal added`` =
   spool on minus spool off.

    python benchmarks/redaction.py [--calls 400] [--json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai

import memtap
from memtap import redact
from memtap.testing.secrets import ORDINARY_TEXTS, SECRETS
from memtap.testing.server import ScriptedModelServer

SIZE = 70_000


DOCS = Path(__file__).resolve().parents[1] / "docs"


def agent_prompt(size: int = SIZE) -> str:
    """Ordinary agent text: an agent's instructions ("<task-notification>", "risk-first"),
    its tool definitions, then project documentation (this repository's docs: prose, code
    blocks, tables, URLs), as an agent puts a project's notes in its system prompt."""
    corpus = dict(ORDINARY_TEXTS)
    parts = [corpus["agent-system-prompt"], corpus["tool-definitions"]]
    parts += [p.read_text(encoding="utf-8") for p in sorted(DOCS.glob("*.md")) if p.name != "redaction.md"]
    text = "\n\n".join(parts)
    while len(text) < size:
        text += "\n\n" + text
    return text[:size]


def dense_candidates(size: int = SIZE) -> str:
    """Text dense with near misses: code and configuration that name passwords, tokens and
    keys without holding any, hyphenated ids, URLs, JSON (the corpus's ordinary texts)."""
    near = [text for name, text in ORDINARY_TEXTS if name not in ("base64-image", "agent-system-prompt")]
    lines = [
        "max_tokens=4096 sort_key=created_at token_count: 512 password_min_length: 12",
        "task-notification-handler risk-first-review sk-learn-compatible xai-style key-value",
        'Bearer of news; basic usage; AKIA is a prefix; ghp_ tokens; eyJ is base64 for {"',
    ]
    text = "\n".join(near + lines)
    return (text * (size // len(text) + 1))[:size]


def with_secrets(size: int = SIZE) -> str:
    """A fake credential every ~200 characters of ordinary text."""
    prose = agent_prompt(size)
    keys = [s.text for s in SECRETS if s.inline]
    return "".join(prose[i : i + 200] + " " + keys[(i // 200) % len(keys)] + " " for i in range(0, size, 200))


# The scanner before issue #15 (kept here only as the baseline of this benchmark).
_OLD = tuple(
    re.compile(p)
    for p in (
        r"\bsk-(?:ant-|proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{16,}",
        r"\bxai-[A-Za-z0-9]{20,}",
        r"\bAIza[0-9A-Za-z_\-]{30,}",
        r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
        r"\bgh[pousr]_[A-Za-z0-9]{30,}",
        r"\bgithub_pat_[A-Za-z0-9_]{30,}",
        r"\b(?:xox[abpors]-)[A-Za-z0-9\-]{10,}",
        r"(?i)\bbearer\s+[A-Za-z0-9._~+/=\-]{16,}",
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
    )
)
_OLD_MARKERS = ("sk-", "xai-", "AIza", "AKIA", "ASIA", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_",
                "xox", "-----BEGIN")  # fmt: skip


def old_redact(text: str) -> str:
    if not any(m in text for m in _OLD_MARKERS) and "bearer" not in text.lower():
        return text
    for pattern in _OLD:
        text = pattern.sub("[REDACTED]", text)
    return text


def best_us(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def scanner_rows(repeat: int) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for label, text in (
        ("ordinary agent text", agent_prompt()),
        ("dense with candidates", dense_candidates()),
        ("a credential every 200 chars", with_secrets()),
    ):
        kb = len(text) / 1000

        def cold(text: str = text) -> None:
            redact.clear_cache()
            redact.redact_text(text)

        cold_us = best_us(cold, repeat)
        redact.redact_text(text)
        warm_us = best_us(lambda text=text: redact.redact_text(text), repeat)  # type: ignore[misc]
        # an equal text in a new object, as a proxy parses every body anew (the copy included)
        rehash_us = best_us(lambda text=text: redact.redact_text(text[:-1] + text[-1]), repeat)  # type: ignore[misc]
        old_us = best_us(lambda text=text: old_redact(text), repeat)  # type: ignore[misc]
        rows.append(
            {
                "text": label,
                "kb": round(kb, 1),
                "cold_us_per_kb": cold_us / kb,
                "warm_us": warm_us,
                "equal_copy_us": rehash_us,
                "before_us_per_kb": old_us / kb,
            }
        )
    return rows


class ServerProcess:
    """The scripted server in a process of its own, as a real upstream is: its work does not
    compete for this process's GIL with the app and memtap's journal worker."""

    def __enter__(self) -> ServerProcess:
        ctx = multiprocessing.get_context("spawn")
        self._queue: Any = ctx.Queue()
        self._stop = ctx.Event()
        self._proc = ctx.Process(target=_serve, args=(self._queue, self._stop), daemon=True)
        self._proc.start()
        self.openai_base_url: str = self._queue.get(timeout=60)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._proc.join(10)


def _serve(queue: Any, stop: Any) -> None:
    with ScriptedModelServer() as server:
        queue.put(server.openai_base_url)
        stop.wait()


def journal_rows(calls: int) -> list[dict[str, object]]:
    prompt = agent_prompt()
    messages: Any = [{"role": "system", "content": prompt}, {"role": "user", "content": "What changed?"}]
    options = {"embedder": False, "episodes": False, "recall": memtap.RecallBudget(k=0)}
    times: dict[str, list[float]] = {"bare": [], "memtap, spool off": [], "memtap, spool on": []}
    with tempfile.TemporaryDirectory() as tmp, ServerProcess() as server:
        bare = openai.OpenAI(base_url=server.openai_base_url, api_key="sk-bench", max_retries=0)
        off = memtap.Memory("memory://", spool=False, **options)  # type: ignore[arg-type]
        on = memtap.Memory("memory://", spool=Path(tmp) / "spool", **options)  # type: ignore[arg-type]
        clients = {
            "bare": (bare, None),
            "memtap, spool off": (off.register(openai.OpenAI(base_url=server.openai_base_url,
                                                             api_key="sk-bench", max_retries=0)), off),
            "memtap, spool on": (on.register(openai.OpenAI(base_url=server.openai_base_url,
                                                           api_key="sk-bench", max_retries=0)), on),
        }  # fmt: skip
        order = list(clients)
        for i in range(calls + 30):
            order = order[1:] + order[:1]  # rotate: every client goes first as often
            for name in order:
                client, mem = clients[name]
                started = time.perf_counter()
                if mem is None:
                    client.chat.completions.create(model="bench", messages=messages)
                else:
                    with mem.scope(entity_id="bench", session_id=f"s{i}-{name}"):
                        client.chat.completions.create(model="bench", messages=messages)
                if i >= 30:  # warm-up
                    times[name].append((time.perf_counter() - started) * 1e3)
        off.close()
        on.close()
    med = {name: statistics.median(values) for name, values in times.items()}
    return [
        {"client": name, "median_ms": m, "added_ms": m - med["bare"]} for name, m in med.items()
    ] + [{"client": "journal added (spool on - off)", "median_ms": None,
          "added_ms": med["memtap, spool on"] - med["memtap, spool off"]}]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=400, help="calls per client (journal part)")
    parser.add_argument("--repeat", type=int, default=30, help="runs per text (scanner part)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    scanner = scanner_rows(args.repeat)
    journal = journal_rows(args.calls)
    if args.json:
        json.dump({"scanner": scanner, "journal": journal}, sys.stdout, indent=2)
        return
    print(f"redact_text on {SIZE // 1000} KB texts, medians of {args.repeat} runs")
    print(f"{'text':32} {'cold µs/KB':>11} {'warm µs':>9} {'equal copy µs':>14} {'before µs/KB':>13}")
    for r in scanner:
        print(
            f"{r['text']:32} {r['cold_us_per_kb']:11.2f} {r['warm_us']:9.2f} {r['equal_copy_us']:14.1f}"
            f" {r['before_us_per_kb']:13.2f}"
        )
    print(f"\n70 KB system prompt, new session every call, {args.calls} calls per client, interleaved")
    print(f"{'client':34} {'median ms':>10} {'added ms':>9}")
    for r in journal:
        median = f"{r['median_ms']:10.3f}" if r["median_ms"] is not None else f"{'':>10}"
        print(f"{r['client']:34} {median} {r['added_ms']:9.3f}")


if __name__ == "__main__":
    main()
