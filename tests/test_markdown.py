"""``core/markdown.py``: the one reader of Markdown headings (the gate's segments, the
ablation's arms and the attention map's sections all cut a prompt with it)."""

from __future__ import annotations

from ctxwright.core.markdown import headings


def test_atx_headings_and_their_titles():
    lines = [
        "# Role",
        "text",
        "## Refunds ##",
        "### C#",
        "#5 is no heading",
        "#hashtag",
        "   # indented",
        "    # code",
        "#",
    ]
    assert [(h.index, h.level, h.title) for h in headings(lines)] == [
        (0, 1, "Role"),
        (2, 2, "Refunds"),
        (3, 3, "C#"),
        (6, 1, "indented"),
        (8, 1, ""),
    ]


def test_nothing_inside_a_fence_is_a_heading():
    lines = ["# A\n", "```bash\n", "# a shell comment\n", "``` not a close\n", "# still code\n", "````\n", "# B\n"]
    assert [h.title for h in headings(lines)] == ["A", "B"]
    assert [h.title for h in headings(["~~~", "# x", "```", "# y", "~~~", "# z"])] == ["z"]
