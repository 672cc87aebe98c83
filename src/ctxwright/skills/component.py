"""Agent Skills as a component: the skill tools in the prefix, the catalog appended before a
run, a child agent with the same skills.

Cache rule protected: the skill tools' bytes do not depend on which skills exist (reminder
mode), so adding a skill folder changes no prefix byte; the catalog of not-yet-announced
skills goes to the end of the trajectory as a ``<system-reminder>`` user message
(``skills/tools.py``). In prefix mode the catalog known at start is frozen into the ``Skill``
tool's description and recorded, so a resume rebuilds the same bytes whatever the folders
hold by then; a skill added later gets a warning, never a prefix change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ctxwright.core.progress import EventSink, SkillsCatalog, SkillsWarning
from ctxwright.core.session import Session
from ctxwright.skills.loader import Skill, load_skills
from ctxwright.skills.scripts import SkillScripts
from ctxwright.skills.tools import SKILL_TOOLS, CatalogEntry, CatalogMode, SkillTools, announce
from ctxwright.tools.component import Build, Component, register_core
from ctxwright.tools.registry import Tool

__all__ = ["SkillsComponent"]


class SkillsComponent(Component):
    """``Skill``, ``read_skill_file`` (and ``run_skill_script`` when allowed) over the loaded
    skills; the catalog before each run in reminder mode."""

    name = "skills"

    def __init__(
        self,
        dirs: Sequence[str] | None,
        *,
        catalog: CatalogMode,
        allow_scripts: bool,
        script_timeout: float,
        frozen: Sequence[CatalogEntry] | None,
        on_event: EventSink,
        shown_in: Callable[[Session], Callable[[str], bool]],
    ) -> None:
        self.on_event = on_event
        #: whether a session's rendered view still shows a skill's body (``compaction/skills.py``,
        #: given by the assembler: compaction is a peer package)
        self.shown_in = shown_in
        self.catalog: CatalogMode = catalog
        #: the folders, absolute (the recipe resolves them: a resume may run elsewhere)
        self.dirs: list[str] | None = list(dirs) if dirs is not None else None
        self.skills: list[Skill] = []
        self.warnings: list[str] = []
        if self.dirs is not None:
            loaded = load_skills(self.dirs)
            self.skills, self.warnings = loaded.skills, loaded.warnings
            for warning in self.warnings:
                self.on_event(SkillsWarning(message=warning))
        #: as resolved by the recipe (recipe/resolve.py: the timeout is checked there; on resume,
        #: recorded, or for an older session read off its prefix, recipe/record.py)
        self._allow_scripts = allow_scripts
        self._script_timeout = script_timeout
        self._frozen_recorded = frozen
        self.frozen: list[CatalogEntry] | None = None
        self.tools: SkillTools | None = None
        self.scripts: SkillScripts | None = None

    # -- the prefix ----------------------------------------------------------------------
    def add_tools(self, build: Build) -> None:
        names = build.stored_names
        allow = self._allow_scripts
        if self.catalog == "prefix":
            # frozen with the prefix: the entries recorded at start, or the skills loaded now
            if build.stored is not None:
                self.frozen = list(self._frozen_recorded or ())
            else:
                self.frozen = [CatalogEntry.of(sk) for sk in self.skills]
            in_catalog = {e.name for e in self.frozen}
            for sk in self.skills:
                if sk.name not in in_catalog:
                    warning = (
                        f"skill {sk.name!r} ({sk.folder}) is not in this session's catalog: with --skills-catalog "
                        "prefix the catalog is frozen with the prefix when the session starts, so it is not "
                        "announced and Skill cannot load it; start a new session to use it"
                    )
                    self.warnings.append(warning)
                    self.on_event(SkillsWarning(message=warning))
            has_tools = bool(self.frozen)
        else:
            # registered when skills loaded, or when the stored prefix has them (a folder since removed)
            has_tools = bool(self.skills or (names and all(n in names for n in SKILL_TOOLS)))
        if not has_tools:
            return
        self.tools = SkillTools(self.skills, scripts_allowed=allow, frozen=self.frozen)
        register_core(build.tools, self.tools.tools(), "the skill tools (skills=)")
        if allow:
            self.scripts = SkillScripts(self.tools, timeout_s=self._script_timeout)
            register_core(build.tools, [self.scripts.tool()], "run_skill_script (allow_skill_scripts=)")

    # -- the session ---------------------------------------------------------------------
    def bind(self, session: Session) -> None:
        if self.tools is not None:  # a second Skill(name) points back only while the view shows the body
            self.tools.is_shown = self.shown_in(session)

    def before_run(self, session: Session) -> None:
        """In reminder mode, append a catalog message for the loaded skills the session has
        not announced yet; in prefix mode the catalog is in the ``Skill`` tool's description."""
        if self.catalog == "prefix":
            return
        done = announce(session, self.skills)
        if done is not None:
            self.on_event(SkillsCatalog(names=tuple(done[0]), content=done[1]))

    def fork(self) -> Component | None:
        return _ChildSkills(self) if self.tools is not None else None


class _ChildSkills(Component):
    """A sub-agent's skills: the same tool bytes over its own :class:`SkillTools` (a skill the
    child loads is not "already loaded" for the parent, which never saw it); in reminder mode
    the catalog is announced in the child's own trajectory, before its task."""

    name = "skills"

    def __init__(self, parent: SkillsComponent) -> None:
        assert parent.tools is not None
        self.parent = parent
        self.tools = parent.tools.fork()

    def own_tools(self) -> list[Tool]:
        return list(self.tools.tools())

    def bind(self, session: Session) -> None:
        self.tools.is_shown = self.parent.shown_in(session)

    def before_run(self, session: Session) -> None:
        if self.tools.frozen is not None:  # prefix mode: already in the shared prefix
            return
        done = announce(session, list(self.tools.skills.values()))
        if done is not None:
            self.parent.on_event(SkillsCatalog(names=tuple(done[0]), content=done[1], child=session.id))
