"""The ledger check names the part of a request the server left out only when that part alone
explains the missing tokens (``core/tokens.py: check_reported``).

Why: llama-cpp-python's server with ``--chat_format chatml-function-calling`` -- the template the
"dropped the tools" warning recommends -- renders the tools but no ``tool`` message at all (and,
with ``tool_choice: "none"``, no tools either). The check named the tools whenever the missing
tokens were about their size, so on that very server a call whose tool results were as large as
the tool definitions was told "the server probably dropped the tools". The ledgers below are
what ctxwright counted for requests that server answered (the README's ``Context`` example on
the bundled SmolLM2 model) and the sizes of the ``ctxwright run`` case."""

from __future__ import annotations

from ctxwright.core.tokens import Ledger, check_reported


def test_results_the_size_of_the_tools_are_not_called_dropped_tools():
    # the default tools (798 tokens) and a file read of about the same size, on a template that
    # renders no tool messages: the count cannot tell which of the two is missing
    ledger = Ledger(1071, 780, 19, 63, framing=16, tools=798)
    got = check_reported(ledger, ledger.total - 790, "estimate", tool_choice="auto")
    assert got is not None and got.kind == "part_dropped"
    assert "dropped the tools" not in got.message and "tool results (780)" in got.message
    assert "tool definitions (798)" in got.message


def test_tool_results_alone_missing_are_named_as_such():
    ledger = Ledger(1071, 2400, 19, 63, framing=16, tools=798)
    got = check_reported(ledger, ledger.total - 2400, "estimate", tool_choice="auto")
    assert got is not None and got.kind == "results_dropped"
    assert "renders no tool messages" in got.message and "chatml-function-calling" in got.message
    assert "dropped the tools" not in got.message


def test_tool_choice_none_on_chatml_function_calling_is_not_a_cut_prompt():
    # measured: call 2 of the README's Context example (tool_choice "none" after max_tool_rounds),
    # 241 tokens counted, 116 reported by llama-cpp-python's server (n_ctx 4096: nothing was cut)
    ledger = Ledger(65, 50, 96, 10, framing=20, tools=55)
    got = check_reported(ledger, 116, "estimate", tool_choice="none")
    assert got is not None and got.kind == "tools_and_results_dropped"
    assert 'tool_choice is "none"' in got.message and "no tool messages" in got.message
    assert "context size" not in got.message


def test_the_tools_are_named_when_they_alone_explain_it():
    # no tool result yet: only the tools can be missing (what --chat_format chatml does)
    ledger = Ledger(1071, 0, 19, 63, framing=8, tools=798)
    got = check_reported(ledger, 390, "estimate", tool_choice="auto")
    assert got is not None and got.kind == "tools_dropped" and "dropped the tools" in got.message
    # a small result beside the tools changes nothing
    ledger = Ledger(1071, 40, 19, 63, framing=16, tools=798)
    got = check_reported(ledger, ledger.total - 800, "estimate", tool_choice="auto")
    assert got is not None and got.kind == "tools_dropped"


def test_a_prompt_short_by_none_of_the_parts_is_still_a_cut():
    ledger = Ledger(1071, 300, 2000, 63, framing=16, tools=798)
    got = check_reported(ledger, 600, "estimate", tool_choice="auto")
    assert got is not None and got.kind == "prompt_cut"
