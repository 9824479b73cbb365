"""A tiny agent profile for the placement tests (core's tests run without memtap-agents)."""

from __future__ import annotations

from memtap.protocol.anchors import Segment


class Sections:
    """A test profile: ``[name]`` lines start sections; ``memory`` resolves to ``[mem]``."""

    name = "sections"

    def detect(self, system_text: str) -> bool:
        return "[mem]" in system_text

    def split(self, system_text: str) -> list[Segment]:
        segments: list[Segment] = []
        for line in system_text.splitlines(keepends=True):
            if line.startswith("[") or not segments:
                segments.append(Segment(line, line.strip("[]\n") if line.startswith("[") else None))
            else:
                segments[-1] = Segment(segments[-1].text + line, segments[-1].key)
        return segments

    def resolve(self, slot: str) -> str | None:
        return {"memory": "mem", "rules": "rules"}.get(slot)
