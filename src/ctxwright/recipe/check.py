"""The resume check: an option given again that the session cannot take is refused, by name.

Why before anything starts: the options below decide the frozen prefix's bytes (the status
bar's manual, the TODO, ``read_result``, ``delegate`` and ``run_skill_script`` tools, the
defence section, the skills catalog's place, the search tools of deferral) or how every
earlier turn is rendered (the reasoning mode). A resume that changed one would send a prefix
the provider has never cached -- or a trajectory the session never had -- so it is refused
with what the session was started with, the flag that says it, and the two ways on. Each
check refuses only what the stored prefix could not take; the harness's comparison of the
rebuilt prefix with the stored one stays the last word (``PrefixMismatch``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ctxwright.core.prefix import Prefix
from ctxwright.core.reasoning import ReasoningPolicy
from ctxwright.defence.levels import Features, levels_in
from ctxwright.defence.levels import features as defence_features
from ctxwright.errors import ConfigError, CtxwrightError, PrefixMismatch, ReasoningPolicyConflict
from ctxwright.recipe.declare import options
from ctxwright.recipe.options import Recipe
from ctxwright.skills.tools import CATALOG_MODES, SKILL_TOOLS
from ctxwright.tools.deferred import SEARCH_TOOL, DeferConfig

__all__ = ["check_resume", "flag_for"]

_CONTINUE = "leave it out to continue, or start a new session"


def flag_for(keyword: str, value: Any) -> str:
    """How ``keyword=value`` is spelt on the command line (``--status``, ``--no-todo``,
    ``--defence tags``), from the declaration; the keyword itself if it has no flag."""
    for spec in options(Recipe):
        if spec.keyword == keyword and spec.flag is not None:
            f = spec.flag
            if f.action == "switch":
                return f.name if value else f.names[1]
            if f.action == "true":
                return f.name if value else f"no {f.name}"
            return f"{f.name} {value}"
    return f"{keyword}={value!r}"


def _refuse(
    cls: type[CtxwrightError], session_id: str, keyword: str, was: Any, gave: Any, why: str = ""
) -> CtxwrightError:
    """``session X was started with OPTION=A (--flag A)[; why]; you gave B: leave it out...``"""
    reason = f"; {why}" if why else ""
    return cls(
        f"session {session_id} was started with {keyword}={was!r} ({flag_for(keyword, was)}){reason}; you gave "
        f"{keyword}={gave!r}: {_CONTINUE}"
    )


def check_resume(given: Mapping[str, Any], recorded: Mapping[str, Any], *, session_id: str, prefix: Prefix) -> None:
    """Refuse the options in ``given`` (``Harness`` keywords; ``None``: not given) that the
    session ``session_id`` cannot continue with. ``recorded`` is its record as
    :func:`~ctxwright.recipe.migrate` returns it, ``prefix`` its stored prefix.

    Raises :class:`PrefixMismatch` for an option that would change the prefix,
    :class:`ConfigError` for the skills catalog's mode (fixed for a session), and
    :class:`ReasoningPolicyConflict` for another reasoning mode. A value that is not valid at
    all is left to :meth:`Recipe.resolve`, which says what to give."""
    names = set(prefix.tool_names())

    def section(name: str) -> Mapping[str, Any]:
        sec = recorded.get(name)
        return sec if isinstance(sec, Mapping) else {}

    _check_catalog(given.get("skills_catalog"), section("skills").get("catalog", "reminder"), session_id)
    status = given.get("status")
    was = bool(section("status").get("enabled", False))
    if status is not None and bool(status) != was:
        raise PrefixMismatch(
            f"session {session_id} was started {'with' if was else 'without'} the status bar (status={was}, "
            f"{flag_for('status', was)}), whose manual is part of its system prompt; you gave status={bool(status)}: "
            + _CONTINUE
        )
    comp = given.get("compaction")
    compaction_on = comp is not False and (comp is not None or section("compaction").get("config") is not False)
    for keyword, sec, attr, tools, applies in (
        ("todo", "todo", "enabled", "the TODO tools", True),
        ("delegate", "delegate", "enabled", "the delegate tool", True),
        ("read_result", "compaction", "read_result", "the read_result tool", compaction_on),
        ("recall", "compaction", "recall", "the recall tool", compaction_on),
        ("pin_tool", "compaction", "pin_tool", "the pin tool", compaction_on),
    ):
        value, was = given.get(keyword), bool(section(sec).get(attr, False))
        if applies and value is not None and bool(value) != was:
            where = "in" if was else "not in"
            raise _refuse(PrefixMismatch, session_id, keyword, was, bool(value), f"{tools} are {where} its prefix")
    _check_scripts(given.get("allow_skill_scripts"), section("skills"), names, session_id)
    _check_defence(given.get("defence"), section("defence"), prefix.system_prompt, session_id)
    _check_deferral(given, section("deferral"), names, session_id)
    _check_reasoning(given.get("reasoning"), section("reasoning").get("mode"), session_id)


def _check_catalog(given: Any, was: Any, session_id: str) -> None:
    if given is None or given not in CATALOG_MODES or given == was:
        return
    raise ConfigError(
        f"session {session_id} was started with skills_catalog={was!r} (--skills-catalog {was}); the catalog "
        "mode decides the Skill tool's bytes in its prefix. Leave the option out to continue it, or start "
        "a new session"
    )


def _check_scripts(given: Any, rec: Mapping[str, Any], names: set[str], session_id: str) -> None:
    """Off with the tool in the prefix; on where the skill tools are and it is not."""
    if given is None:
        return
    was = bool(rec.get("allow_scripts", False))
    if was and not given:
        raise _refuse(
            PrefixMismatch,
            session_id,
            "allow_skill_scripts",
            True,
            False,
            "without it the tools would be missing run_skill_script, which is in its prefix",
        )
    if given and not was and all(n in names for n in SKILL_TOOLS):
        raise _refuse(
            PrefixMismatch,
            session_id,
            "allow_skill_scripts",
            False,
            True,
            "with it run_skill_script would be in the tools, not in the session's prefix",
        )


def _check_defence(given: Any, rec: Mapping[str, Any], system_prompt: str, session_id: str) -> None:
    """A level whose system-prompt section differs from the one in the stored prompt. (A
    prompt without a section is left to the prefix check: it depends on whether any tool's
    results are untrusted.)"""
    if given is None:
        return
    try:
        section = defence_features(given).prompt_section
    except CtxwrightError:
        return
    present = levels_in(system_prompt)
    if not present or (section is not None and f"\n\n{section}" in system_prompt):
        return
    started = rec.get("level") if rec.get("level") in present else present[0]
    gave = given.level if isinstance(given, Features) else given
    raise _refuse(
        PrefixMismatch,
        session_id,
        "defence",
        started,
        gave,
        f"defence level {started!r} has its section in the system prompt, and {gave!r} would change the prefix",
    )


def _check_deferral(given: Mapping[str, Any], rec: Mapping[str, Any], names: set[str], session_id: str) -> None:
    """With the search tools in the prefix: turning deferral off, or another ``tool_index``
    (its list is in ``search_tools``' description)."""
    if SEARCH_TOOL not in names:
        return
    stored = rec.get("defer_tools") if isinstance(rec.get("defer_tools"), Mapping) else {}
    assert isinstance(stored, Mapping)
    value = given.get("defer_tools")
    if value is not None:
        try:
            mode = DeferConfig.of(value).mode
        except ValueError:
            mode = None
        if mode == "none":
            raise _refuse(
                PrefixMismatch,
                session_id,
                "defer_tools",
                stored.get("mode", "auto"),
                value,
                "search_tools and call_tool are in its prefix",
            )
    index = given.get("tool_index")
    was = stored.get("index", "none")
    if index is not None and index in ("none", "prefix") and index != was:
        raise _refuse(
            PrefixMismatch, session_id, "tool_index", was, index, "the index is part of search_tools' description"
        )


def _check_reasoning(given: Any, was: Any, session_id: str) -> None:
    if given is None or was is None:
        return
    mode = given.mode if isinstance(given, ReasoningPolicy) else given
    if not isinstance(mode, str) or mode == was:
        return
    raise _refuse(
        ReasoningPolicyConflict,
        session_id,
        "reasoning",
        was,
        mode,
        "switching would change how every earlier assistant turn is rendered and break the provider's prompt "
        "cache from the first of them on",
    )
