"""Which files of a skill folder may be used: the one confinement rule.

A skill folder is third-party content, and a symlink in it can point anywhere the user can
read (``SKILL.md -> ~/.ssh/id_ed25519``, ``notes.md -> /etc/passwd``). Whatever is read from
a skill -- its ``SKILL.md`` by the loader, a resource by ``read_skill_file``, a script by
``run_skill_script`` -- goes through :func:`inside`, so a link is judged the same way
everywhere: one whose real path stays in the folder's real path is fine (an author who links
``SKILL.md`` to ``docs/skill.md`` in the same folder), one that leads out is refused.
"""

from __future__ import annotations

from pathlib import Path

from ctxwright.errors import NoSuchSkillFile, SkillLinkLeavesFolder


def inside(folder: Path, rel: str) -> Path:
    """The real path of ``rel`` under ``folder``, every symlink resolved, or
    :class:`NoSuchSkillFile` / :class:`SkillLinkLeavesFolder`.

    The folder's own real path is the boundary (a skill folder that is itself a link into
    another checkout is fine: the user chose that folder); ``rel`` is not checked for ``..``
    or an absolute form here, which is what a caller taking paths from a model adds first."""
    root = folder.resolve()
    try:
        target = (root / rel).resolve(strict=True)
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop before Python 3.13
        raise NoSuchSkillFile(rel) from None
    if not target.is_relative_to(root):
        raise SkillLinkLeavesFolder(rel)
    return target


__all__ = ["inside"]
