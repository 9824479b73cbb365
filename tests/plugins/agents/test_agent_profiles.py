"""Agent profiles: detection, byte-identical split/rebuild, slot placement, traced fallback."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import memtap_agents
from memtap.memory import plugin_manager
from memtap.protocol.anchors import INJECTION_POINTS, Anchor, detect_profile, place, place_texts, rebuild
from memtap_agents import CLAUDE_CODE, CODEBUDDY, CODEX, GENERIC

CLAUDE_PROMPT = (
    "You are Claude Code, Anthropic's official CLI for Claude.\n\n"
    "# Tone and style\nBe concise.\n```bash\n# not a heading\n```\n\n"
    "# Memory\nCLAUDE.md files are loaded.\n\n"
    "# Environment\r\n<env>\r\nWorking directory: /p\r\n</env>"
)
CODEX_PROMPT = (
    "You are Codex, based on GPT-5.\n\n## AGENTS.md spec\nRead AGENTS.md.\n\n## Task execution\nKeep going.\n"
)
CODEBUDDY_PROMPT = "You are CodeBuddy.\n<agent_skills>\n- lint\n</agent_skills>\ntext\n<rules>be safe</rules>"
PROFILES = [CLAUDE_CODE, CODEX, CODEBUDDY, GENERIC]


def test_the_hook_lists_every_profile() -> None:
    pm = plugin_manager(entry_points=False, extra=[memtap_agents])
    names = [p.name for group in pm.hook.memtap_agent_profiles() for p in group]
    assert names == [
        "claude-code",
        "codex",
        "gemini-cli",
        "qwen-code",
        "opencode",
        "aider",
        "codebuddy",
        "generic",
    ]


def test_detection_by_prefix_then_fingerprint() -> None:
    assert detect_profile(PROFILES, CLAUDE_PROMPT) is CLAUDE_CODE
    assert detect_profile(PROFILES, CODEX_PROMPT) is CODEX
    assert detect_profile(PROFILES, CODEBUDDY_PROMPT) is CODEBUDDY
    assert detect_profile(PROFILES, "You are a helpful assistant.") is None
    assert detect_profile(PROFILES, CLAUDE_PROMPT, name="codex") is CODEX


@pytest.mark.parametrize(
    ("profile", "prompt", "keys"),
    [
        (CLAUDE_CODE, CLAUDE_PROMPT, ["_preamble", "Tone and style", "Memory", "Environment"]),
        (CODEX, CODEX_PROMPT, ["_preamble", "AGENTS.md spec", "Task execution"]),
        (CODEBUDDY, CODEBUDDY_PROMPT, ["_preamble", "agent_skills", None, "rules"]),
    ],
)
def test_split_rebuilds_byte_identically(profile, prompt, keys) -> None:
    segments = profile.split(prompt)
    assert rebuild(segments) == prompt
    assert [s.key for s in segments] == keys


@given(st.text(alphabet=st.sampled_from(list("ab #<>/\n\r`~xml_")), max_size=200))
def test_any_text_rebuilds(text: str) -> None:
    for profile in PROFILES:
        assert rebuild(profile.split(text)) == text


def test_placement_relations_keep_the_app_text() -> None:
    blocks = [
        (Anchor(slot="memory", relation="inside_append"), "MEM"),
        (Anchor(slot="task_context", relation="before"), "CTX"),
        (Anchor(slot="persona", relation="after", priority=0), "PERSONA"),
        (Anchor(slot="memory", relation="inside_prepend"), "FIRST"),
    ]
    placed = place(CLAUDE_CODE, CLAUDE_PROMPT, blocks)
    assert not placed.fallback
    text = placed.text
    assert text.index("PERSONA") < text.index("# Tone and style")
    assert (
        text.index("# Memory\nFIRST\n") < text.index("MEM") < text.index("CTX") < text.index("# Environment")
    )
    stripped = text
    for piece in ("PERSONA\n", "FIRST\n", "MEM\n", "CTX\n"):
        stripped = stripped.replace(piece, "", 1)
    assert stripped == CLAUDE_PROMPT


def test_unresolved_slots_fall_back_and_are_traced() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("t").start_as_current_span("inject"):
        placed = place(GENERIC, "be nice", [(Anchor(slot="skills", point="user.before"), "S")])
    assert placed.text == "be nice"
    assert [a.point for a, _ in placed.fallback] == ["user.before"]
    (span,) = exporter.get_finished_spans()
    (event,) = span.events
    assert event.name == "memtap.anchor.fallback"
    assert event.attributes["memtap.slot"] == "skills"


def test_anchor_validation() -> None:
    assert len(INJECTION_POINTS) == 9
    with pytest.raises(ValueError, match="relation"):
        Anchor(relation="beside")
    with pytest.raises(ValueError, match="point"):
        Anchor(point="system.middle")


def unplace(text: str, pieces: list[str]) -> str:
    """Undo placements: each piece went in as its own line (with the line break after it,
    else the one before it)."""
    for piece in pieces:
        at = text.index(piece)
        end = at + len(piece)
        text = text[:at] + text[end + 1 :] if text[end : end + 1] == "\n" else text[: at - 1] + text[end:]
    return text


@given(
    st.text(alphabet=st.sampled_from(list("ab #<>/\n\r`")), max_size=120),
    st.lists(
        st.tuples(
            st.sampled_from(["persona", "memory", "rules", "skills", "task_context", "tools"]),
            st.sampled_from(["before", "after", "inside_prepend", "inside_append"]),
        ),
        max_size=5,
    ),
)
def test_any_placement_comes_off_cleanly(text: str, anchors: list[tuple[str, str]]) -> None:
    prompts = {
        CLAUDE_CODE: "# Memory\n" + text + "\n# Harness\n" + text,
        CODEX: text + "\n## AGENTS.md spec\n" + text,
        CODEBUDDY: text + "<memory>" + text + "</memory><rules>\n" + text + "\n</rules>",
    }
    for profile, prompt in prompts.items():
        blocks = [(Anchor(slot=s, relation=r), f"[block {i}]") for i, (s, r) in enumerate(anchors)]
        placed = place(profile, prompt, blocks)
        kept = [b for b in blocks if b not in placed.fallback]
        assert all(piece in placed.text for _, piece in kept)
        assert unplace(placed.text, [piece for _, piece in kept]) == prompt


def test_several_texts_keep_their_boundaries() -> None:
    texts = ["You are Claude Code, Anthropic's official CLI for Claude.", "Intro.\n\n# Memory\nnotes\n"]
    placed = place_texts(CLAUDE_CODE, texts, [(Anchor(slot="memory"), "MEM"), (Anchor(slot="persona"), "ME")])
    assert placed.texts == (texts[0] + "\nME", "Intro.\n\n# Memory\nnotes\nMEM\n")
    assert not placed.fallback
    assert place_texts(CLAUDE_CODE, [], [(Anchor(slot="memory"), "MEM")]).fallback


def test_xml_inside_relations_stay_between_the_tags() -> None:
    blocks = [
        (Anchor(slot="skills", relation="inside_prepend"), "FIRST"),
        (Anchor(slot="skills", relation="inside_append"), "LAST"),
    ]
    text = place(CODEBUDDY, CODEBUDDY_PROMPT, blocks).text
    assert "<agent_skills>\nFIRST\n- lint\nLAST\n</agent_skills>" in text
