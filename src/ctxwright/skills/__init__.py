"""Agent Skills: folders with a ``SKILL.md`` (front matter + instructions) an agent can load.

This package discovers skill folders, loads them leniently (what the specification's
client guide asks: warn and keep going) and validates them strictly against every rule of
the specification (:mod:`ctxwright.skills.spec`). See ``docs/skills.md``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctxwright.skills.loader import LoadResult, Skill, ValidationResult, discover, load_skills, validate

__all__ = ["LoadResult", "Skill", "ValidationResult", "discover", "load_skills", "validate"]


def __getattr__(name: str) -> Any:
    """The loader's names, loaded on first use (PEP 562): it brings PyYAML, which the
    options that only name a skills setting (``ctxwright --help``) do not need."""
    if name in __all__:
        return getattr(importlib.import_module("ctxwright.skills.loader"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
