"""The frozen prefix cut into named segments and diffed (``ci/segments.py``): sections by
heading, tools by name in three API shapes, serialized as the audit serializes them; every
prefix change named with its JSON path, byte offset and the text around it."""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxwright.audit.compare import _tools_bytes, utf8
from ctxwright.ci.segments import (
    cache_break,
    diff_prefix,
    first_difference_path,
    prefix_segments,
    system_sections,
)
from ctxwright.core.request import tool_name
from ctxwright.core.tokens import TokenCounter

SYSTEM = (
    "You are a coding agent for the ctxwright repository.\n\n"
    "# Rules\nBe brief. Never guess a path.\n\n"
    "```bash\n# a comment in a code block, not a heading\nls\n```\n\n"
    "## Tools\nRead before you write.\n\n"
    "## Style\nShort sentences.\n"
)


def chat_tool(name: str, description: str = "", **props: Any) -> dict[str, Any]:
    params = {"type": "object", "properties": {k: {"type": v} for k, v in props.items()}}
    return {
        "type": "function",
        "function": {"name": name, "description": description or f"{name} a file", "parameters": params},
    }


TOOLS = [chat_tool("read_file", path="string"), chat_tool("write_file", path="string"), chat_tool("list_dir")]


def test_sections_by_heading_outside_code_blocks_and_they_join_to_the_prompt() -> None:
    secs = system_sections(SYSTEM)
    assert [n for n, *_ in secs] == [
        "system line 1 'You are a coding agent for the ctxwright reposi…'",
        "system § '# Rules'",
        "system § '## Tools'",
        "system § '## Style'",
    ]
    assert "".join(t for *_, t in secs) == SYSTEM  # exact bytes, line ends and blank lines kept
    assert [line for _, line, _, _ in secs] == [1, 3, 11, 14]


def test_a_prompt_without_headings_is_cut_into_paragraphs_named_by_their_first_line() -> None:
    text = "\nYou are a helpful assistant who answers in French and never in English at all.\nBe nice.\n\n\nUse tools.\n\nEnd."
    secs = system_sections(text)
    assert [n for n, *_ in secs] == [
        "system line 2 'You are a helpful assistant who answers in Fren…'",
        "system line 6 'Use tools.'",
        "system line 8 'End.'",
    ]
    assert "".join(t for *_, t in secs) == text
    assert system_sections("") == []


def test_repeated_headings_get_unique_names_and_odd_names_stay_one_printable_line() -> None:
    segs = prefix_segments("# Notes\na\n# Notes\nb\n# Ta\tb\x00 \ud800\n", [])
    assert [s.name for s in segs] == ["system § '# Notes'", "system § '# Notes' (2)", "system § '# Ta b\\x00 \\ud800'"]


def test_tools_serialized_as_the_audit_does_in_all_three_shapes_with_tokens_and_hashes() -> None:
    responses = [{"type": "function", "name": "search", "description": "Search", "parameters": {"type": "object"}}]
    anthropic = [{"name": "search", "description": "Search", "input_schema": {"type": "object"}}]
    counter = TokenCounter()
    for tools, provider in ((TOOLS, "openai"), (responses, "openai-responses"), (anthropic, "anthropic")):
        segs = [s for s in prefix_segments(SYSTEM, tools, provider=provider, counter=counter) if s.part == "tool"]
        joined = b"[" + b",".join(utf8(s.text) for s in segs) + b"]"
        assert joined == _tools_bytes(tools)  # the audit's bytes of the tool list, exactly
        for s, t in zip(segs, tools, strict=True):
            assert s.name == f"tool {tool_name(t)!r}"
            assert s.tokens == counter.count(s.text) and s.tokens > 0
            assert s.sha256 == hashlib.sha256(utf8(s.text)).hexdigest()


def test_cache_order_anthropic_tools_first_openai_system_first() -> None:
    anthropic = [{"name": "search", "description": "Search", "input_schema": {"type": "object"}}]
    assert [s.part for s in prefix_segments("# A\nx\n", anthropic)] == ["tool", "system"]  # inferred from the shape
    assert [s.part for s in prefix_segments("# A\nx\n", TOOLS[:1])] == ["system", "tool"]
    assert prefix_segments("# A\nx\n", anthropic)[1].path == "$.system"
    assert prefix_segments("# A\nx\n", [], provider="openai-responses")[0].path == "$.instructions"


def test_identical_prefixes_have_no_changes() -> None:
    assert diff_prefix((SYSTEM, TOOLS), (SYSTEM, copy.deepcopy(TOOLS))) == []


def test_a_timestamp_added_to_the_system_prompt_is_named_with_its_section_and_offset() -> None:
    run = SYSTEM.replace("Be brief.", "Be brief. Current time: 2025-06-01T10:00:00Z.")
    [c] = diff_prefix((SYSTEM, TOOLS), (run, TOOLS))
    assert (c.segment, c.change, c.path) == ("system § '# Rules'", "changed", "$.messages[0].content")
    assert c.offset == len("# Rules\nBe brief. ")  # the space after it is the same on both sides
    assert c.before.endswith("Be brief. ") and c.after.startswith("Current time: 2025")
    assert c.was.startswith("Never guess")
    assert "system § '# Rules'" in c.line and "byte 18" in c.line and "\n" not in c.line


def test_a_timestamp_as_a_first_line_is_a_change_of_the_first_section() -> None:
    [c] = diff_prefix((SYSTEM, TOOLS), ("Today is 2025-06-01.\n" + SYSTEM, TOOLS))
    assert c.change == "changed" and c.segment.startswith("system line 1 'Today is") and c.offset == 0


def test_two_tools_swapped_are_both_named_as_moved() -> None:
    run = [TOOLS[1], TOOLS[0], TOOLS[2]]
    changes = diff_prefix((SYSTEM, TOOLS), (SYSTEM, run))
    assert [(c.segment, c.change, c.path) for c in changes] == [
        ("tool 'write_file'", "moved", "$.tools[0]"),
        ("tool 'read_file'", "moved", "$.tools[1]"),
    ]
    assert "swapped with tool 'read_file'" in changes[0].line and "swapped with tool 'write_file'" in changes[1].line


def test_one_tool_moved_to_the_front_is_the_only_one_named() -> None:
    changes = diff_prefix((SYSTEM, TOOLS), (SYSTEM, [TOOLS[2], TOOLS[0], TOOLS[1]]))
    assert [(c.segment, c.change) for c in changes] == [("tool 'list_dir'", "moved")]
    assert "swapped" not in changes[0].line


def test_a_tool_description_changed_gives_its_json_path_and_byte_offset() -> None:
    run = copy.deepcopy(TOOLS)
    run[1]["function"]["description"] = "write_file a file (session 7f3a, https://x.test/s/7f3a)"
    [c] = diff_prefix((SYSTEM, TOOLS), (SYSTEM, run))
    assert (c.segment, c.change, c.path) == ("tool 'write_file'", "changed", "$.tools[1].function.description")
    assert c.offset == len('{"function":{"description":"write_file a file')
    assert c.after.startswith(" (session 7f3a") and c.was.startswith('","name"')


def test_responses_and_anthropic_paths() -> None:
    g = [{"type": "function", "name": "search", "description": "Search", "parameters": {"type": "object"}}]
    r = [{"type": "function", "name": "search", "description": "Search the web", "parameters": {"type": "object"}}]
    assert diff_prefix(("s", g), ("s", r))[0].path == "$.tools[0].description"
    ga = [
        {"name": "q", "description": "Q", "input_schema": {"type": "object", "properties": {"a": {"type": "string"}}}}
    ]
    ra = copy.deepcopy(ga)
    ra[0]["input_schema"]["properties"]["a"]["type"] = "integer"
    [c] = diff_prefix(("s", ga), ("s", ra))
    assert c.path == "$.tools[0].input_schema.properties.a.type"


def test_a_tool_added_and_one_removed() -> None:
    extra = chat_tool("delete_file", path="string")
    [added] = diff_prefix((SYSTEM, TOOLS), (SYSTEM, [*TOOLS, extra]))
    assert (added.segment, added.change, added.path) == ("tool 'delete_file'", "added", "$.tools[3]")
    [removed] = diff_prefix((SYSTEM, TOOLS), (SYSTEM, TOOLS[:1] + TOOLS[2:]))
    assert (removed.segment, removed.change, removed.path) == ("tool 'write_file'", "removed", "$.tools[1]")


def test_a_section_edited_in_the_middle_of_a_long_prompt_is_the_one_change() -> None:
    long = "".join(f"## Section {i}\n" + f"Rule {i}: be careful with item {i}.\n" * 20 + "\n" for i in range(200))
    run = long.replace("Rule 117: be careful with item 117.\n", "Rule 117: be VERY careful with item 117.\n", 1)
    [c] = diff_prefix((long, TOOLS), (run, TOOLS))
    assert (c.segment, c.change) == ("system § '## Section 117'", "changed")
    assert c.offset == len("## Section 117\nRule 117: be ")
    assert c.after.startswith("VERY careful")
    start = long.index("## Section 117")
    assert f"({start + c.offset:,} of the system prompt)" in c.line


def test_a_section_inserted_does_not_rename_the_others() -> None:
    run = SYSTEM.replace("## Tools\n", "## Today\nIt is Monday.\n\n## Tools\n")
    [c] = diff_prefix((SYSTEM, TOOLS), (run, TOOLS))
    assert (c.segment, c.change) == ("system § '## Today'", "added")


def test_first_difference_path() -> None:
    assert first_difference_path({"a": 1, "b": 2}, {"a": 1, "b": 3}) == "$.b"
    assert first_difference_path({"a": 1}, {"a": 1, "c": 2}) == "$.c"
    assert first_difference_path({"b": 1}, {"a": 1, "b": 1}) == "$.a"
    assert first_difference_path({"x": [1, 2]}, {"x": [1, 2, 3]}) == "$.x[2]"
    assert first_difference_path({"a b": 1}, {"a b": 2}) == '$["a b"]'
    assert first_difference_path(1, "1") == "$"


def test_cache_break_counts_the_tokens_from_the_first_changed_segment_on() -> None:
    g = prefix_segments(SYSTEM, TOOLS)
    r = prefix_segments(SYSTEM, [TOOLS[0], TOOLS[2], TOOLS[1]])
    at, tokens = cache_break(g, r)
    assert at == 5 and tokens == r[5].tokens + r[6].tokens
    assert cache_break(g, g) == (None, 0)
    assert cache_break(g, g[:-1]) == (None, 0)  # a tool dropped at the end: what stays is served


# -- properties -----------------------------------------------------------------------------

_WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyzéü周一", min_size=1, max_size=12)
_LINE = st.lists(_WORD, min_size=1, max_size=6).map(" ".join)
_SECTION = st.tuples(st.sampled_from(["", "# ", "## ", "### "]), st.lists(_LINE, min_size=1, max_size=4)).map(
    lambda t: (t[0] + t[1][0] if t[0] else t[1][0]) + "\n" + "".join(line + "\n" for line in t[1][1:])
)
_PROMPT = st.lists(_SECTION, min_size=1, max_size=8).map("\n".join)
_NAME = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=10)
_TOOLS = st.lists(st.tuples(_NAME, _LINE), max_size=5, unique_by=lambda t: t[0]).map(
    lambda ts: [chat_tool(n, d) for n, d in ts]
)
_ALNUM = "abcdefghijklmnopqrstuvwxyzéü周一"
_FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_FAST
@given(_PROMPT, _TOOLS)
def test_property_identical_prefixes_diff_to_nothing(system: str, tools: list[dict[str, Any]]) -> None:
    assert diff_prefix((system, tools), (system, copy.deepcopy(tools))) == []


@_FAST
@given(_PROMPT, _TOOLS, st.data())
def test_property_a_changed_character_of_the_system_prompt_is_found_at_its_byte(
    system: str, tools: list[dict[str, Any]], data: st.DataObject
) -> None:
    positions = [i for i, ch in enumerate(system) if ch in _ALNUM]
    i = data.draw(st.sampled_from(positions))
    new_char = data.draw(st.sampled_from([c for c in _ALNUM if c != system[i]]))
    run = system[:i] + new_char + system[i + 1 :]
    changes = diff_prefix((system, tools), (run, tools))
    assert len(changes) == 1
    [c] = changes
    seg = next(s for s in prefix_segments(run, tools) if s.name == c.segment)
    assert c.change == "changed" and seg.part == "system"
    assert seg.start + c.offset == len(utf8(system[:i]))  # the changed character's first byte
    assert seg.start <= len(utf8(system[:i])) < seg.start + len(utf8(seg.text))


@_FAST
@given(_PROMPT, _TOOLS.filter(bool), st.data())
def test_property_a_changed_character_of_a_tool_description_is_found_at_its_path_and_byte(
    system: str, tools: list[dict[str, Any]], data: st.DataObject
) -> None:
    t = data.draw(st.integers(0, len(tools) - 1))
    desc = tools[t]["function"]["description"]
    positions = [i for i, ch in enumerate(desc) if ch in _ALNUM]
    i = data.draw(st.sampled_from(positions))
    run = copy.deepcopy(tools)
    run[t]["function"]["description"] = (
        desc[:i] + data.draw(st.sampled_from([c for c in _ALNUM if c != desc[i]])) + desc[i + 1 :]
    )
    [c] = diff_prefix((system, tools), (system, run))
    assert c.path == f"$.tools[{t}].function.description"
    assert c.offset == len(utf8('{"function":{"description":"' + desc[:i]))
