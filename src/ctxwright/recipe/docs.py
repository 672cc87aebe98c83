"""The ``Harness`` signature, its docstring's Args and ``docs/options.md``, from the declaration.

``python -m ctxwright.recipe [PATH]`` writes the options table (default
``docs/options.md``); a test fails when the file differs from what the declaration gives,
so the table cannot drift from the code.
"""

from __future__ import annotations

import inspect
import textwrap
from pathlib import Path

from ctxwright.recipe.declare import OptionSpec, options
from ctxwright.recipe.options import Recipe

__all__ = ["harness_doc", "harness_parameters", "options_table", "write_options_table"]

#: ``Harness(system, tools, **keywords)``: the two it takes by position as well.
POSITIONAL = ("system", "tools")


def _keyword_specs() -> list[OptionSpec]:
    specs = [s for s in options(Recipe) if s.keyword is not None]
    by_kw = {s.keyword: s for s in specs}
    return [by_kw[k] for k in POSITIONAL] + [s for s in specs if s.keyword not in POSITIONAL]


def _signature_default(spec: OptionSpec) -> object:
    """``None`` (not given) for every keyword that takes it, so a resume can tell a value left
    out from one given again; the declared default otherwise (``take_over=False``)."""
    return None if "None" in spec.accepts.split(" | ") else spec.default


def harness_parameters() -> list[inspect.Parameter]:
    """The ``Harness`` parameters (without ``self``): ``system`` and ``tools`` positional or
    keyword, every other keyword-only; annotations as text, as under
    ``from __future__ import annotations``. ``inspect.Signature(harness_parameters())`` is
    what ``Harness.__signature__`` should be."""
    out = []
    for spec in _keyword_specs():
        assert spec.keyword is not None
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD if spec.keyword in POSITIONAL else inspect.Parameter.KEYWORD_ONLY
        out.append(inspect.Parameter(spec.keyword, kind, default=_signature_default(spec), annotation=spec.accepts))
    return out


def harness_doc(width: int = 100) -> str:
    """The ``Args:`` section of the ``Harness`` docstring: every keyword and its help."""
    lines = ["Args:"]
    for spec in _keyword_specs():
        lines.extend(
            textwrap.wrap(
                f"{spec.keyword}: {spec.help}",
                width=width,
                initial_indent="    ",
                subsequent_indent="        ",
                break_long_words=False,
                break_on_hyphens=False,
            )
        )
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _default(spec: OptionSpec) -> str:
    if spec.default_text is not None:
        return spec.default_text
    if spec.default is None:
        return "none"
    return f"``{spec.default!r}``" if not isinstance(spec.default, bool) else ("on" if spec.default else "off")


def _flags(spec: OptionSpec) -> str:
    parts = []
    for f in spec.flags:
        names = " / ".join(f"`{n}`" for n in f.names)
        parts.append(f"{names} ({f.key})" if f.key else names)
    return ", ".join(parts)


def _recorded(spec: OptionSpec) -> str:
    return {"always": "yes", "when_given": "when given", "never": "no"}[spec.record]


def options_table() -> str:
    """``docs/options.md``: every option, its keyword, flags, default, whether it is part of
    the prefix (or fixed for the session) and recorded, and its help."""
    head = [
        "# Options",
        "",
        "<!-- Generated from the declaration in src/ctxwright/recipe/options.py by "
        "`python -m ctxwright.recipe`; do not edit by hand (tests/test_recipe.py checks it). -->",
        "",
        "Every option of an agent, declared once (`ctxwright.recipe.Recipe`): its `Harness` keyword, its",
        "`ctxwright run` flags, its default for a new session, whether it is part of the frozen prefix",
        "(*prefix*: it changes the prefix's bytes; *session*: it cannot change during a session) and whether",
        "it is recorded with the session, so that a resume runs with it. An option left out on `--resume`",
        "is the session's; one given again overrides it, unless it is part of the prefix.",
        "",
        "| option | keyword | flags | default | prefix | recorded | what it does |",
        "|---|---|---|---|---|---|---|",
    ]
    rows = []
    for spec in options(Recipe):
        fixed = "prefix" if spec.prefix else ("session" if spec.fixed else "")
        keyword = f"`{spec.keyword}`" if spec.keyword else "(set by the harness)"
        rows.append(
            "| "
            + " | ".join(
                _cell(x)
                for x in (
                    f"`{spec.path}`",
                    keyword,
                    _flags(spec),
                    _default(spec),
                    fixed,
                    _recorded(spec),
                    spec.help.replace("``", "`"),
                )
            )
            + " |"
        )
    return "\n".join([*head, *rows]) + "\n"


def write_options_table(path: str | Path = "docs/options.md") -> Path:
    """Write :func:`options_table` to ``path``; returns it."""
    out = Path(path)
    out.write_text(options_table(), encoding="utf-8")
    return out
