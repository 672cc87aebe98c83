"""``run_skill_script``: run one file of a skill's ``scripts/`` folder, when the user allows it.

A skill folder is third-party code: it is downloaded from a repository, shared by a
colleague, or dropped into ``~/.agents/skills/`` by another tool, and nobody reviewed it for
this agent. So running its scripts is **off by default** (``Harness(allow_skill_scripts=True)``,
CLI ``--allow-skill-scripts``), and when it is on, a run is fenced in:

* only a regular file under the skill's own ``scripts/`` folder, by the same confinement
  checks as ``read_skill_file`` (:meth:`SkillTools.resolve`: no absolute path, no ``..``,
  no symlink that leaves the folder);
* no shell: the model's arguments are an argv list, never a command line a shell would
  parse (``; rm -rf ~`` in an argument is one literal argument); ``.py`` runs with this
  Python, ``.sh`` with ``bash``, anything else only if it has its executable bit;
* the skill's folder as working directory (the specification's relative paths,
  ``scripts/extract.py``, ``references/...``, resolve the way the author wrote them),
  standard input closed (a script that asks a question gets end-of-file, not a hang);
* a timeout: the script runs in its own process group, and the whole group is killed when
  the time is up, so a child it started does not outlive it; the model gets a tool error
  saying so;
* its output is bounded in memory while it is read (a head and a tail of each stream) and
  returned as an ordinary tool result, so it passes the same result budget, disk offload
  and ``read_result`` paging as every other tool result (``compaction/budget.py``): a
  script that prints 50 MB costs the context a preview, like any other tool.

A script that exits non-zero is a result, not a tool error: its exit code, stdout and stderr
are what the model needs to fix its arguments.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ctxwright.errors import SkillToolError
from ctxwright.skills.tools import RUN_SKILL_SCRIPT_TOOL, SCRIPTS_DIR, SkillTools
from ctxwright.tools.registry import Tool

#: Seconds a script may run before its process group is killed.
DEFAULT_SCRIPT_TIMEOUT_S = 30.0
#: Bytes of each stream kept from its start, and from its end, while it is read; what lies
#: between is counted, not kept. The kept text still goes through the result budget.
HEAD_BYTES = 4 * 1024 * 1024
TAIL_BYTES = 256 * 1024
#: Seconds the loop waits beyond the script's own timeout before it abandons the call, so
#: the script's kill (and its clear message) comes first.
LOOP_MARGIN_S = 10.0


@dataclass
class StreamCapture:
    """One output stream, drained to its end in a thread: the first ``head`` bytes, the
    last ``tail`` bytes after them, and the total -- a script cannot fill the memory, and
    it never blocks on a full pipe because everything it writes is read."""

    head: int = HEAD_BYTES
    tail: int = TAIL_BYTES
    start: bytearray = field(default_factory=bytearray)
    end: bytearray = field(default_factory=bytearray)
    total: int = 0

    def drain(self, pipe: IO[bytes]) -> None:
        with pipe:
            while chunk := pipe.read(65536):
                self.total += len(chunk)
                room = self.head - len(self.start)
                if room > 0:
                    self.start += chunk[:room]
                    chunk = chunk[room:]
                if chunk and self.tail:
                    self.end += chunk
                    if len(self.end) > self.tail:
                        del self.end[: len(self.end) - self.tail]

    def text(self) -> str:
        """What was kept, decoded; invalid UTF-8 kept as surrogate escapes so the budget layer
        replaces and reports it (``compaction/budget.py``)."""
        out = self.start.decode("utf-8", "surrogateescape")
        skipped = self.total - len(self.start) - len(self.end)
        if skipped > 0:
            out += f"\n[... {skipped:,} bytes of output not kept: the script wrote {self.total:,} bytes ...]\n"
        return out + self.end.decode("utf-8", "surrogateescape")


class SkillScripts:
    """The ``run_skill_script`` tool over the skills of a :class:`SkillTools`."""

    def __init__(
        self,
        skill_tools: SkillTools,
        *,
        timeout_s: float = DEFAULT_SCRIPT_TIMEOUT_S,
        head_bytes: int = HEAD_BYTES,
        tail_bytes: int = TAIL_BYTES,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"the skill script timeout must be positive, got {timeout_s!r}")
        self.skill_tools = skill_tools
        self.timeout_s = timeout_s
        self.head_bytes = head_bytes
        self.tail_bytes = tail_bytes

    def argv(self, target: Path, script: str, args: Sequence[str]) -> list[str]:
        """How to start ``target``: by its extension, else by its executable bit."""
        try:
            st = target.stat()
        except OSError as exc:
            raise SkillToolError(f"cannot run {script!r}: {exc.strerror or exc}") from None
        if not stat.S_ISREG(st.st_mode):
            raise SkillToolError(f"{script!r} is not a regular file (a folder, pipe or device); give a script file")
        suffix = target.suffix.lower()
        if suffix == ".py":
            return [sys.executable, str(target), *args]
        if suffix == ".sh":
            bash = shutil.which("bash")
            if bash is None:
                raise SkillToolError(f"{script!r} is a bash script and bash is not installed here")
            return [bash, str(target), *args]
        if not os.access(target, os.X_OK):
            raise SkillToolError(
                f"{script!r} is neither a .py nor a .sh file and is not executable; only those can be run "
                f"(read it with read_skill_file instead)"
            )
        return [str(target), *args]

    def run(self, name: str, script: str, args: Sequence[str] | None = None) -> str:
        """The tool's body: run the script, return its exit code, stdout and stderr."""
        skill = self.skill_tools.skill(name)
        rel = script.strip().replace("\\", "/")
        if rel and "/" not in rel and rel != "..":  # a bare file name: 'extract.py' means scripts/extract.py
            rel = f"{SCRIPTS_DIR}/{rel}"
        target = self.skill_tools.resolve(skill, rel, under=SCRIPTS_DIR)
        argv = self.argv(target, script, list(args or ()))
        out, err = StreamCapture(self.head_bytes, self.tail_bytes), StreamCapture(self.head_bytes, self.tail_bytes)
        started = time.perf_counter()
        try:
            proc = subprocess.Popen(
                argv,
                cwd=skill.folder,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # its own process group: the timeout kills its children too
            )
        except OSError as exc:
            raise SkillToolError(f"cannot start {script!r}: {exc.strerror or exc}") from None
        assert proc.stdout is not None and proc.stderr is not None
        readers = [
            threading.Thread(target=cap.drain, args=(pipe,), daemon=True, name=f"skill-script-{stream}")
            for cap, pipe, stream in ((out, proc.stdout, "out"), (err, proc.stderr, "err"))
        ]
        for r in readers:
            r.start()
        try:
            code = proc.wait(self.timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            for r in readers:  # a grandchild that left the group may hold a pipe: do not wait for it
                r.join(2.0)
            raise SkillToolError(
                f"{rel} of skill {skill.name!r} did not finish within {self.timeout_s:g} s and was stopped "
                f"(its process group was killed). Output before it was stopped:\n"
                f"{_block('stdout', _tail(out.text()))}\n{_block('stderr', _tail(err.text()))}"
            ) from None
        finally:
            if proc.poll() is None:  # an exception escaped while waiting (Ctrl-C): leave no child behind
                _kill_group(proc)
        for r in readers:
            r.join(2.0)
        elapsed = time.perf_counter() - started
        return (
            f"{rel} (skill {skill.name!r}) exited with code {code} after {elapsed:.2f} s\n"
            f"{_block('stdout', out.text())}\n{_block('stderr', err.text())}"
        )

    def tool(self) -> Tool:
        """The tool; its schema and description do not depend on the skills or the timeout
        (the prefix stays the same when either changes)."""

        def run_skill_script(name: str, script: str, args: list[str] | None = None) -> str:
            """Run a script from a skill's scripts/ folder (listed in its <skill_resources>) and get
            its exit code, stdout and stderr. It runs in the skill's folder, without a shell, with
            a time limit.

            Args:
                name: the skill's name.
                script: the script's path relative to the skill's folder, e.g. 'scripts/extract.py'.
                args: the script's command-line arguments, one string each.
            """
            return self.run(name, script, args)

        # third-party code: its output is untrusted, and it can do anything the user can
        return Tool.from_function(
            run_skill_script,
            name=RUN_SKILL_SCRIPT_TOOL,
            timeout_s=self.timeout_s + LOOP_MARGIN_S,
            trust="untrusted",
            effects="external",
        )


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the script's process group (it leads its own session), then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def _block(tag: str, text: str) -> str:
    return f"<{tag}>\n{text}\n</{tag}>" if text else f"<{tag}/>"


def _tail(text: str, limit: int = 2000) -> str:
    """The end of a timed-out script's output: where it stopped is what tells why."""
    return text if len(text) <= limit else f"[... {len(text) - limit:,} characters before ...]\n" + text[-limit:]


__all__ = [
    "DEFAULT_SCRIPT_TIMEOUT_S",
    "RUN_SKILL_SCRIPT_TOOL",
    "SCRIPTS_DIR",
    "SkillScripts",
    "StreamCapture",
]
