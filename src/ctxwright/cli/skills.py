"""``ctxwright skills validate PATH... [--json]``, ``ctxwright skills list [--skills DIR ...]`` and
``ctxwright skills show NAME [--skills DIR ...]``.

``validate`` is strict (every rule of the Agent Skills specification, for authors and CI)
and exits 1 when any skill is invalid; ``list`` and ``show`` load the way an agent would,
leniently, and print the warnings on stderr. ``show`` prints what the agent would get: the
front matter, the location, the body and the resource files. See ``docs/skills.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

#: the command's line in ``ctxwright --help``: cli/main.py lists it without building the parser
HELP = "validate or list Agent Skills (folders with a SKILL.md)"


def add_skills_parser(sub: Any) -> None:
    """Register ``skills`` (with ``validate`` and ``list``) on the ``ctxwright`` subcommand parser."""
    sk = sub.add_parser("skills", help=HELP)
    sk_sub = sk.add_subparsers(dest="skills_command", required=True)
    va = sk_sub.add_parser("validate", help="check skill folders against every rule of the specification")
    va.add_argument("paths", nargs="+", metavar="PATH", help="a skill folder, or a folder of skill folders")
    va.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    va.set_defaults(func=cmd_validate)
    ls = sk_sub.add_parser("list", help="list the skills an agent would load, and why any was skipped")
    _add_skills_option(ls)
    ls.set_defaults(func=cmd_list)
    sh = sk_sub.add_parser("show", help="print one skill: front matter, location, body and resource files")
    sh.add_argument("name", metavar="NAME", help="the skill's name, as `ctxwright skills list` prints it")
    _add_skills_option(sh)
    sh.set_defaults(func=cmd_show)


def _add_skills_option(parser: Any) -> None:
    parser.add_argument(
        "--skills",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder of skill folders (repeatable); searched before ./.agents/skills and ~/.agents/skills",
    )


def cmd_validate(args: argparse.Namespace) -> int:
    from ctxwright.skills.loader import skill_folders, validate

    results = [validate(folder) for path in args.paths for folder in skill_folders(path)]
    if args.json:
        print(json.dumps({"skills": [r.as_json() for r in results]}, ensure_ascii=False, indent=1))
    else:
        for r in results:
            verdict = "valid" if r.valid else "INVALID"
            print(f"{r.path}: {verdict}" + (f" ({r.name})" if r.name else ""))
            for e in r.errors:
                print(f"  error: {e}")
            for w in r.warnings:
                print(f"  warning: {w}")
    return 0 if all(r.valid for r in results) else 1


def cmd_list(args: argparse.Namespace) -> int:
    from ctxwright.skills.loader import load_skills

    result = load_skills(args.skills)
    for w in result.warnings:
        print(f"ctxwright: warning: {w}", file=sys.stderr)
    if not result.skills:
        print("no skills found (looked in --skills, ./.agents/skills and ~/.agents/skills)")
        return 0
    for s in result.skills:
        desc = " ".join(s.description.split())
        desc = desc if len(desc) <= 100 else desc[:99] + "…"
        print(f"{s.name}  [{s.source}]  {s.folder}\n    {desc}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """One skill as an agent would load it: each front matter field, the location, the body,
    then the resource files (relative paths and sizes, as ``Skill`` lists them). An unknown
    name is one line with the closest names, and exit status 1."""
    from ctxwright.skills import spec
    from ctxwright.skills.loader import load_skills
    from ctxwright.skills.tools import resource_files, unknown_skill

    result = load_skills(args.skills)
    name = args.name.strip()
    found = next((s for s in result.skills if s.name == name), None)
    # A skill folder of that name that was skipped: its reason is the one line to print (the
    # specification has a skill's name equal its folder's), not a warning and "no skill named".
    skipped = None if found else next((w for f, w in result.skipped.items() if f.name == name), None)
    for w in result.warnings:
        if w is not skipped:
            print(f"ctxwright: warning: {w}", file=sys.stderr)
    if skipped is not None:
        print(f"ctxwright skills show: {skipped}", file=sys.stderr)
        return 1
    if found is None:
        print(
            f"ctxwright skills show: {unknown_skill(args.name, (s.name for s in result.skills))} "
            "(looked in --skills, ./.agents/skills and ~/.agents/skills)",
            file=sys.stderr,
        )
        return 1
    for key, value in found.front_matter.items():
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
        print(f"{key}: {shown}")
    print(f"location: {(found.folder / spec.SKILL_FILE).absolute()}  [{found.source}]")
    print("--- body ---")
    print(found.body.strip())
    files = resource_files(found.folder)
    print(f"--- resource files ({len(files)}) ---")
    for rel, size in files:
        print(f"{rel}  {size:,} bytes")
    return 0
