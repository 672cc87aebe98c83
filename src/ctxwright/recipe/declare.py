"""How an option is declared: once, as a dataclass field whose metadata says everything else.

Why: the agent's options used to be described in five places that drifted apart (the
``Harness`` signature and its docstring, ``cli/main.py``'s flags and their mapping to
keywords, the recorded defaults, ``AgentConfig``). A field of the :class:`~ctxwright.recipe.Recipe`
tree declared with :func:`opt` carries its default, its help, its ``Harness`` keyword, its
``ctxwright run`` flag(s), whether it is part of the frozen prefix and how it is recorded;
the signature, the docstring, the argparse parser, the stored record, the resume check and
the options table in ``docs/options.md`` are all read from it (:func:`options`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["BY_BACKEND", "Flag", "OptionSpec", "Record", "opt", "options"]

#: How an option is stored with the session for the next resume: ``always`` (every
#: session records its value, resolved), ``when_given`` (recorded only when it is not
#: ``None``: its default is decided where it is used), ``never`` (runtime objects, secrets,
#: and what the record already holds in another form).
Record = Literal["always", "when_given", "never"]

#: ``default_text`` of an option whose default depends on the backend (``backend_defaults``).
BY_BACKEND = "by backend"

FlagAction = Literal["store", "switch", "true", "append"]

_META = "ctxwright.recipe"


@dataclass(frozen=True)
class Flag:
    """One ``ctxwright run`` flag of an option.

    ``action``: ``store`` (a value), ``switch`` (``--x`` / ``--no-x``, unset: ``None``),
    ``true`` (``--x`` only: ``True`` or not given), ``append`` (repeatable, a list).
    ``key``: for an option built from several flags (``compaction``, ``allow``), the entry
    of the keyword's mapping this flag fills; ``dest``: the argparse destination, by default
    the flag's name (``--result-cap`` -> ``result_cap``).
    """

    name: str
    action: FlagAction = "store"
    type: Callable[[str], Any] | None = None
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    #: the ``--help`` text; a callable is asked when the parser is built (numbers from code)
    help: str | Callable[[], str] | None = None
    dest: str | None = None
    key: str | None = None
    #: the argparse argument group it is listed under (``--help`` sections)
    group: str | None = None

    @property
    def destination(self) -> str:
        return self.dest or self.name.lstrip("-").replace("-", "_")

    @property
    def names(self) -> tuple[str, ...]:
        """Every spelling on the command line (``--x`` and ``--no-x`` for a switch)."""
        if self.action == "switch":
            return (self.name, "--no-" + self.name.removeprefix("--"))
        return (self.name,)

    def help_text(self) -> str | None:
        return self.help() if callable(self.help) else self.help


@dataclass(frozen=True)
class OptionSpec:
    """What :func:`opt` declares about one field; ``section`` and ``attr`` locate it in the tree."""

    help: str
    keyword: str | None
    flags: tuple[Flag, ...]
    prefix: bool
    fixed: bool
    record: Record
    accepts: str
    default_text: str | None
    #: the keyword's value from the values of its flags ({dest: value}); ``None``: the one
    #: flag's value (``True`` or ``None`` for a ``true`` flag)
    from_flags: Callable[[Mapping[str, Any]], Any] | None
    section: str = ""
    attr: str = ""
    default: Any = None

    @property
    def path(self) -> str:
        """``section.attr`` (or ``attr`` for a top-level field): its key in the record."""
        return f"{self.section}.{self.attr}" if self.section else self.attr

    @property
    def flag(self) -> Flag | None:
        """The option's main flag (the one a resume refusal names), if it has any."""
        return self.flags[0] if self.flags else None


def opt(
    default: Any = None,
    *,
    help: str,
    keyword: str | None = None,
    flag: str | Flag | tuple[Flag, ...] | None = None,
    prefix: bool = False,
    fixed: bool | None = None,
    record: Record = "always",
    accepts: str = "Any",
    choices: tuple[str, ...] | None = None,
    metavar: str | None = None,
    type: Callable[[str], Any] | None = None,
    action: FlagAction = "store",
    cli_help: str | Callable[[], str] | None = None,
    group: str | None = None,
    default_text: str | None = None,
    factory: Callable[[], Any] | None = None,
    from_flags: Callable[[Mapping[str, Any]], Any] | None = None,
) -> Any:
    """A field of the recipe tree, declared once.

    ``default`` is the value a new session gets when the option is not given (for an
    option decided by backend, the served model's; ``default_text`` says what the docs
    show instead). ``help`` is the library documentation (docstring, options table);
    ``cli_help`` the flag's ``--help`` line. ``flag`` as a string is one flag built from
    ``choices``, ``metavar``, ``type`` and ``action``; several flags are given as
    :class:`Flag` objects. ``prefix``: the option changes the frozen prefix's bytes;
    ``fixed``: it cannot change during a session (default: as ``prefix``). ``accepts``:
    the keyword's annotation, as text (what a caller may pass, before resolution).
    """
    flags: tuple[Flag, ...]
    if flag is None:
        flags = ()
    elif isinstance(flag, str):
        flags = (Flag(flag, action=action, type=type, metavar=metavar, choices=choices, help=cli_help, group=group),)
    elif isinstance(flag, Flag):
        flags = (flag,)
    else:
        flags = flag
    spec = OptionSpec(
        help=" ".join(help.split()),
        keyword=keyword,
        flags=flags,
        prefix=prefix,
        fixed=prefix if fixed is None else fixed,
        record=record,
        accepts=accepts,
        default_text=default_text,
        from_flags=from_flags,
    )
    meta = {_META: spec}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def spec_of(f: dataclasses.Field[Any]) -> OptionSpec | None:
    spec = f.metadata.get(_META)
    return spec if isinstance(spec, OptionSpec) else None


def options(root: type) -> Iterator[OptionSpec]:
    """Every option of the dataclass tree ``root``, in declaration order: the fields of
    ``root`` declared with :func:`opt`, and those of each section (a field whose type is a
    dataclass, itself declared without :func:`opt`)."""
    defaults = root()
    for f in dataclasses.fields(root):
        spec = spec_of(f)
        value = getattr(defaults, f.name)
        if spec is not None:
            yield dataclasses.replace(spec, section="", attr=f.name, default=value)
            continue
        if not dataclasses.is_dataclass(value):
            raise TypeError(f"{root.__name__}.{f.name}: declare it with opt() or make it a section dataclass")
        for sf in dataclasses.fields(value):
            sub = spec_of(sf)
            if sub is None:
                raise TypeError(f"{type(value).__name__}.{sf.name}: every field of a section is declared with opt()")
            yield dataclasses.replace(sub, section=f.name, attr=sf.name, default=getattr(value, sf.name))
