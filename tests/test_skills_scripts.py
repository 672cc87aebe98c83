"""run_skill_script: real subprocesses in real skill folders, alone and through the harness."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

import skill_folders
from ctxwright import Harness, ScriptedBackend
from ctxwright.backends.scripted import call
from ctxwright.core.events import ToolEvent
from ctxwright.core.messages import Message
from ctxwright.errors import PrefixMismatch, SkillToolError
from ctxwright.skills import load_skills
from ctxwright.skills.scripts import SkillScripts, StreamCapture
from ctxwright.skills.tools import SkillTools
from skill_folders import no_conventional_skills  # noqa: F401 -- the fixture is autouse


def make_skill(root: Path, name: str, files: dict[str, str]) -> Path:
    return skill_folders.make_skill(root, name, "Run the script.", files)


ECHO = """import os, sys
print("args=" + repr(sys.argv[1:]))
print("cwd=" + os.getcwd())
print("stdin=" + repr(sys.stdin.read()))
"""
FAIL = "import sys\nprint('partial')\nprint('bad input: expected a number', file=sys.stderr)\nsys.exit(3)\n"


def runner(root: Path, **kw) -> SkillScripts:
    loaded = load_skills([root], home=root / "nohome", project_dir=root / "noproject")
    return SkillScripts(SkillTools(loaded.skills, scripts_allowed=True), **kw)


def test_a_script_runs_in_the_skill_folder_without_a_shell_and_without_stdin(tmp_path):
    folder = make_skill(tmp_path / "skills", "tool-kit", {"scripts/echo.py": ECHO})
    out = runner(tmp_path / "skills").run("tool-kit", "scripts/echo.py", ["a b", "; echo hacked", "$(id)"])
    assert out.startswith("scripts/echo.py (skill 'tool-kit') exited with code 0 after ")
    assert "args=['a b', '; echo hacked', '$(id)']" in out  # one literal argument each, no shell
    assert f"cwd={folder.resolve()}" in out
    assert "stdin=''" in out  # end of file at once, never a hang
    assert out.rstrip().endswith("<stderr/>")
    # the scripts/ prefix may be left out, and a .sh runs with bash
    (folder / "scripts" / "hi.sh").write_text('echo "sh:$1:$(basename "$PWD")"\n')
    assert "sh:x:tool-kit" in runner(tmp_path / "skills").run("tool-kit", "hi.sh", ["x"])


def test_a_non_zero_exit_is_a_result_with_both_streams(tmp_path):
    make_skill(tmp_path / "skills", "tool-kit", {"scripts/fail.py": FAIL})
    out = runner(tmp_path / "skills").run("tool-kit", "scripts/fail.py")
    assert "exited with code 3" in out
    assert "<stdout>\npartial\n\n</stdout>" in out
    assert "<stderr>\nbad input: expected a number\n\n</stderr>" in out


def test_other_files_need_their_executable_bit(tmp_path):
    folder = make_skill(tmp_path / "skills", "tool-kit", {"scripts/run": "#!/bin/sh\necho native\n"})
    with pytest.raises(SkillToolError, match=r"neither a \.py nor a \.sh file and is not executable"):
        runner(tmp_path / "skills").run("tool-kit", "scripts/run")
    os.chmod(folder / "scripts" / "run", 0o755)
    assert "native" in runner(tmp_path / "skills").run("tool-kit", "scripts/run")


def _dead(pid: int) -> bool:
    """Gone, or a zombie nobody reaped yet (PID 1 in a container may not reap)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        return "\nState:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True


def test_a_script_past_its_timeout_is_killed_with_its_children(tmp_path):
    hang = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "open('child.pid', 'w').write(str(child.pid))\n"
        "print('started', flush=True)\n"
        "time.sleep(60)\n"
    )
    folder = make_skill(tmp_path / "skills", "slow", {"scripts/hang.py": hang})
    t0 = time.perf_counter()
    with pytest.raises(SkillToolError) as info:
        runner(tmp_path / "skills", timeout_s=1.5).run("slow", "scripts/hang.py")
    assert time.perf_counter() - t0 < 10
    message = str(info.value)
    assert "did not finish within 1.5 s and was stopped (its process group was killed)" in message
    assert "started" in message  # what it printed before, for the model to see where it stopped
    child = int((folder / "child.pid").read_text())
    deadline = time.time() + 5
    while not _dead(child) and time.time() < deadline:
        time.sleep(0.05)
    assert _dead(child)


def _wait_dead(pid: int, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not _dead(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _dead(pid)


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def test_a_script_that_exits_takes_its_background_children_with_it(tmp_path):
    """Hostile probe: a script starts a child in the background and exits 0 at once; the child
    must not outlive the call (it would hold a port, burn CPU, outlive the agent)."""
    make_skill(tmp_path / "skills", "bg", {"scripts/bg.sh": "sleep 300 >/dev/null 2>&1 &\necho $!\nexit 0\n"})
    out = runner(tmp_path / "skills", timeout_s=60).run("bg", "scripts/bg.sh")
    assert "exited with code 0" in out
    child = int(out.split("<stdout>\n", 1)[1].split()[0])
    try:
        assert _wait_dead(child), f"the script's child {child} survived it"
    finally:
        _kill(child)


def test_output_is_returned_promptly_when_a_child_keeps_stdout_open(tmp_path):
    """Hostile probe: the child inherits the script's stdout and keeps it open for 300 s; the
    call returns what the script wrote as soon as the script exits, not after a fixed wait and
    not empty."""
    folder = make_skill(
        tmp_path / "skills", "holder", {"scripts/holder.sh": "echo hello\nsleep 300 &\necho $! > child.pid\n"}
    )
    t0 = time.monotonic()
    out = runner(tmp_path / "skills", timeout_s=60).run("holder", "scripts/holder.sh")
    elapsed = time.monotonic() - t0
    child = int((folder / "child.pid").read_text())
    try:
        assert "exited with code 0" in out
        assert "<stdout>\nhello\n" in out, out
        assert elapsed < 10, elapsed  # the script's timeout is 60 s
        assert _wait_dead(child)  # and the child went with the script's group
    finally:
        _kill(child)


def test_a_child_that_left_the_group_does_not_hide_the_output_nor_hold_the_call(tmp_path):
    """Hostile probe: the child moves to a session of its own (so killing the script's group
    does not reach it) and holds stdout and stderr open; what the script wrote still comes back,
    well before the script's timeout, and the child is gone (the supervisor is its subreaper)."""
    escape = (
        "import subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'], start_new_session=True)\n"
        "open('child.pid', 'w').write(str(child.pid))\n"
        "print('hello from the script', flush=True)\n"
    )
    folder = make_skill(tmp_path / "skills", "escape", {"scripts/escape.py": escape})
    t0 = time.monotonic()
    out = runner(tmp_path / "skills", timeout_s=60).run("escape", "scripts/escape.py")
    elapsed = time.monotonic() - t0
    child = int((folder / "child.pid").read_text())
    try:
        assert "exited with code 0" in out
        assert "<stdout>\nhello from the script\n" in out, out
        assert elapsed < 30, elapsed  # the script's timeout is 60 s
        assert _wait_dead(child), f"the script's child {child} left its group and survived it"
    finally:
        _kill(child)


#: A script whose child leaves the script's session (``setsid``), ignores SIGTERM and writes its
#: pid to ``child.pid``; the script waits for that file, then exits -- or hangs, with ``hang``.
ESCAPER = """import os, subprocess, sys, time
child = (
    "import os, signal, time\\n"
    "os.setsid()\\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
    "open('child.tmp', 'w').write(str(os.getpid()))\\n"
    "os.rename('child.tmp', 'child.pid')\\n"
    "time.sleep(300)\\n"
)
subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
while not os.path.exists("child.pid"):
    time.sleep(0.02)
print("child started", flush=True)
if sys.argv[1:] == ["hang"]:
    time.sleep(300)
"""


@pytest.mark.parametrize("hang", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_a_setsid_child_that_ignores_sigterm_does_not_outlive_the_script(tmp_path, hang):
    """Hostile probe: a daemon-like child (own session, SIGTERM ignored, no pipe of the
    script's) is out of reach of any killpg; it is re-parented to the supervisor, which ends
    it with SIGKILL after its grace -- when the script exits and when it is timed out."""
    folder = make_skill(tmp_path / "skills", "escaper", {"scripts/escape.py": ESCAPER})
    scripts = runner(tmp_path / "skills", timeout_s=5 if hang else 60)
    child = 0
    try:
        if hang:
            with pytest.raises(SkillToolError, match="did not finish within 5 s") as info:
                scripts.run("escaper", "scripts/escape.py", ["hang"])
            assert "child started" in str(info.value)
        else:
            out = scripts.run("escaper", "scripts/escape.py")
            assert "exited with code 0" in out and "child started" in out
        child = int((folder / "child.pid").read_text())
        assert _wait_dead(child), f"the script's setsid child {child} survived it"
    finally:
        if child:
            _kill(child)


def test_only_files_under_scripts_can_run(tmp_path):
    root = tmp_path / "skills"
    folder = make_skill(root, "tool-kit", {"scripts/ok.py": "print('ok')\n", "refs/notes.py": "print('no')\n"})
    (tmp_path / "evil.py").write_text("print('outside')\n")
    os.symlink(tmp_path / "evil.py", folder / "scripts" / "out.py")
    os.symlink(folder / "refs" / "notes.py", folder / "scripts" / "notes.py")
    (folder / "scripts" / "sub").mkdir()
    r = runner(root)
    for script, why in [
        ("refs/notes.py", "not under the skill's scripts/ folder"),
        ("scripts/notes.py", "not under the skill's scripts/ folder"),  # a link out of scripts/
        ("scripts/out.py", "outside the skill's folder"),
        ("../evil.py", "'..'"),
        ("scripts/../../evil.py", "'..'"),
        (str(tmp_path / "evil.py"), "absolute"),
        ("scripts/missing.py", "has no file"),
        ("scripts/sub", "not a regular file"),
        ("", "empty"),
    ]:
        with pytest.raises(SkillToolError, match=why):
            r.run("tool-kit", script)
    with pytest.raises(SkillToolError, match="there is no skill named 'tool-kits'"):
        r.run("tool-kits", "scripts/ok.py")
    assert "ok" in r.run("tool-kit", "scripts/ok.py")


def test_output_is_bounded_in_memory_while_it_is_read(tmp_path):
    make_skill(
        tmp_path / "skills",
        "loud",
        {"scripts/loud.py": "import sys\nsys.stdout.write('a' * 100 + 'b' * 900 + 'c' * 50)\n"},
    )
    out = runner(tmp_path / "skills", head_bytes=100, tail_bytes=50).run("loud", "scripts/loud.py")
    assert "a" * 100 + "\n[... 900 bytes of output not kept: the script wrote 1,050 bytes ...]\n" + "c" * 50 in out
    cap = StreamCapture(head=4, tail=0)
    cap.feed(b"123")
    cap.feed(b"45678")
    assert (cap.total, bytes(cap.start), cap.text()) == (
        8,
        b"1234",
        "1234\n[... 4 bytes of output not kept: the script wrote 8 bytes ...]\n",
    )


# --- through the harness ------------------------------------------------------------------------


def _tool_messages(backend: ScriptedBackend, request: int) -> list[Message]:
    return [m for m in backend.requests[request].messages if m.role == "tool"]


def test_off_by_default_and_the_skill_result_does_not_offer_scripts(tmp_path):
    root = tmp_path / "skills"
    make_skill(root, "tool-kit", {"scripts/echo.py": ECHO})
    backend = ScriptedBackend([Message(role="assistant", tool_calls=(call("Skill", {"name": "tool-kit"}),)), "done"])
    with Harness(system="S.", tools=[], backend=backend, skills=[root], status=False) as h:
        h.run("go")
    names = [t.name for t in backend.requests[0].tools]
    assert names[-2:] == ["Skill", "read_skill_file"] and "run_skill_script" not in names
    body = _tool_messages(backend, 1)[0].content or ""
    assert "run_skill_script" not in body and "Running skill scripts is off in this session" in body


def test_on_it_runs_scripts_the_session_records_it_and_resume_keeps_the_tool(tmp_path):
    root = tmp_path / "skills"
    make_skill(root, "tool-kit", {"scripts/echo.py": ECHO, "scripts/fail.py": FAIL})
    db = tmp_path / "s.db"
    backend = ScriptedBackend(
        [
            Message(role="assistant", tool_calls=(call("Skill", {"name": "tool-kit"}),)),
            Message(
                role="assistant",
                tool_calls=(
                    call("run_skill_script", {"name": "tool-kit", "script": "scripts/echo.py", "args": ["x"]}),
                ),
            ),
            Message(
                role="assistant", tool_calls=(call("run_skill_script", {"name": "tool-kit", "script": "fail.py"}),)
            ),
            "done",
        ]
    )
    opts = dict(system="S.", tools=[], skills=[root], db=db, status=False, max_tool_rounds=5)
    with Harness(backend=backend, allow_skill_scripts=True, skill_script_timeout=7, **opts) as h:
        result = h.run("go")
        sid, prefix = h.session_id, h.session.prefix.sha256
        assert h.session.meta["harness"]["skills"]["allow_scripts"] is True
        assert h.session.meta["harness"]["skills"]["script_timeout"] == 7.0
        assert h.tools.get("run_skill_script").timeout_s == 17.0  # the loop waits past the script's own kill
    assert result.stop_reason == "final_answer"
    assert [t.name for t in backend.requests[0].tools][-3:] == ["Skill", "read_skill_file", "run_skill_script"]
    skill_body, echo, fail = (m.content or "" for m in _tool_messages(backend, 3))
    assert "Run a file under scripts/ with run_skill_script(name='tool-kit'" in skill_body
    assert "exited with code 0" in echo and "args=['x']" in echo
    assert "exited with code 3" in fail and "bad input" in fail

    # a resume without the option keeps the tool (it is in the prefix) and the recorded timeout
    with Harness.resume(sid, backend=ScriptedBackend(["again"]), **opts) as h2:
        assert h2.session.prefix.sha256 == prefix
        assert h2.skill_scripts is not None and h2.skill_scripts.timeout_s == 7.0
    # turning it off would change the prefix: refused
    with pytest.raises(PrefixMismatch, match="missing run_skill_script"):
        Harness.resume(sid, backend=ScriptedBackend(["no"]), allow_skill_scripts=False, **opts)


def test_no_skills_no_script_tool(tmp_path):
    backend = ScriptedBackend(["hi"])
    with Harness(system="S.", tools=[], backend=backend, skills=[], allow_skill_scripts=True, status=False) as h:
        h.run("hello")
    assert not any("skill" in t.name.lower() for t in backend.requests[0].tools)


def test_a_timeout_is_a_tool_error_and_the_session_goes_on(tmp_path):
    root = tmp_path / "skills"
    make_skill(root, "slow", {"scripts/hang.py": "import time\nprint('waiting', flush=True)\ntime.sleep(60)\n"})
    backend = ScriptedBackend(
        [
            Message(
                role="assistant", tool_calls=(call("run_skill_script", {"name": "slow", "script": "scripts/hang.py"}),)
            ),
            "gave up",
        ]
    )
    with Harness(
        system="S.",
        tools=[],
        backend=backend,
        skills=[root],
        allow_skill_scripts=True,
        skill_script_timeout=1,
        status=False,
    ) as h:
        result = h.run("go")
    assert result.final_answer == "gave up"
    error = json.loads(_tool_messages(backend, 1)[0].content or "")["error"]
    assert error["type"] == "SkillToolError"
    assert "did not finish within 1 s" in error["message"] and "waiting" in error["message"]


@pytest.mark.parametrize("compaction", [True, False])
def test_huge_output_goes_through_the_result_budget(tmp_path, compaction):
    root = tmp_path / "skills"
    make_skill(root, "loud", {"scripts/loud.py": "import sys\nsys.stdout.write('line of output\\n' * 200_000)\n"})
    backend = ScriptedBackend(
        [Message(role="assistant", tool_calls=(call("run_skill_script", {"name": "loud", "script": "loud.py"}),)), "ok"]
    )
    with Harness(
        system="S.",
        tools=[],
        backend=backend,
        skills=[root],
        allow_skill_scripts=True,
        status=False,
        db=tmp_path / "b.db",
        compaction=compaction,
        read_result=True if compaction else None,
    ) as h:
        h.run("go")
        event = next(ev for ev in h.session.events if isinstance(ev, ToolEvent))
    sent = _tool_messages(backend, 1)[0].content or ""
    if compaction:  # offloaded to disk whole; the context gets the preview
        # previewed, or (its lines all alike) folded by the log compressor
        assert len(sent) < 20_000 and (
            "saved in full as result_id" in sent or "the exact original: read_result" in sent
        )
        assert event.offload is not None and event.offload.chars > 200_000 * 15  # the whole output, restorable
        assert Path(event.offload.path).read_text().count("line of output\n") == 200_000
    else:  # the plain character cap
        assert len(sent) < 250_000 and "characters omitted" in sent
    assert "scripts/loud.py (skill 'loud') exited with code 0" in sent


def test_cli_run_allow_skill_scripts(tmp_path, capsys):
    from ctxwright.cli.main import main
    from fakeserver import FakeOpenAIServer as F

    root = tmp_path / "skills"
    make_skill(root, "tool-kit", {"scripts/echo.py": ECHO})
    db = tmp_path / "c.db"
    argv = ["--db", str(db), "run", "--model", "m", "--skills", str(root)]
    with F([F.reply_text("done")]) as srv:
        assert main([*argv, "--base-url", srv.url, "--allow-skill-scripts", "--skill-script-timeout", "5", "go"]) == 0
        with_scripts = json.dumps(srv.requests[0])
    with F([F.reply_text("done")]) as srv:
        assert main([*argv, "--base-url", srv.url, "go"]) == 0
        without = json.dumps(srv.requests[0])
    assert '"run_skill_script"' in with_scripts and '"run_skill_script"' not in without
    assert sys.executable  # the .py scripts run with this interpreter
