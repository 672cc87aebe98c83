"""The cache boundary: a system prompt built from declared sections.

Provider rule protected: a prompt cache is keyed by the exact prefix bytes. So each
piece of the system prompt is declared with a scope:

* ``global`` -- identical for every user and session (instructions, operating manual);
  placed first, so every session shares the same cached bytes;
* ``session`` -- fixed for one session (the user's name, the project), after the
  global part: it costs one cache entry per session;
* ``dynamic`` -- changes during a session (time, cwd, balances, budgets). It may not be
  in the prefix at all: one changed byte there invalidates everything after it on every
  call. It belongs at the end of the trajectory (a user message or the status bar).

A section may also depend on a two-valued runtime condition (``premium_user``,
``tools_beta``). Each distinct condition before the boundary doubles the number of
prefix variants the cache must hold (2^N), which :meth:`SystemPromptBuilder.variants`
reports.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from ctxwright.errors import DynamicSectionInPrefix

Scope = Literal["global", "session", "dynamic"]


@dataclass(frozen=True)
class PromptSection:
    name: str
    text: str
    scope: Scope = "global"
    #: the section is included only when this runtime condition is true
    condition: str | None = None


@dataclass(frozen=True)
class VariantReport:
    conditions: tuple[str, ...]
    variants: int
    warnings: tuple[str, ...]


@dataclass
class SystemPromptBuilder:
    """Collects sections in order and renders the system prompt, refusing dynamic ones."""

    sections: list[PromptSection] = field(default_factory=list)
    separator: str = "\n\n"

    def add(self, name: str, text: str, scope: Scope = "global", condition: str | None = None) -> SystemPromptBuilder:
        if scope not in ("global", "session", "dynamic"):
            raise ValueError(f"section {name!r}: scope must be global, session or dynamic, not {scope!r}")
        if any(s.name == name for s in self.sections):
            raise ValueError(f"section {name!r} is declared twice")
        self.sections.append(PromptSection(name, text, scope, condition))
        return self

    def check(self) -> None:
        """Raise :class:`DynamicSectionInPrefix` naming the first dynamic section."""
        for s in self.sections:
            if s.scope == "dynamic":
                raise DynamicSectionInPrefix(
                    f"section {s.name!r} is declared dynamic, so it cannot be part of the static prefix: "
                    "its value changes during the session and every change would invalidate the prompt "
                    "cache for everything after it. Put it at the end of the trajectory instead (a user "
                    "message, or a status-bar item), or declare it 'session' if it really is fixed."
                )

    def build(self, conditions: Mapping[str, bool] | None = None) -> str:
        """The system prompt for one set of runtime conditions (missing ones count as false)."""
        self.check()
        conditions = conditions or {}
        unknown = set(conditions) - {s.condition for s in self.sections if s.condition}
        if unknown:
            raise ValueError(f"unknown condition(s) {sorted(unknown)}: no section depends on them")
        return self.separator.join(
            s.text for s in self.sections if s.condition is None or conditions.get(s.condition, False)
        )

    def variants(self) -> VariantReport:
        """How many distinct prefixes the declared conditions can produce, and ordering advice."""
        conds = tuple(dict.fromkeys(s.condition for s in self.sections if s.condition))
        warnings: list[str] = []
        seen_session = None
        for s in self.sections:
            if s.scope == "session" and seen_session is None:
                seen_session = s.name
            if s.scope == "global" and seen_session is not None:
                warnings.append(
                    f"global section {s.name!r} comes after session section {seen_session!r}: "
                    "its bytes cannot be shared across sessions; move it before"
                )
            if s.scope == "dynamic":
                warnings.append(f"dynamic section {s.name!r} cannot be in the prefix")
        if conds:
            warnings.append(
                f"{len(conds)} runtime condition(s) before the cache boundary "
                f"({', '.join(conds)}) give {2 ** len(conds)} prefix variants; each is cached "
                "separately"
            )
        return VariantReport(conds, 2 ** len(conds), tuple(warnings))
