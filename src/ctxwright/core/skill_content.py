"""The wire form of an activated skill's instructions, shared by the tool that writes it
(``skills/tools.py``) and the readers that must recognise it without a flag: the decoding of
tool-result events stored before ``ToolEvent.skill`` existed (``core/events.py``), and the
record-time layers that see a result before it is an event (``compaction/manager.py``).

Why here: the packages are peers and must not import each other, and the form is one
fact -- if the writer changed the tag and a reader did not, old sessions would silently lose
the protection of their skill bodies. A full activation is the ``Skill`` tool's result that starts
with ``<skill_content name="NAME">`` and a newline, and closes the tag; the short pointer a
repeated activation returns has no newline after the opening tag, so it never reads as a body.
"""

from __future__ import annotations

import re

#: The name of the level-2 tool (the Agent Skills client guide's ``Skill``).
SKILL_TOOL = "Skill"
CLOSE = "</skill_content>"

_OPEN = re.compile(r'<skill_content name="([^"]*)">\n')


def xml_escape(text: str, *, quote: bool = False) -> str:
    """``text`` with ``&``, ``<`` and ``>`` escaped (and ``"`` when ``quote``), byte for byte
    what ``xml.sax.saxutils.escape`` writes -- the skill tags are in the cached prefix, so the
    form must never drift -- without importing it: ``xml.sax.saxutils`` loads ``urllib.request``,
    ``http.client`` and ``email`` into every command that reads an event."""
    text = text.replace("&", "&amp;").replace(">", "&gt;").replace("<", "&lt;")
    return text.replace('"', "&quot;") if quote else text


def xml_unescape(text: str) -> str:
    """The inverse of :func:`xml_escape` with ``quote`` (``xml.sax.saxutils.unescape``'s order:
    ``&amp;`` last, so ``&amp;lt;`` stays ``&lt;``)."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"').replace("&amp;", "&")


def open_tag(name: str) -> str:
    """``<skill_content name="NAME">`` with the name escaped as XML."""
    return f'<skill_content name="{xml_escape(name, quote=True)}">'


def body_skill(tool_name: str | None, content: str | None) -> str | None:
    """The skill whose full instructions ``content`` (a result of tool ``tool_name``) carries,
    else ``None`` (another tool, the pointer of a repeated activation, an error, a preview).

    The opening tag may follow a prefix the agent adds to every result (a timestamp)."""
    if tool_name != SKILL_TOOL or not content:
        return None
    m = _OPEN.search(content, 0, 200)
    if m is None or ("\n" + CLOSE) not in content[m.end() - 1 :]:
        return None
    return xml_unescape(m.group(1))


__all__ = ["CLOSE", "SKILL_TOOL", "body_skill", "open_tag", "xml_escape", "xml_unescape"]
