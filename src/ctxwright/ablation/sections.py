"""A system prompt cut into named sections, so each can be left out of one arm.

Why cut the text itself rather than rebuild it: the ``full`` arm must be byte-identical to the
prompt the user runs in production, and every other arm the same bytes minus exactly one
section. So a Markdown prompt is split into chunks of its own text (a section runs from its
heading line to the next heading of the same or a shallower level) and an arm is the chunks
joined back with one left out; nothing is re-wrapped or re-spaced.

Which headings: ATX headings (``#`` to ``######``) outside fenced code blocks. The sections
are those of the shallowest level that occurs at least twice, so a prompt with one ``# Title``
over several ``## Parts`` is split into its parts (the title and the text before the first
part are the *preamble*, kept in every arm); deeper headings stay inside their section.
Setext headings (a line underlined with ``===``) are not read as headings.

A :class:`~ctxwright.core.sections.SystemPromptBuilder` is split by its declared sections
instead (:func:`split_builder`): its ``build()`` output is the full arm, and removing a section
is building without it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ctxwright.core.markdown import headings
from ctxwright.core.sections import SystemPromptBuilder
from ctxwright.errors import AblationInputError

__all__ = ["MAX_SECTIONS", "Section", "SectionedPrompt", "split_builder", "split_markdown"]

#: More sections than this would be an ablation of hundreds of arms, each a full pass over the
#: tasks: refused, with the advice to split at a shallower level.
MAX_SECTIONS = 64


@dataclass(frozen=True)
class Section:
    """One removable part of the prompt: its name (the heading's text, or the builder's
    section name) and its exact text (with the heading line)."""

    name: str
    text: str


@dataclass(frozen=True)
class SectionedPrompt:
    """A prompt as ``preamble`` + ``sections``, joined by ``separator``, which renders back to
    the original text exactly (:meth:`render` with nothing removed)."""

    preamble: str
    sections: tuple[Section, ...]
    separator: str = ""
    #: where the sections came from, for messages: ``"markdown"`` or ``"builder"``
    source: str = "markdown"

    def names(self) -> list[str]:
        return [s.name for s in self.sections]

    def section(self, name: str) -> Section:
        """The section called ``name`` (case-insensitive), or an :class:`AblationInputError`
        listing the names there are."""
        for s in self.sections:
            if s.name.casefold() == name.strip().casefold():
                return s
        raise AblationInputError(
            f"no section {name!r} in the system prompt; its sections are: {', '.join(repr(n) for n in self.names())}"
        )

    def render(self, without: str | None = None) -> str:
        """The prompt with the section named ``without`` left out (``None``: the whole prompt)."""
        removed = self.section(without).name if without is not None else None
        parts = [s.text for s in self.sections if s.name != removed]
        if self.preamble:
            parts.insert(0, self.preamble)
        return self.separator.join(parts)


def _headings(lines: list[str]) -> list[tuple[int, int, str]]:
    """``(line index, level, title)`` of every titled heading (``core/markdown.py`` finds them)."""
    return [(h.index, h.level, h.title) for h in headings(lines) if h.title]


def split_markdown(text: str, *, where: str = "the system prompt") -> SectionedPrompt:
    """Split ``text`` at its Markdown headings (see the module's docstring for which).

    Refused (:class:`AblationInputError`): a text with no heading at all, or with more than
    :data:`MAX_SECTIONS` sections at the level chosen. Two sections with the same heading get
    `` (2)``, `` (3)``... after their name, so each arm names one section."""
    lines = text.splitlines(keepends=True)
    heads = _headings(lines)
    if not heads:
        raise AblationInputError(
            f"{where} has no Markdown headings, so there is no section to remove: start each section with a "
            "heading line such as '## Refunds' (or give a SystemPromptBuilder with --builder)"
        )
    levels = sorted({level for _, level, _ in heads})
    level = next((lv for lv in levels if sum(1 for _, x, _ in heads if x == lv) >= 2), levels[0])
    starts = [(i, title) for i, lv, title in heads if lv <= level]
    # a shallower heading after the first section (a second '# Title') starts a section too
    first = next(i for i, lv, _ in heads if lv == level)
    starts = [(i, t) for i, t in starts if i >= first]
    if len(starts) > MAX_SECTIONS:
        raise AblationInputError(
            f"{where} has {len(starts)} sections at heading level {level}, more than {MAX_SECTIONS}: an arm per "
            "section would be too many runs; merge sections or split at fewer headings"
        )
    preamble = "".join(lines[:first])
    sections: list[Section] = []
    seen: dict[str, int] = {}
    for k, (i, title) in enumerate(starts):
        end = starts[k + 1][0] if k + 1 < len(starts) else len(lines)
        key = title.casefold()
        seen[key] = seen.get(key, 0) + 1
        name = title if seen[key] == 1 else f"{title} ({seen[key]})"
        sections.append(Section(name, "".join(lines[i:end])))
    return SectionedPrompt(preamble, tuple(sections), "", "markdown")


def split_builder(builder: SystemPromptBuilder) -> SectionedPrompt:
    """The sections of a :class:`SystemPromptBuilder` as it builds with no runtime condition
    set: a section under a condition is not in that prompt, so it is no arm either. A builder
    with a dynamic section is refused as ``build()`` refuses it."""
    builder.check()
    kept = tuple(Section(s.name, s.text) for s in builder.sections if s.condition is None)
    if not kept:
        raise AblationInputError(
            "the SystemPromptBuilder has no section that is always in the prompt; add sections with .add(name, text)"
        )
    if len(kept) > MAX_SECTIONS:
        raise AblationInputError(f"the SystemPromptBuilder has {len(kept)} sections, more than {MAX_SECTIONS}")
    return SectionedPrompt("", kept, builder.separator, "builder")
