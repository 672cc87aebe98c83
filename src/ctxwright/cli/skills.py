"""``ctxwright skills validate PATH... [--json]`` and ``ctxwright skills list [--skills DIR ...]``.

``validate`` is strict (every rule of the Agent Skills specification, for authors and CI)
and exits 1 when any skill is invalid; ``list`` loads the way an agent would, leniently,
and prints the warnings on stderr. See ``docs/skills.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_skills_parser(sub: Any) -> None:
    """Register ``skills`` (with ``validate`` and ``list``) on the ``ctxwright`` subcommand parser."""
    sk = sub.add_parser("skills", help="validate or list Agent Skills (folders with a SKILL.md)")
    sk_sub = sk.add_subparsers(dest="skills_command", required=True)
    va = sk_sub.add_parser("validate", help="check skill folders against every rule of the specification")
    va.add_argument("paths", nargs="+", metavar="PATH", help="a skill folder, or a folder of skill folders")
    va.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    va.set_defaults(func=cmd_validate)
    ls = sk_sub.add_parser("list", help="list the skills an agent would load, and why any was skipped")
    ls.add_argument(
        "--skills",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder of skill folders (repeatable); searched before ./.agents/skills and ~/.agents/skills",
    )
    ls.set_defaults(func=cmd_list)


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
