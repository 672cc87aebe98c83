"""Agent Skills: folders with a ``SKILL.md`` (front matter + instructions) an agent can load.

This package discovers skill folders, loads them leniently (what the specification's
client guide asks: warn and keep going) and validates them strictly against every rule of
the specification (:mod:`ctxwright.skills.spec`). See ``docs/skills.md``.
"""

from __future__ import annotations

from ctxwright.skills.loader import LoadResult, Skill, ValidationResult, discover, load_skills, validate

__all__ = ["LoadResult", "Skill", "ValidationResult", "discover", "load_skills", "validate"]
