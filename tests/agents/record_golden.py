"""Record the real agents' requests as golden files for the proxy's lossless, placement and
benchmark tests (``tests/contrib/proxy/golden/``).

Run with the agents installed (``nox -s agents`` prints where, or set MEMTAP_AGENTS_BIN)::

    MEMTAP_AGENTS_BIN=... MEMTAP_AIDER_BIN=... python tests/agents/record_golden.py [OUTPUT_DIR] [AGENT...]

(``AGENT``: ``claude``, ``codex``, ``gemini`` or ``chat`` (Qwen Code, opencode and aider);
all four by default.)

Each agent talks straight to the scripted upstream (no proxy: the bodies are exactly the
agent's), in a git repository with a CLAUDE.md / AGENTS.md. Two turns each: a first
request, and a later one that resends a conversation with reasoning, a tool call and its
result (``claude -p --continue``, ``codex exec resume --last``, ``gemini -p --resume latest``),
and Gemini CLI's model-router side call; Qwen Code, opencode and aider (Chat Completions) a
first request, a continued one and their side calls (Qwen Code's memory extraction,
opencode's title), aider for a model it knows (examples in its system prompt) and one it
does not (examples as turns). What is machine-specific is replaced in the bytes (paths,
device and installation ids, session ids, the platform), nothing else.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from agents_support import Aider, ClaudeCode, Codex, GeminiCli, Opencode, QwenCode

from memtap.testing.server import RecordedRequest, Reply, ScriptedModelServer, ToolCallSpec

GOLDEN = Path(__file__).parents[1] / "contrib" / "proxy" / "golden"
#: Request headers worth keeping in a golden (the rest are transport details).
KEPT_HEADERS = re.compile(
    r"^(x-claude-code-session-id|x-app|anthropic-.*|user-agent|session-id|thread-id|originator|x-codex-.*|"
    r"x-session-id|x-session-affinity|"
    r"x-client-request-id|x-goog-api-client|content-type|accept)$"
)
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_HEX64 = re.compile(r"\b[0-9a-f]{64}\b")
#: opencode's session ids and aider's platform line.
_MORE = (
    (re.compile(r"ses_[0-9a-zA-Z]{26}"), "ses_0000000000000000000000test"),
    (re.compile(r"Linux-[\w.-]+-x86_64-with-glibc[\d.]+"), "Linux-6.1.0-x86_64-with-glibc2.36"),
)


class Scrubber:
    """Replaces machine-specific strings with stable stand-ins, the same way in every file."""

    def __init__(self, replacements: dict[str, str]) -> None:
        self.replacements = dict(sorted(replacements.items(), key=lambda kv: -len(kv[0])))
        self.ids: dict[str, str] = {}

    def _id(self, match: re.Match[str]) -> str:
        value = match.group(0)
        if value not in self.ids:
            n = len(self.ids) + 1
            self.ids[value] = f"00000000-0000-4000-8000-{n:012d}" if "-" in value else f"{n:064x}"
        return self.ids[value]

    def __call__(self, text: str) -> str:
        for old, new in self.replacements.items():
            text = text.replace(old, new)
        for pattern, stand_in in _MORE:
            text = pattern.sub(stand_in, text)
        text = _UUID.sub(self._id, text)
        return _HEX64.sub(self._id, text)


def _git_repo(folder: Path) -> None:
    folder.mkdir(parents=True)
    (folder / "CLAUDE.md").write_text("Use pytest for tests. Run ruff before committing.\n")
    (folder / "AGENTS.md").write_text("Use pytest for tests. Run ruff before committing.\n")
    (folder / "app.py").write_text("def add(a, b):\n    return a + b\n")
    (folder / "notes.txt").write_text("The deploy key rotates on Fridays.\n")
    git = ["git", "-c", "user.email=dev@example.com", "-c", "user.name=dev"]
    for args in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-qm", "Initial commit"]):
        subprocess.run([*git, *args], cwd=folder, check=True, capture_output=True)


def _save(name: str, request: RecordedRequest, scrub: Scrubber, out: Path) -> None:
    body = scrub(request.body.decode("utf-8"))
    json.loads(body)  # still JSON
    (out / f"{name}.json").write_bytes(body.encode())
    headers = {k: scrub(v) for k, v in sorted(request.headers.items()) if KEPT_HEADERS.match(k)}
    (out / f"{name}.headers.json").write_text(json.dumps(headers, indent=1) + "\n")
    print(f"{name}: {len(body.encode())} bytes")


AGENTS = ("claude", "codex", "gemini")


def record(out: Path, agents: tuple[str, ...] = AGENTS) -> None:
    """Run the ``agents`` once each and write their goldens into ``out``."""
    with tempfile.TemporaryDirectory() as tmp, ScriptedModelServer() as upstream:
        root = Path(tmp)
        work = root / "project"
        _git_repo(work)
        scrub = Scrubber({str(work): "/home/dev/project", str(root / "home"): "/home/dev"})
        if "claude" in agents:
            _record_claude(upstream, root, work, scrub, out)
        if "codex" in agents:
            _record_codex(upstream, root, work, scrub, out)
        if "gemini" in agents:
            _record_gemini(upstream, root, work, scrub, out)


def _record_claude(upstream: ScriptedModelServer, root: Path, work: Path, scrub: Scrubber, out: Path) -> None:
    notes = str(work / "notes.txt")
    claude = ClaudeCode.installed(root / "home", work, upstream.base_url)
    read = ToolCallSpec("Read", json.dumps({"file_path": notes}), id="toolu_01ReadNotes")
    upstream.script(
        Reply(thinking="I should read the file first.", tool_calls=[read]),
        Reply(text="It says the deploy key rotates on Fridays.", thinking="The file answers it."),
        Reply(text="You asked me to read notes.txt."),
    )
    claude.prompt("Read notes.txt and tell me what it says.").check()
    claude.prompt("--continue", "What did I ask you first?").check()
    anthropic = [r for r in upstream.requests if r.path == "/v1/messages"]
    _save("claude_code_first", anthropic[0], scrub, out)
    _save("claude_code_continue", anthropic[-1], scrub, out)


def _record_codex(upstream: ScriptedModelServer, root: Path, work: Path, scrub: Scrubber, out: Path) -> None:
    upstream.clear()
    codex = Codex.installed(root / "home", work, upstream.base_url)
    shell = ToolCallSpec("exec_command", json.dumps({"cmd": "cat notes.txt"}), id="call_cat_notes")
    upstream.script(
        Reply(thinking="Read the file.", tool_calls=[shell]),
        Reply(text="It says the deploy key rotates on Fridays."),
        Reply(text="You asked me to read notes.txt."),
    )
    codex.exec("Read notes.txt and tell me what it says.").check()
    codex.exec("resume", "--last", "What did I ask you first?").check()
    responses = [r for r in upstream.requests if r.path == "/v1/responses"]
    _save("codex_first", responses[0], scrub, out)
    _save("codex_resume", responses[-1], scrub, out)


def _record_gemini(upstream: ScriptedModelServer, root: Path, work: Path, scrub: Scrubber, out: Path) -> None:
    """Gemini CLI: a routed first prompt (the router's side call, then the turn), a tool
    call, and ``--resume latest``. Its GEMINI.md is the project's CLAUDE.md text."""
    upstream.clear()
    (work / "GEMINI.md").write_text((work / "CLAUDE.md").read_text())
    gemini = GeminiCli.installed(root / "home", work, upstream.base_url)
    read = ToolCallSpec("read_file", json.dumps({"file_path": str(work / "notes.txt")}))
    upstream.script(
        Reply(text='{"complexity_reasoning": "Simple read operation.", "complexity_score": 10}'),
        Reply(tool_calls=[read]),
        Reply(text="It says the deploy key rotates on Fridays."),
        Reply(text='{"complexity_reasoning": "A question about the chat.", "complexity_score": 5}'),
        Reply(text="You asked me to read notes.txt."),
    )
    gemini.prompt("Read notes.txt and tell me what it says.", model=None).check()
    gemini.prompt("What did I ask you first?", "--resume", "latest", model=None).check()
    router = next(r for r in upstream.requests if r.path.endswith(":generateContent"))
    turns = [r for r in upstream.requests if r.path.endswith(":streamGenerateContent")]
    _save("gemini_cli_router", router, scrub, out)
    _save("gemini_cli_first", turns[0], scrub, out)
    _save("gemini_cli_resume", turns[-1], scrub, out)


def _chat(upstream: ScriptedModelServer) -> list[RecordedRequest]:
    return [r for r in upstream.requests if r.path == "/v1/chat/completions"]


def record_chat_agents(out: Path) -> None:
    """Run Qwen Code, opencode and aider twice each and write their goldens into ``out``."""
    with tempfile.TemporaryDirectory() as tmp, ScriptedModelServer() as upstream:
        root = Path(tmp)
        work = root / "project"
        work.mkdir()
        (work / "notes.txt").write_text("The deploy key rotates on Fridays.\n")
        scrub = Scrubber(
            {
                str(work): "/home/dev/project",
                str(root / "home"): "/home/dev",
                "-" + str(work)[1:].replace("/", "-"): "-home-dev-project",
            }
        )
        first, later = "My favourite colour is teal.", "What is my favourite colour?"

        qwen = QwenCode.installed(root / "home", work, upstream.base_url)
        # Each turn, then Qwen Code's memory extraction.
        upstream.script(*(Reply(text=f"Answer {i}.") for i in range(4)))
        qwen.prompt(first).check()
        qwen.prompt(later, "--continue").check()
        requests = _chat(upstream)
        for name, request in zip(
            ("qwen_code_first", "qwen_code_memory_extraction", "qwen_code_continue"), requests
        ):
            _save(name, request, scrub, out)

        upstream.clear()
        opencode = Opencode.installed(root / "home", work, upstream.base_url)
        # The title call and the turn, in either order, then the continued turn.
        upstream.script(Reply(text="Answer 1."), Reply(text="Answer 1."), Reply(text="Answer 2."))
        opencode.run(first).check()
        opencode.run("--continue", later).check()
        (work / "opencode.json").unlink()
        requests = _chat(upstream)
        titles = [r for r in requests if b"title generator" in r.body]
        turns = [r for r in requests if r not in titles]
        _save("opencode_title", titles[0], scrub, out)
        _save("opencode_first", turns[0], scrub, out)
        _save("opencode_continue", turns[-1], scrub, out)

        for model, names in (
            ("openai/memtap-test", ("aider_first", "aider_restored")),
            ("openai/gpt-4o", ("aider_gpt4o_first",)),
        ):
            upstream.clear()
            upstream.script(Reply(text="Answer 0."), Reply(text="Answer 1."))
            aider = Aider.installed(root / "home", work, upstream.base_url)
            aider.message(first, "--model", model).check()
            if len(names) > 1:
                aider.message(later, "--model", model, "--restore-chat-history").check()
            for name, request in zip(names, _chat(upstream)):
                _save(name, request, scrub, out)
            (work / ".aider.chat.history.md").unlink()


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else GOLDEN
    chosen = tuple(sys.argv[2:]) or (*AGENTS, "chat")
    record(target, tuple(a for a in chosen if a in AGENTS))
    if "chat" in chosen:
        record_chat_agents(target)
