"""Find skill folders, load them leniently, validate them strictly.

Lenient loading is what the specification's client guide asks of an agent: a skill with a
cosmetic problem (a name that differs from its folder, a name too long) still loads, with a
warning; one that cannot be used (no description, front matter that does not parse) is
skipped, with a warning; nothing a skill folder contains ever crashes the loader.

Strict validation (:func:`validate`) is for authors and CI: every rule of
:mod:`ctxwright.skills.spec`, each failure one line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import yaml

from ctxwright.errors import FrontMatterRefused, NoSuchSkillFile, SkillLinkLeavesFolder
from ctxwright.skills import paths, spec

#: Characters of a description the lenient loader keeps: a description over the
#: specification's 1,024 loads (with a warning) whole up to this, so a skill written for a
#: more tolerant client keeps its "when to use" wording; past it, it is cut, because the
#: catalog sends it with every request.
LENIENT_DESCRIPTION_MAX = 4 * spec.DESCRIPTION_MAX

#: Conventional locations, relative to the project root and to the user's home.
CONVENTIONAL = Path(".agents") / "skills"


@dataclass(frozen=True)
class Skill:
    """One loaded skill: what its front matter says, its instructions, where it lives."""

    name: str
    description: str
    folder: Path
    body: str
    front_matter: dict[str, Any]
    source: str  # "given", "project" or "user"


@dataclass
class LoadResult:
    """The skills that loaded, in discovery order, and a warning for everything tolerated."""

    skills: list[Skill] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: each folder that was not loaded, with the warning (one of ``warnings``) that says why
    skipped: dict[Path, str] = field(default_factory=dict)


@dataclass
class ValidationResult:
    """The strict verdict on one skill folder; ``valid`` when there is no error."""

    path: Path
    name: str | None = None
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    description_chars: int | None = None
    resource_files: int = 0

    @property
    def valid(self) -> bool:
        return not self.errors

    def as_json(self) -> dict[str, Any]:
        """The ``ctxwright skills validate --json`` entry, exactly these keys."""
        return {
            "path": str(self.path),
            "name": self.name,
            "valid": self.valid,
            "errors": list(self.errors),
            "warnings": list(self.warnings),
            "description_chars": self.description_chars,
            "resource_files": self.resource_files,
        }


# --- reading one SKILL.md ---------------------------------------------------------------


def read_skill_md(folder: Path) -> tuple[str | None, list[str], list[str]]:
    """``(text, errors, warnings)`` of the folder's ``SKILL.md``: text is None when the file
    cannot be used at all (too big, unreadable, a link that leads out of the folder). Bytes
    that are not UTF-8 are replaced, with a warning.

    A ``SKILL.md`` that is a symlink is judged by the rule ``read_skill_file`` applies to every
    other file of the skill (:func:`ctxwright.skills.paths.inside`): its body becomes the
    agent's trusted instructions, so a link to a file elsewhere must not smuggle one in."""
    try:
        path = paths.inside(folder, spec.SKILL_FILE)
    except SkillLinkLeavesFolder:
        return (
            None,
            [
                f"{spec.SKILL_FILE} is a link that leads outside the skill's folder; "
                "copy the file into the folder instead of linking to it"
            ],
            [],
        )
    except NoSuchSkillFile:
        return None, [f"{spec.SKILL_FILE}: cannot read it (missing, a dangling link or a link loop)"], []
    try:
        size = path.stat().st_size
        if size > spec.MAX_FILE_BYTES:
            return (
                None,
                [
                    f"{spec.SKILL_FILE}: {size} bytes, more than the {spec.MAX_FILE_BYTES} a skill may have; "
                    "move detail into resource files"
                ],
                [],
            )
        with path.open("rb") as fh:
            raw = fh.read(spec.MAX_FILE_BYTES + 1)
    except OSError as exc:
        return None, [f"{spec.SKILL_FILE}: cannot read it ({exc.strerror or exc})"], []
    if len(raw) > spec.MAX_FILE_BYTES:
        return None, [f"{spec.SKILL_FILE}: more than {spec.MAX_FILE_BYTES} bytes; move detail into resource files"], []
    try:
        return raw.decode("utf-8-sig"), [], []
    except UnicodeDecodeError as exc:
        text = raw.decode("utf-8", errors="replace")
        return text, [], [f"{spec.SKILL_FILE}: not valid UTF-8 (byte {exc.start}); undecodable bytes were replaced"]


def split_front_matter(text: str) -> tuple[str | None, str, str | None]:
    """``(front matter, body, problem)``: the YAML between a first line ``---`` and the next
    line ``---``. Without an opening line the front matter is None; unclosed, the problem says so."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        return None, text, "no front matter: SKILL.md must start with a `---` line, the YAML, then `---`"
    for i in range(1, len(lines)):
        if lines[i].rstrip("\r\n").rstrip() == "---":
            return "".join(lines[1:i]), "".join(lines[i + 1 :]), None
    return None, text, "front matter not closed: add a `---` line after the YAML"


_KEY_VALUE = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z0-9_-]+):[ \t]+(?P<value>\S.*?)\s*$")


def quote_colon_values(front: str) -> str:
    """Quote every plain value that contains ``: `` (``description: Use when: x``), which YAML
    reads as a nested map and rejects. Authors write this often; the client guide asks to retry."""
    out: list[str] = []
    for line in front.splitlines():
        m = _KEY_VALUE.match(line)
        value = m.group("value") if m else ""
        if m and ": " in value and value[0] not in "\"'[{|>&*!#":
            escaped = value.replace("\\", "\\\\").replace('"', '\\"')
            line = f'{m.group("indent")}{m.group("key")}: "{escaped}"'
        out.append(line)
    return "\n".join(out) + "\n"


#: What aliases (``*name``, and ``<<: *name`` merges) may add to a front matter, counted as the
#: characters of the scalars they repeat plus one per value. PyYAML does not copy an aliased
#: value, it shares it, so a "billion laughs" (nine aliases of nine aliases of ... of ``lol``)
#: parses in microseconds into a map that every reader expanding it -- ``skills show`` printing
#: it as JSON, a recorder, a validator walking it -- grows until memory runs out. A real front
#: matter is a few flat fields and needs no aliases at all; the bound allows ten repeats of the
#: longest description the specification permits (1,024 characters), so an author who shares a
#: value or two loses nothing, while a bomb of 1 KB reaches it at its fourth level.
ALIAS_EXPANSION_MAX = 10 * spec.DESCRIPTION_MAX

#: Levels of nesting a front matter may have. The specification's front matter is two levels
#: deep (the fields, ``metadata``'s map); PyYAML composes recursively, a few Python frames a
#: level, so a file of ten thousand ``[`` would otherwise end in a ``RecursionError``.
NESTING_MAX = 32


def _refusal(problem: str, mark: object) -> FrontMatterRefused:
    return FrontMatterRefused(problem, mark.line if isinstance(mark, yaml.error.Mark) else None)


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing what would make the value it builds blow up: aliases that
    repeat more than :data:`ALIAS_EXPANSION_MAX`, an alias inside the value it names (a value
    that contains itself, endless to print), nesting deeper than :data:`NESTING_MAX`.

    Counted while the document is composed, before any Python object exists, so the cost is
    linear in the text whatever it holds: each anchored value's expanded size is computed once."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._repeated = 0
        self._open: set[str] = set()  # anchors of the values being composed
        self._sizes: dict[int, int] = {}  # id(node) -> expanded size, for completed nodes

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            self._count_alias(event)
            return cast(yaml.Node, super().compose_node(parent, index))
        if self._depth >= NESTING_MAX:
            raise _refusal(
                f"nested deeper than {NESTING_MAX} levels; the fields are flat text, metadata a map of strings",
                event.start_mark,
            )
        anchor = getattr(event, "anchor", None)
        self._depth += 1
        if anchor is not None:
            self._open.add(anchor)
        try:
            return cast(yaml.Node, super().compose_node(parent, index))
        finally:
            self._depth -= 1
            if anchor is not None:
                self._open.discard(anchor)

    def _count_alias(self, event: yaml.AliasEvent) -> None:
        node = self.anchors.get(event.anchor)
        if node is None:
            return  # PyYAML's own "found undefined alias"
        if event.anchor in self._open:
            raise _refusal(
                f"alias *{event.anchor} is inside the value it names (a value that contains itself); remove it",
                event.start_mark,
            )
        self._repeated += self._size(node)
        if self._repeated > ALIAS_EXPANSION_MAX:
            raise _refusal(
                f"its aliases repeat more than {ALIAS_EXPANSION_MAX:,} characters (an alias bomb?); "
                "write the values out instead of repeating them with *aliases",
                event.start_mark,
            )

    def _size(self, node: yaml.Node) -> int:
        """Characters of the scalars in ``node`` once every alias in it is expanded, plus one a
        value; memoised, so a value aliased a billion times over is still measured in one pass."""
        known = self._sizes.get(id(node))
        if known is not None:
            return known
        if isinstance(node, yaml.ScalarNode):
            size = 1 + len(str(node.value))
        elif isinstance(node, yaml.SequenceNode):
            size = 1 + sum(self._size(item) for item in node.value)
        elif isinstance(node, yaml.MappingNode):
            size = 1 + sum(self._size(k) + self._size(v) for k, v in node.value)
        else:
            size = 1
        self._sizes[id(node)] = size
        return size


class _UniqueKeyLoader(_BoundedLoader):
    """The bounded loader, refusing a key given twice in one map.

    YAML requires the keys of a map to be unique; PyYAML silently keeps the last one, so
    ``name: a`` ... ``name: b`` would validate as ``b`` while the reference validator
    (strictyaml) and other clients refuse the file or read ``a``."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str | int | float | bool) and key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key if isinstance(key, str | int | float | bool) else id(key_node))
        return super().construct_mapping(node, deep=deep)


def _load_yaml(text: str, *, unique: bool) -> Any:
    """The one place front matter text becomes data: every path (loading, ``skills list``,
    ``show``, ``validate``) parses through the bounded loaders."""
    return yaml.load(text, Loader=_UniqueKeyLoader if unique else _BoundedLoader)  # both safe loaders


def parse_front_matter(front: str, *, retry_colons: bool) -> tuple[dict[str, Any] | None, str | None, bool]:
    """``(mapping, error, retried)`` for the front matter text (PyYAML's safe loader, bounded).

    Strict (``retry_colons=False``): a key given twice is an error. Lenient: it is read as
    PyYAML reads it, the last value winning (:func:`duplicate_key` finds it for a warning).
    A front matter past the bounds of :class:`_BoundedLoader` is refused in both modes."""
    try:
        data = _load_yaml(front, unique=not retry_colons)
        retried = False
    except FrontMatterRefused as exc:
        return None, _refused(exc), False
    except yaml.YAMLError as exc:
        if not retry_colons:
            hint = "; quote values that contain `: `" if "mapping values" in str(exc) else ""
            return None, f"front matter is not valid YAML ({_yaml_line(exc)}){hint}", False
        try:
            data = _load_yaml(quote_colon_values(front), unique=False)
            retried = True
        except FrontMatterRefused as again:
            return None, _refused(again), False
        except yaml.YAMLError:
            return None, f"front matter is not valid YAML ({_yaml_line(exc)})", False
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return None, f"front matter must be a YAML map of fields, got {type(data).__name__}", retried
    return {str(k): v for k, v in data.items()}, None, retried


def duplicate_key(front: str) -> str | None:
    """The problem of a front matter that parses except for a key given twice, else ``None``."""
    try:
        _load_yaml(front, unique=True)
    except yaml.constructor.ConstructorError as exc:
        if "duplicate key" in str(exc):
            return _yaml_line(exc)
    except (yaml.YAMLError, FrontMatterRefused):
        return None
    return None


def _refused(exc: FrontMatterRefused) -> str:
    where = f" at line {exc.line + 2}" if exc.line is not None else ""
    return f"front matter refused{where}: {exc.problem}"


def _yaml_line(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or "parse error"
    return f"{problem} at line {mark.line + 2}" if mark is not None else str(problem)


# --- lenient loading -----------------------------------------------------------------------


def load_skill(folder: Path, source: str = "given") -> tuple[Skill | None, list[str]]:
    """One skill folder, leniently: ``(skill or None, warnings)``, each warning naming the folder."""
    where = str(folder)
    text, errors, warnings = read_skill_md(folder)
    notes = [f"{where}: {w}" for w in warnings]
    if text is None:
        return None, [*notes, *(f"{where}: skipped: {e}" for e in errors)]
    front_text, body, problem = split_front_matter(text)
    if front_text is None:
        return None, [*notes, f"{where}: skipped: {problem}"]
    front, error, retried = parse_front_matter(front_text, retry_colons=True)
    if front is None:
        return None, [*notes, f"{where}: skipped: {error}"]
    if retried:
        notes.append(f"{where}: front matter parsed after quoting values that contain `: `; quote them in the file")
    elif (dup := duplicate_key(front_text)) is not None:
        notes.append(f"{where}: front matter has a {dup}; the last value is used, remove the other")
    description = front.get("description")
    if not isinstance(description, str) or not description.strip():  # nothing to put in the catalog
        return None, [*notes, f"{where}: skipped: {spec.check_description(description)[0]}"]
    # too long: the client guide skips a skill only for a missing description or unparseable
    # YAML, and real skills exceed the limit (anthropics/skills' claude-api has 1,068 characters)
    notes.extend(f"{where}: {e}; loaded anyway" for e in spec.check_description(description))
    raw_name = front.get("name")
    if isinstance(raw_name, str) and raw_name.strip():
        name = spec.normalize_name(raw_name.strip())
        for e in spec.check_name(raw_name, folder.name):
            notes.append(f"{where}: {e}")
    else:
        name = folder.name
        notes.append(f"{where}: name missing or not a string; using the folder name {name!r}")
    if len(description) > LENIENT_DESCRIPTION_MAX:  # the catalog carries it on every call: bounded
        notes.append(f"{where}: description cut to its first {LENIENT_DESCRIPTION_MAX} characters in the catalog")
        description = description[:LENIENT_DESCRIPTION_MAX]
    return Skill(name, description, folder, body, front, source), notes


def _subfolders(root: Path, warnings: list[str]) -> list[Path]:
    """Direct subfolders of ``root`` that hold a ``SKILL.md``, sorted; problems become warnings."""
    try:
        entries = sorted(root.iterdir())
    except OSError as exc:
        warnings.append(f"{root}: cannot list it ({exc.strerror or exc}); skipped")
        return []
    found: list[Path] = []
    for entry in entries:
        try:
            entry.stat()  # follows symlinks: a loop or dangling link raises here
        except OSError as exc:
            warnings.append(f"{entry}: cannot follow it ({exc.strerror or exc}); skipped")
            continue
        if entry.is_dir() and (entry / spec.SKILL_FILE).is_file():
            found.append(entry)
    return found


def discover(
    dirs: Iterable[Path | str] = (),
    *,
    project_dir: Path | str | None = None,
    home: Path | str | None = None,
) -> tuple[list[tuple[Path, str]], list[str]]:
    """``([(skill folder, source)], warnings)``: each given directory first (a skill folder or a
    folder of skill folders), then ``<project>/.agents/skills/``, then ``~/.agents/skills/``.
    ``project_dir=None`` means the current directory; pass ``home`` to override ``~``."""
    warnings: list[str] = []
    out: list[tuple[Path, str]] = []
    roots: list[tuple[Path, str]] = [(Path(d).expanduser(), "given") for d in dirs]
    roots.append((Path(project_dir if project_dir is not None else Path.cwd()) / CONVENTIONAL, "project"))
    roots.append((Path(home if home is not None else Path.home()) / CONVENTIONAL, "user"))
    seen: set[Path] = set()
    for root, source in roots:
        if source != "given" and not root.is_dir():
            continue  # a conventional location that does not exist is normal
        if not root.is_dir():
            warnings.append(f"{root}: not a directory; skipped")
            continue
        folders = [root] if (root / spec.SKILL_FILE).is_file() else _subfolders(root, warnings)
        for folder in folders:
            key = folder.resolve()
            if key not in seen:
                seen.add(key)
                out.append((folder, source))
    return out, warnings


def load_skills(
    dirs: Sequence[Path | str] = (),
    *,
    project_dir: Path | str | None = None,
    home: Path | str | None = None,
) -> LoadResult:
    """Discover and leniently load every skill. On a name clash the first found wins (given
    directories, then the project, then the user), with a warning naming both folders."""
    folders, warnings = discover(dirs, project_dir=project_dir, home=home)
    result = LoadResult(warnings=warnings)
    by_name: dict[str, Skill] = {}
    for folder, source in folders:
        skill, notes = load_skill(folder, source)
        result.warnings.extend(notes)
        if skill is None:
            if notes:  # load_skill's last note is the reason it skipped the folder
                result.skipped[folder] = notes[-1]
            continue
        first = by_name.get(skill.name)
        if first is not None:
            why = (
                "the project's skill wins over the user's"
                if (first.source, source) == ("project", "user")
                else ("the first found wins")
            )
            result.warnings.append(
                f"two skills named {skill.name!r}: {first.folder} ({first.source}) and {folder} ({source}); {why}"
            )
            continue
        by_name[skill.name] = skill
        result.skills.append(skill)
    return result


# --- strict validation ----------------------------------------------------------------------


def resource_files(folder: Path) -> int:
    """Regular files under ``folder`` other than ``SKILL.md`` and a license file; symlinks are
    not followed (no loop can hang this)."""
    count = 0
    for dirpath, _dirnames, filenames in os.walk(folder, followlinks=False):
        top = Path(dirpath) == folder
        for fn in filenames:
            if top and (fn == spec.SKILL_FILE or fn in spec.LICENSE_FILES):
                continue
            p = Path(dirpath) / fn
            if p.is_file() and not p.is_symlink():
                count += 1
    return count


def validate(path: Path | str) -> ValidationResult:
    """Every rule of the specification on the skill folder ``path`` (or its ``SKILL.md``)."""
    folder = Path(path)
    if folder.name == spec.SKILL_FILE and folder.is_file():
        folder = folder.parent
    result = ValidationResult(path=folder)
    skill_md = folder / spec.SKILL_FILE
    if not folder.is_dir():
        result.errors.append(f"{folder}: not a directory; give a skill folder (one with a SKILL.md)")
        return result
    if not skill_md.is_file():
        result.errors.append(f"{folder}: no {spec.SKILL_FILE} in this folder")
        return result
    result.resource_files = resource_files(folder)
    text, errors, warnings = read_skill_md(folder)
    result.errors.extend(errors)
    if warnings:  # strictly, SKILL.md is UTF-8
        result.errors.extend(w.replace("were replaced", "are not allowed") for w in warnings)
    if text is None:
        return result
    front_text, body, problem = split_front_matter(text)
    if front_text is None:
        assert problem is not None
        result.errors.append(problem)
        return result
    front, error, _ = parse_front_matter(front_text, retry_colons=False)
    if front is None:
        assert error is not None
        result.errors.append(error)
        return result
    name = front.get("name")
    if isinstance(name, str):
        result.name = spec.normalize_name(name.strip())
    description = front.get("description")
    if isinstance(description, str):
        result.description_chars = len(description)
    result.errors.extend(spec.check_front_matter(front, folder.name))
    result.warnings.extend(spec.body_warnings(body))
    return result


def skill_folders(path: Path | str) -> list[Path]:
    """``path`` itself when it holds a ``SKILL.md``, else its direct subfolders that do;
    ``[path]`` when neither (so :func:`validate` reports what is missing)."""
    p = Path(path)
    if p.is_file() or (p / spec.SKILL_FILE).is_file() or not p.is_dir():
        return [p]
    found = _subfolders(p, [])
    return found or [p]
