"""The two tools that give an agent its skills, and the catalog message that announces them.

Progressive disclosure, as the Agent Skills client guide describes it:

* level 1, the **catalog**: each skill's name, description and location, appended once to the
  trajectory as a user message (:func:`catalog_message`) -- never in the system prompt, so
  adding a skill does not change the static prefix and its cache;
* level 2, ``Skill(name)``: the skill's instructions, wrapped in ``<skill_content>``, with the
  list of its resource files (paths and sizes, not their content);
* level 3, ``read_skill_file(name, path)``: one resource file, confined to the skill's folder.

The tool schemas do not depend on which skills exist (``name`` is a plain string checked at
call time), so the prefix's tool bytes stay the same when a skill folder is added.

The other catalog mode, ``prefix``, puts the catalog known when the session starts into the
``Skill`` tool's description, with ``name`` an enum of those skills. It costs no appended
message, but it is frozen with the prefix (provider caches reuse only a byte-identical
prefix): a skill added later is not announced and cannot be loaded until a new session.
The entries are recorded with the session (:class:`CatalogEntry`), so a resume rebuilds the
same tool bytes whatever the folders hold by then.
"""

from __future__ import annotations

import difflib
import os
import re
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from ctxwright.core.events import SKILLS_CATALOG_KEY, UserEvent
from ctxwright.core.session import Session
from ctxwright.core.skill_content import SKILL_TOOL, open_tag
from ctxwright.core.skill_content import xml_escape as escape
from ctxwright.core.skills_catalog import CATALOG_CLOSE, CATALOG_OPEN, REMINDER_CLOSE, REMINDER_OPEN
from ctxwright.errors import NoSuchSkillFile, SkillLinkLeavesFolder, SkillToolError
from ctxwright.skills import paths, spec
from ctxwright.tools.registry import Tool, ToolResult

if TYPE_CHECKING:  # the loader brings PyYAML; the tools only take the skills it loaded
    from ctxwright.skills.loader import Skill

READ_SKILL_FILE_TOOL = "read_skill_file"
SKILL_TOOLS = (SKILL_TOOL, READ_SKILL_FILE_TOOL)
#: The optional third tool (``skills/scripts.py``), named here so the ``Skill`` result can
#: point to it; registered only when the user allows running skill scripts.
RUN_SKILL_SCRIPT_TOOL = "run_skill_script"
#: The folder of a skill whose files may be run (the specification's ``scripts/``).
SCRIPTS_DIR = "scripts"


#: Bytes of one resource file ``read_skill_file`` returns; the rest is cut with a note.
MAX_READ_BYTES = 64 * 1024
#: Resource files listed by ``Skill``; more are counted, not listed.
MAX_LISTED = 200


#: The catalog modes: ``reminder`` (an appended user message, the default) or ``prefix`` (in
#: the ``Skill`` tool's description, frozen with the session's prefix).
CatalogMode = Literal["reminder", "prefix"]
CATALOG_MODES: tuple[CatalogMode, ...] = ("reminder", "prefix")

#: What the model is told once per catalog, before the entries: the line format, then what to do.
_HOW_TO_USE = (
    f"Skills, one a line as name: description (its SKILL.md). When a task matches one, call {SKILL_TOOL}(name) "
    f"first; {READ_SKILL_FILE_TOOL}(name, path) reads the files it mentions."
)


@dataclass(frozen=True)
class CatalogEntry:
    """What the catalog says of one skill: its name, description and the location of its
    ``SKILL.md``. Recorded with a session in prefix mode, so a resume rebuilds the same bytes."""

    name: str
    description: str
    location: str

    @classmethod
    def of(cls, skill: Skill) -> CatalogEntry:
        return cls(skill.name, skill.description, str(skill.folder / spec.SKILL_FILE))

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "description": self.description, "location": self.location}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CatalogEntry:
        return cls(str(data.get("name", "")), str(data.get("description", "")), str(data.get("location", "")))


def _one_line(text: str) -> str:
    """``text`` with every run of whitespace that holds a line break turned into one space, so
    a description written over several lines (a YAML block scalar) stays on its skill's line."""
    return _LINE_BREAKS.sub(" ", text)


def _escaped_line(text: str) -> str:
    """``text`` with its line breaks written as ``\\n`` (a name or a path must stay exact, and
    still take one line)."""
    return _LINE_BREAK.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


#: The characters ``str.splitlines`` breaks on: any of them would start a new catalog line.
_LINE_BREAK = re.compile("[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")
_LINE_BREAKS = re.compile("\\s*" + _LINE_BREAK.pattern + "\\s*")


def catalog_line(entry: CatalogEntry) -> str:
    """One skill's catalog line: ``- name: description (location)``.

    One line per skill, not an XML element per field: the tags of
    ``<skill><name>…</name><description>…</description><location>…</location></skill>`` cost
    about 29 tokens a skill in a small model's tokenizer, paid on every call for every installed
    skill, where this costs about 5. ``&``, ``<`` and ``>`` are escaped, so no description can
    close the ``<available_skills>`` block the ledger recognises, and line breaks are
    neutralised, so one skill never spills onto the next one's line.
    """
    name = escape(_escaped_line(entry.name))
    description = escape(_one_line(entry.description).strip())
    location = escape(_escaped_line(entry.location))
    return f"- {name}: {description} ({location})"


def catalog_listing(entries: Iterable[CatalogEntry]) -> str:
    """The ``<available_skills>`` block, one :func:`catalog_line` per skill: the one rendering of
    the entries, for the reminder message and for the prefix-mode tool description alike."""
    return "\n".join([CATALOG_OPEN, *(catalog_line(e) for e in entries), CATALOG_CLOSE])


def catalog_message(skills: Sequence[Skill], *, first: bool = True) -> str:
    """The ``<system-reminder>`` user message listing ``skills`` (name, description, location).

    ``first=False`` words it as an addition, for skills found after the session announced others.
    """
    intro = _HOW_TO_USE if first else f"More skills, besides those listed before; load one with {SKILL_TOOL}(name)."
    return "\n".join([REMINDER_OPEN, intro, catalog_listing(CatalogEntry.of(s) for s in skills), REMINDER_CLOSE])


def announced_skills(session: Session) -> set[str]:
    """The skills the session's catalog messages have announced so far."""
    out: set[str] = set()
    for ev in session.events:
        if isinstance(ev, UserEvent) and ev.skills_announced is not None:
            out.update(ev.skills_announced)
    return out


def announce(session: Session, skills: Sequence[Skill]) -> tuple[list[str], str] | None:
    """Append one catalog message for the ``skills`` the session has not announced yet (each
    catalog ``UserEvent`` names its skills: ``UserEvent.skills_announced``), so a resumed session
    is not told twice and a skill added since gets one small reminder of its own. Returns the
    names announced and the message, or ``None`` when there was nothing new (reminder mode)."""
    announced = announced_skills(session)
    new = [s for s in skills if s.name not in announced]
    if not new:
        return None
    names = [s.name for s in new]
    text = catalog_message(new, first=not announced)
    session.add_user(text, **{SKILLS_CATALOG_KEY: names})
    return names, text


def resource_files(folder: Path) -> list[tuple[str, int]]:
    """``[(relative POSIX path, size)]`` of the regular files under ``folder`` other than
    ``SKILL.md``, sorted; symlinks and special files are not listed (nor followed)."""
    out: list[tuple[str, int]] = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False, onerror=lambda _e: None):
        dirnames.sort()
        for fname in sorted(filenames):
            full = Path(dirpath) / fname
            try:
                st = full.lstat()
            except OSError:
                continue
            rel = full.relative_to(folder).as_posix()
            if stat.S_ISREG(st.st_mode) and rel != spec.SKILL_FILE:
                out.append((rel, st.st_size))
    return sorted(out)


def unknown_skill(name: str, known: Iterable[str]) -> str:
    """The one line for a skill name that is not known: the closest names, then all of them
    (for the model's ``Skill`` call and for ``ctxwright skills show``)."""
    names = sorted(set(known))
    close = difflib.get_close_matches(name.strip(), names, n=3, cutoff=0.4)
    hint = f" Closest: {', '.join(close)}." if close else ""
    return f"there is no skill named {name!r}.{hint} Known skills: {', '.join(names) or '(none)'}"


class SkillTools:
    """``Skill`` and ``read_skill_file`` over a fixed set of loaded skills.

    A second ``Skill(name)`` returns a short pointer instead of the body again while the
    body is still in the context. What "still in the context" means is asked of
    :attr:`is_shown`: the harness answers from the session's rendered view
    (``compaction/skills.py``; a sub-agent's :meth:`fork` from the child's view), so a body a
    compaction dropped -- and named instead of re-attaching -- is returned whole again, and a
    resumed session knows what it shows. Alone (no harness), this object assumes every body it
    returned is still shown.

    ``frozen`` (prefix mode) is the catalog the session started with: it goes into the
    ``Skill`` tool's description, ``name`` becomes an enum of its names, and only those skills
    can be loaded (a skill added since is not in the prefix the model sees).
    """

    def __init__(
        self,
        skills: Iterable[Skill],
        *,
        max_read_bytes: int = MAX_READ_BYTES,
        scripts_allowed: bool = False,
        frozen: Sequence[CatalogEntry] | None = None,
    ) -> None:
        self.frozen: tuple[CatalogEntry, ...] | None = tuple(frozen) if frozen is not None else None
        allowed = {e.name for e in self.frozen} if self.frozen is not None else None
        self.skills: dict[str, Skill] = {}
        for s in skills:
            if allowed is None or s.name in allowed:
                self.skills.setdefault(s.name, s)  # the loader already kept the first of a name
        self.max_read_bytes = max_read_bytes
        #: whether ``run_skill_script`` is registered (``skills/scripts.py``): the ``Skill``
        #: result offers it only then, and otherwise says the scripts are not run here
        self.scripts_allowed = scripts_allowed
        #: skills whose full body this object returned, in order
        self.activated: list[str] = []
        #: whether the model's context still shows a skill's body (see the class docstring)
        self.is_shown: Callable[[str], bool] = lambda name: name in self.activated

    def fork(self) -> SkillTools:
        """The same skills and catalog with no activations: a sub-agent's own tools, whose
        schemas are byte-identical to these (its prefix is the parent's)."""
        return SkillTools(
            self.skills.values(),
            max_read_bytes=self.max_read_bytes,
            scripts_allowed=self.scripts_allowed,
            frozen=self.frozen,
        )

    def skill(self, name: str) -> Skill:
        """The skill called ``name``, or a :class:`SkillToolError` naming the closest ones."""
        return self._skill(name)

    def _skill(self, name: str) -> Skill:
        found = self.skills.get(name.strip())
        if found is not None:
            return found
        raise SkillToolError(unknown_skill(name, self.skills))

    def activate(self, name: str) -> str:
        """The ``Skill`` tool's text: the instructions and the resource list, or a pointer."""
        return self.load(name).content

    def load(self, name: str) -> ToolResult:
        """The ``Skill`` tool's result: :meth:`activate`'s text, flagged with the skill's name
        when it is the full body (not the pointer of a repeated activation), so compaction keeps
        it (``compaction/skills.py``) by that flag rather than by reading the text back."""
        skill = self._skill(name)
        if self.is_shown(skill.name):
            return ToolResult(
                f"{open_tag(skill.name)}Already loaded above: its instructions are in an earlier "
                f"{SKILL_TOOL}({skill.name!r}) result of this session; follow them.</skill_content>"
            )
        self.activated.append(skill.name)
        files = resource_files(skill.folder)
        listed = [f'<file path="{escape(rel, quote=True)}" bytes="{size}"/>' for rel, size in files[:MAX_LISTED]]
        if len(files) > MAX_LISTED:
            listed.append(f"<!-- {len(files) - MAX_LISTED} more files not listed -->")
        resources = (
            "<skill_resources>\n" + "\n".join(listed) + "\n</skill_resources>" if listed else "<skill_resources/>"
        )
        text = (
            f"{open_tag(skill.name)}\n{skill.body.strip()}\n</skill_content>\n"
            f"{resources}\n"
            f"Read a resource with {READ_SKILL_FILE_TOOL}(name={skill.name!r}, path=...)."
            f"{self._scripts_note(skill, files)}"
        )
        return ToolResult(text, skill=skill.name)

    def _scripts_note(self, skill: Skill, files: Sequence[tuple[str, int]]) -> str:
        """What the model may do with the skill's ``scripts/``: run them (only when the user
        allowed it), or nothing -- a skill written for another agent often says "run
        scripts/x.py", and a model not told otherwise would try a tool it does not have."""
        if not any(rel.startswith(f"{SCRIPTS_DIR}/") for rel, _ in files):
            return ""
        if self.scripts_allowed:
            return (
                f" Run a file under {SCRIPTS_DIR}/ with {RUN_SKILL_SCRIPT_TOOL}(name={skill.name!r}, "
                f"script='{SCRIPTS_DIR}/...', args=[...])."
            )
        return (
            f" Running skill scripts is off in this session: where the instructions say to run a file under "
            f"{SCRIPTS_DIR}/, tell the user that step needs it."
        )

    def resolve(self, skill: Skill, path: str, *, under: str = "") -> Path:
        """The real path of ``path`` inside ``skill``'s folder (and inside its ``under``
        subfolder when given), or a :class:`SkillToolError` the model can act on.

        One set of confinement checks for every tool that touches a skill's files (reading
        one, running a script): no absolute path, no ``..``, no missing file, and the symlink
        rule the loader applies to ``SKILL.md`` as well (:func:`ctxwright.skills.paths.inside`).
        A skill folder is third-party content and the path comes
        from the model, so either may try to reach files the user never offered.
        """
        raw = path.strip()
        if not raw:
            raise SkillToolError("path is empty: give a path relative to the skill's folder, e.g. 'scripts/run.py'")
        if raw.startswith(("/", "\\")) or os.path.isabs(raw):  # a drive letter: isabs on Windows
            raise SkillToolError(f"{path!r} is an absolute path: give a path relative to the skill's folder")
        if ".." in raw.replace("\\", "/").split("/"):
            raise SkillToolError(f"{path!r} contains '..': only files inside the skill's folder can be used")
        try:
            target = paths.inside(skill.folder, raw)
        except NoSuchSkillFile:
            raise SkillToolError(
                f"skill {skill.name!r} has no file {path!r}; {SKILL_TOOL}({skill.name!r}) lists its files"
            ) from None
        except SkillLinkLeavesFolder:
            raise SkillToolError(
                f"{path!r} is a link that leads outside the skill's folder; it cannot be used"
            ) from None
        if under and not target.is_relative_to(skill.folder.resolve() / under):
            raise SkillToolError(f"{path!r} is not under the skill's {under}/ folder; only files there can be run")
        return target

    def read(self, name: str, path: str) -> str:
        """The ``read_skill_file`` tool's body: one file of one skill, at most ``max_read_bytes``."""
        skill = self._skill(name)
        target = self.resolve(skill, path)
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
        try:
            st = os.stat(target)
            if not stat.S_ISREG(st.st_mode):
                raise SkillToolError(f"{path!r} is not a regular file (a folder, pipe or device); read a file")
            fd = os.open(target, flags)
            with os.fdopen(fd, "rb") as fh:
                if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                    raise SkillToolError(f"{path!r} is not a regular file; read a file")
                data = fh.read(self.max_read_bytes + 1)
        except OSError as exc:
            raise SkillToolError(f"cannot read {path!r}: {exc.strerror or exc}") from None
        if b"\x00" in data:
            raise SkillToolError(f"{path!r} is a binary file ({st.st_size} bytes); only text files can be read")
        text = data[: self.max_read_bytes].decode("utf-8", errors="replace")
        if len(data) > self.max_read_bytes:
            text += f"\n[cut: the file is {st.st_size} bytes; the first {self.max_read_bytes} are shown]"
        return text

    def tools(self) -> list[Tool]:
        """The two tools, in prefix order. Their schemas do not depend on the skills, except in
        prefix mode (``frozen``): then ``Skill``'s description holds the catalog and ``name``
        is an enum of its skills."""

        def skill_tool(name: str) -> ToolResult:
            """Load a skill's instructions (listed in <available_skills>) and the list of its files.

            Args:
                name: the skill's name, exactly as in <available_skills>.
            """
            return self.load(name)

        def read_skill_file(name: str, path: str) -> str:
            """Read one file of a skill (a script, a reference) listed in its <skill_resources>.

            Args:
                name: the skill's name.
                path: the file's path relative to the skill's folder, e.g. 'references/guide.md'.
            """
            return self.read(name, path)

        description = None
        if self.frozen:
            names = tuple(e.name for e in self.frozen)
            skill_tool.__annotations__ = {"name": cast(Any, Literal)[names], "return": ToolResult}
            description = (
                f"Load a skill's instructions and the list of its files. {_HOW_TO_USE}\n{catalog_listing(self.frozen)}"
            )
        return [
            # a skill's body is the instructions the user installed it for: trusted; its other
            # files are third-party resources (references, data): untrusted
            Tool.from_function(skill_tool, name=SKILL_TOOL, description=description, trust="trusted", effects="read"),
            Tool.from_function(read_skill_file, name=READ_SKILL_FILE_TOOL, trust="untrusted", effects="read"),
        ]


__all__ = [
    "CATALOG_MODES",
    "MAX_READ_BYTES",
    "READ_SKILL_FILE_TOOL",
    "RUN_SKILL_SCRIPT_TOOL",
    "SCRIPTS_DIR",
    "SKILL_TOOL",
    "SKILL_TOOLS",
    "CatalogEntry",
    "CatalogMode",
    "SkillTools",
    "announce",
    "announced_skills",
    "catalog_line",
    "catalog_listing",
    "catalog_message",
    "resource_files",
    "unknown_skill",
]
