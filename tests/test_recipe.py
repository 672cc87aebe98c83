"""The recipe (``ctxwright.recipe``): one declaration of every option; ``Recipe.resolve`` as a
pure function; the versioned record and the migration of records written before versions; the
resume check; the flags, the signature and the options table generated from the declaration."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwright import Harness
from ctxwright.cli.main import build_parser
from ctxwright.compaction import CompactionConfig
from ctxwright.core.prefix import Prefix
from ctxwright.core.request import ToolSpec
from ctxwright.defence.levels import features
from ctxwright.errors import ConfigError, PrefixMismatch, ReasoningPolicyConflict
from ctxwright.recipe import (
    VERSION,
    Recipe,
    backend_defaults,
    backend_name,
    check_resume,
    check_same_model,
    default,
    flag_names,
    given_from_args,
    harness_doc,
    harness_parameters,
    implied_backend,
    migrate,
    options,
    options_table,
)
from ctxwright.status.bar import OPERATING_MANUAL
from ctxwright.tools.deferred import DeferConfig

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = json.loads((ROOT / "tests" / "fixtures" / "recipe_v1.json").read_text())
SERVED, EMBEDDED = backend_defaults("openai"), backend_defaults("embedded")


def _resume(rec: dict[str, Any], given: dict[str, Any] | None = None, d=SERVED, **prefix: Any) -> Recipe:
    """A record as a resume reads it: migrated, then resolved."""
    migrated = migrate(
        rec,
        system_prompt=prefix.get("system_prompt", ""),
        tool_names=prefix.get("tool_names", ()),
        meta=prefix.get("meta", {}),
    )
    return Recipe.resolve(given or {}, migrated, d)


# -- the declaration -----------------------------------------------------------------------


def test_every_option_is_declared_once_and_the_defaults_are_a_served_new_session():
    specs = list(options(Recipe))
    keywords = [s.keyword for s in specs if s.keyword]
    assert len(keywords) == len(set(keywords)) == 64
    flags = flag_names()
    assert len(flags) == len(set(flags))
    assert Recipe.resolve({}, None, SERVED) == Recipe()
    r = Recipe()
    assert (r.limits.max_tool_rounds, r.status.cache_price_ratio) == (SERVED.max_tool_rounds, SERVED.cache_price_ratio)
    assert r.status.enabled is r.todo.enabled is r.delegate.enabled is r.compaction.read_result is SERVED.features
    assert default("max_tokens") == 256 and default("max_iterations") == 20
    with pytest.raises(KeyError):
        default("nope")


def test_the_harness_signature_and_docstring_come_from_the_declaration():
    params = harness_parameters()
    assert [p.name for p in params][:2] == ["system", "tools"]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params[2:])
    assert {p.name: p.default for p in params}["take_over"] is False
    assert all(p.default is None for p in params if p.name != "take_over")
    # the Harness takes exactly the declared keywords (before and after its signature is generated)
    assert {p.name for p in params} == set(inspect.signature(Harness).parameters)
    doc = harness_doc()
    assert doc.startswith("Args:\n    system: ")
    for p in params:
        assert f"\n    {p.name}: " in doc


def test_agent_config_defaults_are_the_declared_ones():
    from ctxwright.agent.loop import AgentConfig

    c = AgentConfig()
    assert (c.max_tokens, c.max_iterations, c.tool_timeout_s, c.max_repeats, c.timestamps) == (
        default("max_tokens"),
        default("max_iterations"),
        default("tool_timeout"),
        default("max_repeats"),
        default("timestamps"),
    )


def test_the_options_table_in_the_docs_is_generated_from_the_declaration():
    text = (ROOT / "docs" / "options.md").read_text(encoding="utf-8")
    assert text == options_table(), "docs/options.md is stale: run `python -m ctxwright.recipe`"
    for spec in options(Recipe):
        if spec.keyword:
            assert f"`{spec.keyword}`" in text


#: ``ctxwright run``'s own flags: not agent options (the prompt, the session to continue, output)
RUN_ONLY = {"-h", "--help", "--resume", "--continue", "--take-over", "--wide", "--report", "--db", "--debug"}


def _parser_flags(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings}


def test_run_help_flags_are_the_declared_flags(capsys):
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    run = sub.choices["run"]
    assert _parser_flags(run) - RUN_ONLY == set(flag_names())
    tools = next(a for a in sub.choices["tools"]._actions if isinstance(a, argparse._SubParsersAction))
    assert _parser_flags(tools.choices["list"]) - {"-h", "--help", "--json", "--db", "--debug"} == set(flag_names())
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    out = capsys.readouterr().out
    for flag in flag_names():
        assert flag in out


# -- the flags map to the keywords as the CLI always mapped them -----------------------------


def _legacy_options(args: argparse.Namespace) -> dict[str, Any]:
    """``cli/main.py: harness_options`` + ``_gate_options`` as they were before the recipe
    (commit d253c0e), with ``cli_approve`` replaced by a marker: the oracle of the mapping."""

    def given(**o: Any) -> dict[str, Any]:
        return {k: v for k, v in o.items() if v is not None}

    lists = {
        k: v for k, v in (("paths", args.allow_path), ("domains", args.allow_domain), ("hosts", args.allow_host)) if v
    }
    gated = bool(lists or args.gate_rules or args.approve or args.approve_timeout is not None)
    wants_gate = gated or getattr(args, "defence", None) in ("gate", "provenance", "D4", "D5", "d4", "d5")
    fields = given(
        result_cap_tokens=args.result_cap,
        trigger_ratio=args.clear_at,
        keep_recent_results=args.keep_results,
        strategy=args.compaction,
        policy=getattr(args, "compaction_policy", None),  # added with the cost planner
        keep=args.keep,  # added with the survival contract, summaries written ahead, the providers'
        background=args.summaries_ahead or None,  # compaction (after the recipe)
        provider=args.provider_compaction,
    )
    return given(
        backend=args.backend,
        model=args.model,
        base_url=args.base_url,
        api_key_env=args.api_key_env,
        routing_header=args.routing_header,
        prompt_cache_key=args.prompt_cache_key,
        prompt_cache_retention=args.prompt_cache_retention,
        gguf=args.gguf,
        workspace=args.workspace,
        window=args.window,
        summaries=args.summaries,
        read_result=args.read_result,
        recall=args.recall,  # added with the loss ledger (after the recipe): its flag maps as read_result's
        pin_tool=args.pin_tool,  # added with pins (after the recipe): its flag maps as recall's
        summarizer=args.summarizer,  # added with summaries on another model (after the recipe)
        status=args.status,
        status_mode=args.status_mode,
        cache_price_ratio=args.cache_price_ratio,
        status_fields=args.status_fields,  # added with the status field choice (after the recipe)
        todo=args.todo,
        delegate=args.delegate,
        skills=args.skills,
        allow_skill_scripts=args.allow_skill_scripts or None,
        skill_script_timeout=args.skill_script_timeout,
        skills_catalog=args.skills_catalog,
        mcp_servers=args.mcp,
        mcp_timeout=args.mcp_timeout,
        mcp_trust=args.mcp_trust,
        mcp_result_cap=args.mcp_result_cap,
        defence=args.defence,
        sanitize=args.sanitize,
        reasoning=args.reasoning,
        max_iterations=args.max_iterations,
        max_tool_rounds=args.max_tool_rounds,
        tool_choice_first=args.tool_choice_first,
        max_tokens=args.max_tokens,
        tool_timeout=args.tool_timeout,
        timeout=args.timeout,
        max_retries=args.max_retries,
        stream=args.stream,
        cache_ttl=args.cache_ttl,
        cache_diagnostics=args.cache_diagnostics,
        timestamps=args.timestamps or None,
        keep_warm=args.keep_warm or None,
        max_repeats=args.max_repeats,
        compaction=False if args.no_compaction else (fields or None),
        defer_tools=args.defer_tools,
        tool_index=args.tool_index,
        tool_search_ranker=args.tool_search_ranker,  # added with the embedding rankers (after the recipe)
        otlp=args.otlp,  # added with the OpenTelemetry export (after the recipe)
        otlp_content=args.otlp_content or None,
        allow=lists or None,
        gate_rules=args.gate_rules,
        approve=("APPROVER", args.approve, args.approve_timeout) if wants_gate else None,
        approve_timeout=args.approve_timeout,
    )


def _argv_for(action: argparse.Action) -> st.SearchStrategy[list[str]]:
    flag = action.option_strings[0]
    if action.nargs == 0:
        return st.just([flag])
    if action.choices:
        value: st.SearchStrategy[str] = st.sampled_from(list(action.choices))
    elif action.type is int:
        value = st.integers(0, 99).map(str)
    elif action.type is float:
        value = st.floats(0.1, 9.0).map(lambda x: f"{x:.2f}")
    else:
        value = st.sampled_from(["a", "b c", "x.yaml"])
    return value.map(lambda v: [flag, v])


def _run_parser() -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["run"]


_OPTION_ACTIONS = [
    a
    for a in _run_parser()._actions
    if a.option_strings and not (set(a.option_strings) & RUN_ONLY) and a.dest not in ("system", "tool")
]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.sampled_from(_OPTION_ACTIONS), max_size=8, unique=True).flatmap(
        lambda acts: st.tuples(*[_argv_for(a) for a in acts]) if acts else st.just(())
    )
)
def test_given_from_args_maps_every_flag_as_the_cli_did(chunks):
    argv = [x for chunk in chunks for x in chunk]
    try:
        args = build_parser().parse_args(["run", *argv, "task"])
    except SystemExit:  # two spellings of one switch: argparse refuses, as before
        return
    got = given_from_args(args, approver=lambda mode, timeout: ("APPROVER", mode, timeout))
    assert got == _legacy_options(args)


def test_given_from_args_special_flags():
    p = build_parser()
    args = p.parse_args(["run", "--no-compaction", "--result-cap", "9", "--allow-path", "/a", "--allow-path", "/b"])
    got = given_from_args(args)
    assert got["compaction"] is False and got["allow"] == {"paths": ["/a", "/b"]}
    assert "approve" not in got  # without an approver: the --approve mode as given (none)
    args = p.parse_args(["run", "--result-cap", "9", "--compaction", "adaptive", "--mcp", "a b", "--mcp", "c"])
    got = given_from_args(args)
    assert got["compaction"] == {"result_cap_tokens": 9, "strategy": "adaptive"}
    assert got["mcp_servers"] == ["a b", "c"] and "approve" not in got
    args = p.parse_args(
        ["run", "--keep", "constraints", "--keep", r"PROJ-\d+", "--summaries-ahead", "--summarizer", "small"]
    )
    got = given_from_args(args)
    assert got["compaction"] == {"keep": ["constraints", r"PROJ-\d+"], "background": True}
    assert got["summarizer"] == "small"
    r = Recipe.resolve(got, None, SERVED)
    assert r.compaction.config is not None and r.compaction.config.keep == ["constraints", r"PROJ-\d+"]
    assert r.compaction.config.background
    got = given_from_args(p.parse_args(["run", "--backend", "anthropic", "--provider-compaction", "compact"]))
    assert got["compaction"] == {"provider": "compact"}
    got = given_from_args(p.parse_args(["run", "--defence", "gate"]), approver=lambda m, t: f"asked {m} {t}")
    assert got["approve"] == "asked None None"
    assert given_from_args(p.parse_args(["run", "--allow-skill-scripts", "--no-status"])) == {
        "allow_skill_scripts": True,
        "status": False,
    }


# -- resolve: a new session --------------------------------------------------------------------


def test_a_new_session_on_the_embedded_model_gets_its_defaults():
    r = Recipe.resolve({}, None, EMBEDDED)
    assert r.limits.max_tool_rounds == 1 and r.status.cache_price_ratio == 0.0
    assert not (r.status.enabled or r.todo.enabled or r.delegate.enabled or r.compaction.read_result)
    cfg = r.compaction.config
    assert cfg is not None and not cfg.archival_summaries and not cfg.full_compaction and not r.compaction.summaries
    assert r.limits.tool_choice_first is None  # by backend, decided by the harness per run


def test_given_values_win_over_the_backend_defaults():
    r = Recipe.resolve(
        {"todo": True, "status": False, "tool_choice_first": "auto", "max_tool_rounds": 3, "read_result": True},
        None,
        EMBEDDED,
    )
    assert r.todo.enabled and not r.status.enabled and r.limits.max_tool_rounds == 3
    assert r.limits.tool_choice_first == "auto" and r.compaction.read_result
    off = Recipe.resolve({"compaction": False, "read_result": True}, None, SERVED)
    assert off.compaction.config is None and not off.compaction.read_result  # read_result needs compaction


def test_compaction_given_every_way():
    given = CompactionConfig(keep_recent_results=2)
    r = Recipe.resolve({"compaction": given, "window": 9000}, None, SERVED)
    cfg = r.compaction.config
    assert cfg is not None and cfg.archival_summaries and cfg.keep_recent_results == 2 and cfg.window_tokens == 9000
    assert given.archival_summaries is False and given.window_tokens is None  # the caller's is not mutated
    assert r.to_record()["compaction"]["config"]["window_tokens"] is None  # the window is recorded on its own
    on = Recipe.resolve({"compaction": CompactionConfig(archival_summaries=True)}, None, EMBEDDED).compaction.config
    assert on is not None and on.archival_summaries and not on.full_compaction  # the config said: kept
    assert Recipe.resolve({"compaction": True, "summaries": False}, None, SERVED).compaction.summaries is False
    m = Recipe.resolve({"compaction": {"result_cap_tokens": 2000}}, None, SERVED).compaction.config
    assert m is not None and m.result_cap_tokens == 2000 and m.archival_summaries
    with pytest.raises(ConfigError, match=r"unknown field\(s\) result_cap; the fields are those of CompactionConfig"):
        Recipe.resolve({"compaction": {"result_cap": 1}}, None, SERVED)
    with pytest.raises(ConfigError, match="pass a CompactionConfig, a mapping of its fields, True"):
        Recipe.resolve({"compaction": 3}, None, SERVED)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"max_repeats": -1}, "max_repeats=-1: give 1 or more identical calls in a row, or 0 for no limit"),
        ({"skills_catalog": "top"}, "skills_catalog='top': use 'reminder' (the default) or 'prefix'"),
        ({"defer_tools": "some"}, "defer_tools='some': use 'auto', 'all' (True) or 'none' (False) (CLI: --defer-tools"),
        ({"tool_index": "all"}, "tool_index='all': use 'none'"),
        ({"defence": "strong"}, "not a defence level; use one of none, warning, tags, gate, provenance"),
        ({"defence": "warning", "sanitize": True}, "sanitize=True needs a defence level with tags"),
        ({"reasoning": "think"}, "unknown reasoning mode 'think'"),
        ({"status_fields": ["-cwd", "-home"]}, "unknown field '-home'; use counters, repeats, todo"),
        ({"mcp_servers": ["x"], "mcp_timeout": 0}, "mcp_timeout=0: give the seconds an MCP tool call may take"),
        ({"allow_skill_scripts": True, "skill_script_timeout": 0}, "skill_script_timeout=0: give a number of seconds"),
    ],
)
def test_every_bad_value_is_one_config_error_saying_what_to_give(given, message):
    with pytest.raises(ConfigError) as exc:
        Recipe.resolve(given, None, SERVED)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_defence_levels_and_the_sanitizer():
    r = Recipe.resolve({"defence": "D5"}, None, SERVED)
    assert r.defence.level == "provenance" and r.defence.features.gate and r.defence.sanitize
    custom = dataclasses.replace(features("tags"), gate=True)
    r = Recipe.resolve({"defence": custom}, None, SERVED)
    assert r.defence.features == custom and r.to_record()["defence"] == {"level": "tags", "sanitize": True}
    assert not Recipe.resolve({"sanitize": False}, None, SERVED).defence.features.sanitize


def test_paths_are_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ws").mkdir()  # a workspace must exist (recipe/values.py)
    r = Recipe.resolve({"skills": ["sk"], "workspace": "ws", "mcp_servers": ["srv --x 'a b'"]}, None, SERVED)
    assert r.skills.dirs == [str(tmp_path / "sk")] and r.workspace == tmp_path / "ws"
    assert r.mcp.servers == [["srv", "--x", "a b"]]
    rec = r.to_record()
    assert rec["workspace"] == str(tmp_path / "ws") and rec["mcp"]["servers"] == [["srv", "--x", "a b"]]


def test_backend_name_and_the_model_check():
    assert backend_name({}) == "embedded" and backend_name({"model": "m"}) == "openai"
    assert backend_name({"base_url": "http://x"}) == "openai" and backend_name({}, "openai") == "openai"
    assert backend_name({"backend": "embedded"}, "openai") == "embedded"

    class Obj:
        name = "scripted"

    assert backend_name({"backend": Obj()}, "openai") == "scripted"
    assert implied_backend({}) is None and implied_backend({"gguf": "x.gguf"}) == "embedded"
    with pytest.raises(ConfigError, match="ran on the openai backend; continuing it on embedded"):
        check_same_model("s1", "openai", "m", implied_backend({"gguf": "x.gguf"}), None)
    with pytest.raises(ConfigError, match="ran on model 'm'; continuing it on 'n'"):
        check_same_model("s1", "openai", "m", None, "n")


# -- resolve: a resume ---------------------------------------------------------------------------


_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "max_iterations": st.integers(1, 50),
    "max_tool_rounds": st.none() | st.integers(1, 5),
    "tool_choice_first": st.sampled_from(["auto", "required", "none"]),
    "max_tokens": st.integers(1, 4096),
    "tool_timeout": st.floats(0.5, 60),
    "max_repeats": st.integers(0, 9),
    "status": st.booleans(),
    "status_mode": st.sampled_from(["auto", "replace", "append"]),
    "cache_price_ratio": st.floats(0, 1),
    "status_fields": st.sampled_from([["-cwd", "-os"], ["counters", "error"], "env,-cwd"]),
    "todo": st.booleans(),
    "delegate": st.booleans(),
    "read_result": st.booleans(),
    "recall": st.booleans(),
    "summaries": st.booleans(),
    "compaction": st.sampled_from([False, True, {"result_cap_tokens": 1500}, {"keep_recent_results": 1}]),
    "timestamps": st.booleans(),
    "api_key_env": st.sampled_from(["K1", "K2"]),
    "timeout": st.floats(1, 300),
    "max_retries": st.integers(0, 5),
    "stream": st.booleans(),
    "window": st.integers(1024, 200_000),
    "defence": st.sampled_from(["none", "warning", "tags", "gate", "provenance"]),
    "defer_tools": st.sampled_from(["auto", "all", "none"]),
    "tool_index": st.sampled_from(["none", "prefix"]),
    "skills_catalog": st.sampled_from(["reminder", "prefix"]),
    "reasoning": st.sampled_from(["strip", "keep", "qwen3"]),
    "mcp_timeout": st.floats(1, 100),
    "mcp_result_cap": st.floats(0.5, 64),
    "mcp_trust": st.sampled_from([["a"], ["a", "b"]]),
    "skill_script_timeout": st.floats(1, 100),
    "allow_skill_scripts": st.booleans(),
}


@settings(max_examples=200, deadline=None)
@given(
    st.fixed_dictionaries({}, optional=_VALUES),
    st.sampled_from([SERVED, EMBEDDED]),
    st.sampled_from([SERVED, EMBEDDED]),
)
def test_a_resume_without_options_runs_with_every_recorded_value(opts, start, resume_on):
    """Whatever a session was started with, and whatever the backend's defaults are now: the
    record read back resolves to the same recipe (the by-backend values were recorded resolved)."""
    if "mcp_trust" in opts:  # a trust names servers: refused without one
        opts = {**opts, "mcp_servers": ["srv"]}
    first = Recipe.resolve(opts, None, start)
    if first.skills.catalog == "prefix":  # the harness freezes the catalog it loaded (none here)
        first = dataclasses.replace(first, skills=dataclasses.replace(first.skills, frozen=[]))
    record = json.loads(json.dumps(first.to_record()))  # what the store keeps
    again = _resume(record, d=resume_on)
    assert again.to_record() == record
    cfg = first.compaction.config
    if cfg is not None and first.compaction.window_filled:  # window= fills it for this run only
        cfg = dataclasses.replace(cfg, window_tokens=None)
    assert again.compaction.config == cfg


def test_a_resume_with_overrides():
    record = Recipe.resolve({"max_tokens": 77, "compaction": {"keep_recent_results": 2}}, None, SERVED).to_record()
    r = _resume(record, {"max_tokens": 99, "compaction": {"result_cap_tokens": 1234}})
    cfg = r.compaction.config
    assert (
        r.limits.max_tokens == 99
        and cfg is not None
        and (cfg.result_cap_tokens, cfg.keep_recent_results)
        == (
            1234,
            2,
        )
    )
    assert cfg.archival_summaries  # the recorded config's, not re-decided by backend
    assert _resume(record).limits.max_tokens == 77
    off = Recipe.resolve({"compaction": False}, None, SERVED).to_record()
    assert _resume(off, d=EMBEDDED).compaction.config is None  # stays off
    summ = Recipe.resolve({"summaries": False}, None, SERVED).to_record()
    cfg2 = _resume(summ, d=SERVED).compaction.config
    assert cfg2 is not None and not cfg2.archival_summaries  # a served backend's default would switch them on


# -- the record and its migration ----------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(FIXTURE))
def test_a_record_written_before_versions_resumes_as_the_old_harness_resumed_it(case):
    data = FIXTURE[case]
    migrated = migrate(
        data["record"], system_prompt=data["system_prompt"], tool_names=data["tool_names"], meta=data["meta"]
    )
    assert migrated["version"] == VERSION
    keep = {k: v for k, v in data["given"].items() if k == "approve"}  # never recorded: given again
    r = Recipe.resolve(keep, migrated, backend_defaults(data["backend"]))
    want = data["resumed"]
    lim = r.limits
    assert (lim.max_iterations, lim.max_tool_rounds, lim.tool_timeout, lim.max_repeats, lim.max_tokens) == (
        want["max_iterations"],
        want["max_tool_rounds"],
        want["tool_timeout"],
        want["max_repeats"],
        want["max_tokens"],
    )
    assert r.timestamps == want["timestamps"] and lim.tool_choice_first == want["tool_choice_first"]
    cfg = r.compaction.config
    got = None if cfg is None else json.loads(json.dumps(dataclasses.asdict(cfg), default=str))
    # fields added after the fixture: the values that compact as the old harness did
    later = {"policy", "target_ratio", "cache_price_ratio", "compress", "background", "soft_ratio", "keep"}
    later |= {k for k in got or {} if k.startswith("provider")}  # the providers' compaction: off
    assert (None if got is None else {k: v for k, v in got.items() if k not in later}) == want["compaction"]
    assert got is None or (got["policy"] == "eager" and got["compress"] is False)
    assert r.status.enabled == want["status"] and r.todo.enabled == want["todo"]
    assert r.delegate.enabled == want["delegate"] and r.compaction.read_result == want["read_result"]
    if want["status"]:
        assert (r.status.mode, r.status.cache_price_ratio) == (want["status_mode"], want["cache_price_ratio"])
    assert r.defence.features.to_dict() == want["defence"]
    assert r.skills.catalog == want["skills_catalog"]
    assert (r.skills.allow_scripts and bool(r.skills.dirs)) == want["allow_skill_scripts"]
    if want["allow_skill_scripts"]:
        assert r.skills.script_timeout == want["skill_script_timeout"]
    assert (str(r.workspace) if r.workspace else None) == want["workspace"]
    assert r.deferral.defer_tools == DeferConfig(**want["defer_tools"])
    assert (r.reasoning.mode.mode if r.reasoning.mode else None) == want["reasoning"]
    # and it is stored again as version 2, which reads back the same
    again = migrate(r.to_record(), system_prompt="", tool_names=(), meta=data["meta"])
    assert Recipe.resolve(keep, again, backend_defaults(data["backend"])) == r


def test_migrate_reads_the_switches_off_the_prefix():
    names = ["add", "rewrite_todo_list", "update_todo_status", "read_result", "delegate", "run_skill_script"]
    m = migrate(
        {"skills": ["/s"], "mcp": [["srv"]], "mcp_timeout": 5},
        system_prompt="S.\n\n" + OPERATING_MANUAL,
        tool_names=names,
        meta={"workspace": "/w", "reasoning_mode": "keep"},
    )
    assert m["status"]["enabled"] and m["todo"]["enabled"] and m["delegate"]["enabled"]
    assert m["compaction"]["read_result"] and m["skills"]["allow_scripts"] and m["skills"]["dirs"] == ["/s"]
    assert m["mcp"] == {"servers": [["srv"]], "timeout": 5} and m["workspace"] == "/w"
    assert m["defence"] == {"level": "none", "sanitize": False}  # before levels: no section in its prompt
    assert m["deferral"]["defer_tools"]["mode"] == "none"  # before deferral: every tool in the prefix
    assert m["reasoning"]["mode"] == "keep" and m["skills"]["catalog"] == "reminder"
    bare = migrate({}, system_prompt="S.", tool_names=["rewrite_todo_list"], meta={})
    assert not (bare["status"]["enabled"] or bare["todo"]["enabled"] or bare["skills"]["allow_scripts"])
    r = Recipe.resolve({}, bare, SERVED)  # nothing recorded: today's defaults, the prefix's switches
    assert not r.status.enabled and r.limits.max_tokens == 256 and r.deferral.defer_tools.mode == "none"


def test_a_record_from_a_newer_release_is_refused():
    with pytest.raises(ConfigError, match="recorded by a newer ctxwright \\(record version 3; this one reads up to"):
        migrate({"version": 3}, system_prompt="", tool_names=(), meta={})
    with pytest.raises(ConfigError, match="damaged"):
        migrate({"version": "2"}, system_prompt="", tool_names=(), meta={})
    v2 = Recipe().to_record()
    assert migrate(v2, system_prompt="", tool_names=(), meta={}) == v2


# -- the resume check ----------------------------------------------------------------------------


def _prefix(system: str = "S.", tools: tuple[str, ...] = ()) -> Prefix:
    return Prefix.build(system, tuple(ToolSpec(n, "d", {"type": "object", "properties": {}}) for n in tools))


def _started(given: dict[str, Any], d=SERVED) -> dict[str, Any]:
    return migrate(Recipe.resolve(given, None, d).to_record(), system_prompt="", tool_names=(), meta={})


def test_the_resume_check_passes_what_the_session_can_take():
    rec = _started({"max_tokens": 77})
    check_resume({}, rec, session_id="s1", prefix=_prefix())
    check_resume(
        {"max_tokens": 5, "status": True, "todo": True, "defence": "gate"}, rec, session_id="s1", prefix=_prefix()
    )
    # read_result without compaction adds nothing: not refused
    off = _started({"compaction": False})
    check_resume({"read_result": True}, off, session_id="s1", prefix=_prefix())
    check_resume({"read_result": True, "compaction": False}, rec, session_id="s1", prefix=_prefix())


@pytest.mark.parametrize(
    ("started", "given", "prefix", "error", "words"),
    [
        ({}, {"status": False}, _prefix(), PrefixMismatch, ["with the status bar", "(status=True, --status)"]),
        ({"status": False}, {"status": True}, _prefix(), PrefixMismatch, ["without the status bar", "--no-status"]),
        ({}, {"todo": False}, _prefix(), PrefixMismatch, ["todo=True (--todo)", "you gave todo=False"]),
        ({}, {"delegate": False}, _prefix(), PrefixMismatch, ["delegate=True (--delegate)"]),
        (
            {"read_result": False},
            {"read_result": True},
            _prefix(),
            PrefixMismatch,
            ["read_result=False (--no-read-result)"],
        ),
        (
            {"skills_catalog": "prefix"},
            {"skills_catalog": "reminder"},
            _prefix(),
            ConfigError,
            ["skills_catalog='prefix' (--skills-catalog prefix)", "Skill tool's bytes"],
        ),
        (
            {"reasoning": "keep"},
            {"reasoning": "strip"},
            _prefix(),
            ReasoningPolicyConflict,
            ["reasoning='keep' (--reasoning keep)", "prompt cache"],
        ),
        (
            {"allow_skill_scripts": True},
            {"allow_skill_scripts": False},
            _prefix(),
            PrefixMismatch,
            ["missing run_skill_script"],
        ),
        (
            {},
            {"allow_skill_scripts": True},
            _prefix(tools=("Skill", "read_skill_file")),
            PrefixMismatch,
            ["run_skill_script would be in the tools"],
        ),
        (
            {"defence": "warning"},
            {"defence": "tags"},
            _prefix("S.\n\n" + features("warning").prompt_section),
            PrefixMismatch,
            ["defence level 'warning'", "--defence warning"],
        ),
        (
            {"defer_tools": "all"},
            {"defer_tools": "none"},
            _prefix(tools=("a", "search_tools", "call_tool")),
            PrefixMismatch,
            ["search_tools", "defer_tools='all' (--defer-tools all)"],
        ),
        (
            {"defer_tools": "all"},
            {"tool_index": "prefix"},
            _prefix(tools=("a", "search_tools", "call_tool")),
            PrefixMismatch,
            ["tool_index='none' (--tool-index none)"],
        ),
    ],
)
def test_the_resume_check_refuses_by_name_with_the_flag(started, given, prefix, error, words):
    rec = _started(started)
    with pytest.raises(error) as exc:
        check_resume(given, rec, session_id="s1", prefix=prefix)
    text = str(exc.value)
    assert text.startswith("session s1 was started ") and "start a new session" in text and "\n" not in text
    for w in words:
        assert w in text


def test_the_resume_check_leaves_what_the_prefix_decides_alone():
    # gate and provenance explain the tags with the same section as tags: switching keeps the prefix
    tags = _prefix("S.\n\n" + features("tags").prompt_section)
    check_resume({"defence": "gate"}, _started({}), session_id="s1", prefix=tags)
    # a prompt without a section: whether one appears depends on the tools' trust -- the prefix check's call
    check_resume({"defence": "warning"}, _started({"defence": "none"}), session_id="s1", prefix=_prefix())
    # nothing was deferred: another mode rebuilds the same prefix
    check_resume({"defer_tools": "none"}, _started({}), session_id="s1", prefix=_prefix(tools=("a",)))
    # scripts allowed on a session without skills: no tool appears
    check_resume({"allow_skill_scripts": True}, _started({}), session_id="s1", prefix=_prefix(tools=("a",)))
