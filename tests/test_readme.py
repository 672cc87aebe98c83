"""Every ```python block under the README's "## Use it as a library" runs, as written, in a
temporary directory: the documented API is the one that works.

A block that runs the embedded model (``backend="embedded"``, or ``gguf=``) is a slow test
and is skipped when the embedded extra or its bundled model is not installed. A block that
talks to a served model at ``http://127.0.0.1:8080/v1`` (the ``Context`` example) runs against
llama-cpp-python's own server, started here on a free port (``tests/llamaserver.py``): slow too.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
HEADING = "## Use it as a library"


def library_blocks() -> list[str]:
    """The python blocks of the section, in order (up to the next level-2 heading)."""
    text = README.read_text(encoding="utf-8")
    match = re.search(rf"^{re.escape(HEADING)}[ \t]*$(.*?)(?=^## |\Z)", text, re.M | re.S)
    if match is None:
        return []
    return re.findall(r"^```python[ \t]*\n(.*?)^```", match.group(1), re.M | re.S)


SERVED_URL = "http://127.0.0.1:8080/v1"


def _uses_embedded(code: str) -> bool:
    return 'backend="embedded"' in code or "backend='embedded'" in code or "gguf=" in code


def _slow(code: str) -> bool:
    return _uses_embedded(code) or SERVED_URL in code


BLOCKS = library_blocks()


def test_the_section_has_examples():
    assert BLOCKS, f"README.md has no ```python block under {HEADING!r}"


@pytest.mark.parametrize(
    "code",
    [pytest.param(code, marks=[pytest.mark.slow] if _slow(code) else []) for code in BLOCKS],
    ids=[f"block{i}" for i in range(len(BLOCKS))],
)
def test_readme_block_runs(code, tmp_path, monkeypatch, capsys):
    if _uses_embedded(code):
        pytest.importorskip("llama_cpp", reason="the embedded extra is not installed")
        from ctxwright.backends.embedded import find_model_file
        from ctxwright.errors import BackendUnavailable

        try:
            find_model_file()
        except BackendUnavailable as exc:
            pytest.skip(str(exc))
    monkeypatch.chdir(tmp_path)
    if SERVED_URL in code:
        from llamaserver import LlamaServer

        with LlamaServer(tmp_path / "server.log") as srv:
            code = code.replace(SERVED_URL, srv.url)
            exec(compile(code, f"{README.name} ({HEADING})", "exec"), {"__name__": "__readme__"})
    else:
        exec(compile(code, f"{README.name} ({HEADING})", "exec"), {"__name__": "__readme__"})
    assert capsys.readouterr().out.strip(), "the example prints what it did"


def test_the_readme_names_every_command_the_cli_has() -> None:
    """The README's one-line command list is the parser's list of subcommands: a command added to
    the CLI and left out of the README (as ``skills`` and ``tools`` once were) fails here."""
    import argparse

    from ctxwright.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    match = re.search(r"a command \(`ctxwright ([^`]+)`\)", README.read_text(encoding="utf-8"))
    assert match is not None, "the README's command list (`ctxwright run | ...`) is missing"
    listed = [c.strip() for c in match.group(1).split("|")]
    assert sorted(listed) == sorted(sub.choices), f"README lists {listed}, the CLI has {sorted(sub.choices)}"


def test_the_makefile_and_the_readme_give_the_same_build_time() -> None:
    """The llama-cpp-python build time the Makefile prints is the one the README promises."""
    makefile = (README.parent / "Makefile").read_text(encoding="utf-8")
    readme = README.read_text(encoding="utf-8")
    said = re.search(r"about (\d+)-(\d+) minutes", makefile)
    promised = re.search(r"\((\d+)–(\d+) minutes on 2 cores\)", readme)
    assert said is not None and promised is not None
    assert said.groups() == promised.groups()
