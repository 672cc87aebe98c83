"""Every ```python block under the README's "## Use it as a library" runs, as written, in a
temporary directory: the documented API is the one that works.

A block that runs the embedded model (``backend="embedded"``, or ``gguf=``) is a slow test
and is skipped when the embedded extra or its bundled model is not installed. A block that
talks to a served model at ``http://127.0.0.1:8080/v1`` (the ``Context`` example, the framework
ones) runs against llama-cpp-python's own server started by the README's own command line (the
```bash block that runs ``llama_cpp.server``), on a free port instead of 8080: slow too.

The README's ``ctxwright lock`` commands run too, in order, on a small golden: each names its
source (a ``lock --check`` without one cannot work).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from ports import free_port

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


def server_command() -> str:
    """The README's one line that starts llama-cpp-python's server for the served examples."""
    text = README.read_text(encoding="utf-8")
    lines = [
        line
        for block in re.findall(r"^```bash[ \t]*\n(.*?)^```", text, re.M | re.S)
        for line in block.splitlines()
        if "llama_cpp.server" in line
    ]
    assert len(lines) == 1, "the README says once how to start the server its examples talk to"
    return lines[0]


def test_the_server_line_serves_the_examples_url() -> None:
    """The line starts the server where the snippets look for it, with tools kept."""
    line = server_command()
    assert "--port 8080" in line and "--host 127.0.0.1" in line and SERVED_URL.startswith("http://127.0.0.1:8080/")
    assert "--chat_format chatml-function-calling" in line  # plain chatml drops the tools (docs/servers.md)


@pytest.fixture(scope="module")
def readme_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The README's server line, run as written from the clone -- only its port is a free one
    (and ``.venv/bin/python`` this interpreter, the same one under ``make test``) -- until it
    answers ``/v1/models``; ended by its process group."""
    pytest.importorskip("llama_cpp.server.app", reason="llama-cpp-python's server extra is not installed")
    port = free_port()
    python = shlex.quote(sys.executable)
    line = server_command().replace("--port 8080", f"--port {port}").replace(".venv/bin/python", python)
    log = tmp_path_factory.mktemp("readme-server") / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["bash", "-c", line], cwd=README.parent, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 300  # a loaded machine loads the model slowly
        while True:
            assert proc.poll() is None, f"the README's server line exited:\n{log.read_text(errors='replace')[-3000:]}"
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=2) as r:
                    json.load(r)
                break
            except OSError:
                assert time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
                time.sleep(0.25)
        yield url
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=20)


@pytest.mark.parametrize(
    "code",
    [pytest.param(code, marks=[pytest.mark.slow] if _slow(code) else []) for code in BLOCKS],
    ids=[f"block{i}" for i in range(len(BLOCKS))],
)
def test_readme_block_runs(code, tmp_path, monkeypatch, capsys, request):
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
        code = code.replace(SERVED_URL, request.getfixturevalue("readme_server"))
    exec(compile(code, f"{README.name} ({HEADING})", "exec"), {"__name__": "__readme__"})
    out = capsys.readouterr().out.strip()
    assert out, "the example prints what it did"
    assert not re.search(r"\bNone$", out), f"the example ends by printing None: {out!r}"
    if "ctx.audit()" in code:  # llama-cpp-python's server reports no cached tokens: said, not printed as None
        assert out.endswith("the server reported no cached-token count"), out


def test_the_readme_lock_commands_name_their_source_and_run(tmp_path, monkeypatch, capsys) -> None:
    """Every ``ctxwright lock ...`` the README shows names a source, and they run as written, in
    order, on a golden of one request: the first writes ``ctxwright.lock``, ``--check`` passes."""
    from ctxwright.cli.main import main as cli

    text = re.sub(r"\s+", " ", README.read_text(encoding="utf-8"))
    commands = re.findall(r"`ctxwright (lock [^`]*)`", text)
    assert commands, "the README shows ctxwright lock"
    assert all(len([a for a in shlex.split(c) if not a.startswith("-")]) >= 2 for c in commands), commands
    request = {
        "model": "gpt-4.1",
        "messages": [{"role": "system", "content": "# Role\nYou add numbers."}, {"role": "user", "content": "2+3?"}],
        "tools": [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}],
    }
    (tmp_path / "golden.jsonl").write_text(json.dumps({"request": request}) + "\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    for command in commands:
        assert cli(shlex.split(command)) == 0, (command, capsys.readouterr())
    assert (tmp_path / "ctxwright.lock").is_file()


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
