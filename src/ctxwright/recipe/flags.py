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

__all__ = ["Approver", "add_arguments", "flag_names", "given_from_args"]

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


def add_arguments(parser: argparse.ArgumentParser, sections: tuple[str, ...] | None = None) -> None:
    """Add every option's flags to ``parser`` (``ctxwright run``, ``ctxwright tools list``),
    with their argparse groups, in declaration order; ``sections``: only those of these
    sections of the recipe (``ctxwright proxy`` takes the ``telemetry`` flags)."""
    groups: dict[str, Any] = {}
    for _, f in _flagged(sections):
        target: Any = parser
        if f.group is not None:
            if f.group not in groups:
                groups[f.group] = parser.add_argument_group(f.group)
            target = groups[f.group]
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
