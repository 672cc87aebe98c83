"""The ``ctxwright run`` flags, built from the declaration, and the keywords they give.

Why generated: ``ctxwright run`` and ``ctxwright tools list`` take the same flags, and a
Python user the same keywords; a flag written by hand next to its keyword drifted from it
(another default in the help than in the code, a keyword without its flag). Here each
flag is the :class:`~ctxwright.recipe.declare.Flag` of its option, and
:func:`given_from_args` maps the parsed flags back to only the keywords *given* -- on
``--resume`` every other one is the session's.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from ctxwright.recipe.declare import Flag, OptionSpec, options
from ctxwright.recipe.options import Recipe

__all__ = [
    "OUTPUT_GROUP",
    "SESSION_GROUP",
    "Approver",
    "add_arguments",
    "argument_group",
    "flag_names",
    "given_from_args",
    "group_of",
]

#: ``--help`` groups. A flag is listed under its own ``Flag.group`` when it declares one (the
#: compaction layers, the confirmation gate, telemetry), else under its recipe section's
#: (:data:`SECTION_GROUPS`): ``ctxwright run`` takes some 80 flags, and one flat list of them
#: hid the few a user looks for.
MODEL_GROUP = "model (backend, endpoint, retries, provider cache)"
PREFIX_GROUP = "prefix and messages (what every request starts with)"
LIMITS_GROUP = "limits (iterations, tokens, tool rounds)"
TOOLS_GROUP = "tools (functions, deferred loading and search, delegation)"
SKILLS_GROUP = "skills (docs/skills.md)"
MCP_GROUP = "MCP servers (docs/tools.md)"
STATUS_GROUP = "status bar and todo list (docs/status-bar.md)"
DEFENCE_GROUP = "defence against prompt injection (docs/defence.md)"
#: the session a run continues and the store it is recorded in (``--resume``, ``--db``, ...)
SESSION_GROUP = "session and store"
#: what is printed or written about a run (``--wide``, ``--report``, ``--prices``)
OUTPUT_GROUP = "output (tables, report, prices)"

#: the compaction section's flags declare their group (``recipe/options.py``); one added without joins it
COMPACTION_GROUP = next(g for s in options(Recipe) if s.section == "compaction" for f in s.flags if (g := f.group))

#: A section's group (``""``: the recipe's top-level options).
SECTION_GROUPS = {
    "model": MODEL_GROUP,
    "reasoning": MODEL_GROUP,
    "limits": LIMITS_GROUP,
    "compaction": COMPACTION_GROUP,
    "status": STATUS_GROUP,
    "todo": STATUS_GROUP,
    "delegate": TOOLS_GROUP,
    "deferral": TOOLS_GROUP,
    "skills": SKILLS_GROUP,
    "mcp": MCP_GROUP,
    "defence": DEFENCE_GROUP,
    "runtime": PREFIX_GROUP,
    "": PREFIX_GROUP,
}
#: The options whose group is not their section's: the runtime section holds the prompt, the
#: tools and the prices alike; the top level the timestamps, the cache refresh and the workspace.
KEYWORD_GROUPS = {"tools": TOOLS_GROUP, "workspace": TOOLS_GROUP, "prices": OUTPUT_GROUP, "keep_warm": MODEL_GROUP}

#: Turns ``--approve MODE`` and ``--approve-timeout SECONDS`` into the ``approve`` keyword
#: (the CLI's asks y/N on a terminal: ``cli/approve.py``).
Approver = Callable[[str | None, float | None], Any]

#: Levels whose confirmation gate needs an ``approve`` even when no gate flag is given.
_GATED_LEVELS = ("gate", "provenance", "D4", "D5", "d4", "d5")


def _flagged(sections: tuple[str, ...] | None = None) -> list[tuple[OptionSpec, Flag]]:
    return [(spec, f) for spec in options(Recipe) if sections is None or spec.section in sections for f in spec.flags]


def flag_names() -> list[str]:
    """Every flag the declaration defines, in declaration order (``--x`` and ``--no-x``)."""
    return [name for _, f in _flagged() for name in f.names]


def group_of(spec: OptionSpec, flag: Flag) -> str:
    """The ``--help`` group a flag is listed under (see :data:`SECTION_GROUPS`)."""
    if flag.group is not None:
        return flag.group
    if spec.keyword in KEYWORD_GROUPS:
        return KEYWORD_GROUPS[spec.keyword]
    return SECTION_GROUPS.get(spec.section, PREFIX_GROUP)


def argument_group(parser: argparse.ArgumentParser, groups: dict[str, Any], title: str) -> Any:
    """The argument group ``title`` of ``parser``, made the first time it is asked for."""
    if title not in groups:
        groups[title] = parser.add_argument_group(title)
    return groups[title]


def add_arguments(
    parser: argparse.ArgumentParser,
    sections: tuple[str, ...] | None = None,
    groups: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Add every option's flags to ``parser`` (``ctxwright run``, ``ctxwright tools list``),
    each in its argparse group (:func:`group_of`; in the order the groups are first met), in
    declaration order within a group; ``sections``: only those of these sections of the recipe
    (``ctxwright proxy`` takes the ``telemetry`` flags). ``groups`` (title -> group) is filled
    and returned, so the caller adds its own flags to the same groups (:func:`argument_group`)."""
    groups = {} if groups is None else groups
    flagged = _flagged(sections)
    order = [MODEL_GROUP, PREFIX_GROUP, TOOLS_GROUP, LIMITS_GROUP]  # what a user sets first, listed first
    for title in dict.fromkeys([*order, *(group_of(spec, f) for spec, f in flagged)]):
        if any(group_of(spec, f) == title for spec, f in flagged):
            argument_group(parser, groups, title)
    for spec, f in flagged:
        target = argument_group(parser, groups, group_of(spec, f))
        dest, text = f.destination, f.help_text()
        if f.action == "switch":  # left unset (None), the harness decides (often by backend)
            pair = target.add_mutually_exclusive_group()
            pair.add_argument(f.name, dest=dest, action="store_true", default=None, help=text)
            pair.add_argument(f.names[1], dest=dest, action="store_false")
        elif f.action == "true":
            target.add_argument(f.name, dest=dest, action="store_true", help=text)
        elif f.action == "append":
            target.add_argument(f.name, dest=dest, action="append", metavar=f.metavar, help=text)
        else:
            target.add_argument(f.name, dest=dest, type=f.type, metavar=f.metavar, choices=f.choices, help=text)
    return groups


def given_from_args(args: argparse.Namespace, *, approver: Approver | None = None) -> dict[str, Any]:
    """The ``Harness`` keywords of the flags given in ``args`` (parsed by a parser
    :func:`add_arguments` built), only those given. ``--system``/``--system-text`` and
    ``--tool`` are left to the caller (a file to read, functions to import: ``cli/main.py``). ``approve`` is given whenever the gate
    may run -- a gate flag, or a level with a gate -- as ``approver(mode, timeout)`` makes it
    (without one: the ``--approve`` mode as given)."""
    out: dict[str, Any] = {}
    for spec in options(Recipe):
        if not spec.flags or spec.keyword is None or spec.section == "runtime" or spec.keyword == "approve":
            continue
        if spec.from_flags is not None:
            value = spec.from_flags({f.key or f.destination: getattr(args, f.destination, None) for f in spec.flags})
        else:
            f = spec.flags[0]
            value = getattr(args, f.destination, None)
            if f.action == "true":
                value = True if value else None
        if value is not None:
            out[spec.keyword] = value
    mode, timeout = getattr(args, "approve", None), getattr(args, "approve_timeout", None)
    gated = bool(out.get("allow") or out.get("gate_rules") or mode or timeout is not None)
    if gated or out.get("defence") in _GATED_LEVELS:
        approve = approver(mode, timeout) if approver is not None else mode
        if approve is not None:
            out["approve"] = approve
    return out
