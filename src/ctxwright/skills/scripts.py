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
* under ctxwright's supervisor (``core/supervise.py``, as MCP servers and the CI gate's agent),
  in a process group of its own that is ended when the script exits -- every time, not only
  at the timeout: what a script leaves running in the background (``server &``) is no part of
  its result and would outlive the agent, holding a port or a CPU. On Linux that includes a
  child that left the group (``setsid``, a daemon's double fork): the supervisor is the
  subreaper it is re-parented to, and ends it too. Nothing a script starts outlives the call,
  nor ctxwright when it dies (``PR_SET_PDEATHSIG``). The supervisor ends them with SIGTERM and
  SIGKILL a second later (:data:`~ctxwright.core.supervise.END_S` at most), and the call
  returns once they are gone. Its exit code is the script's (``128 + N`` for a script ended
  by signal ``N``, as a shell reports it);
* a timeout: when the time is up the supervisor ends the script and everything it started,
  and the model gets a tool error saying so, with what the script printed until then;
* its pipes read as data arrives, not in blocks or until end-of-file: a child that inherited
  stdout and keeps it open (``echo hello; sleep 300 &``) must not hide what the script wrote,
  nor hold the call until the timeout. Once the supervisor exits, what the pipes still hold
  is collected, and a pipe still held open :data:`DRAIN_GRACE_S` later (only where there is
  no subreaper, not Linux: by a child that escaped the group) is abandoned;
* its output is bounded in memory while it is read (a head and a tail of each stream) and
  returned as an ordinary tool result, so it passes the same result budget, disk offload
  and ``read_result`` paging as every other tool result (``compaction/budget.py``): a
  script that prints 50 MB costs the context a preview, like any other tool.

A script that exits non-zero is a result, not a tool error: its exit code, stdout and stderr
are what the model needs to fix its arguments.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ctxwright.core.supervise import END_S, find_executable, launch_argv
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
#: Seconds the supervisor has, once told to stop (timeout, Ctrl-C), to end the script and
#: everything it started (it takes at most its ``END_S``) before it is SIGKILLed itself.
STOP_GRACE_S = END_S + 3.0
#: Seconds to keep reading once the supervisor has exited: everything the script started is
#: gone by then and the pipes close at once, so this is only ever waited for in full where
#: there is no subreaper (not Linux) and a child that left the group holds a pipe -- it may
#: do so forever.
DRAIN_GRACE_S = 1.0
#: Seconds between two checks of whether the script has exited, where the kernel cannot
#: signal it on a file descriptor (no ``pidfd_open``: not Linux, or before 5.3).
POLL_S = 0.05


@dataclass
class StreamCapture:
    """One output stream, kept bounded as it is read: the first ``head`` bytes, the last
    ``tail`` bytes after them, and the total -- a script cannot fill the memory, and it never
    blocks on a full pipe because everything it writes is read."""

    head: int = HEAD_BYTES
    tail: int = TAIL_BYTES
    start: bytearray = field(default_factory=bytearray)
    end: bytearray = field(default_factory=bytearray)
    total: int = 0

    def feed(self, chunk: bytes) -> None:
        """Keep what the bounds allow of ``chunk``, the next bytes the stream delivered."""
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
            executable = find_executable(argv[0], os.environ, str(skill.folder))
            proc = subprocess.Popen(
                launch_argv(executable, argv),
                cwd=skill.folder,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # the supervisor's own session; the script gets a group of its own
            )
        except OSError as exc:
            raise SkillToolError(f"cannot start {script!r}: {exc.strerror or exc}") from None
        assert proc.stdout is not None and proc.stderr is not None
        try:
            with _Pipes(proc, {proc.stdout.fileno(): out, proc.stderr.fileno(): err}) as pipes:
                exited = False
                try:  # the supervisor exits once the script did and nothing it started is left
                    exited = pipes.read_until_exit(self.timeout_s)
                finally:  # timed out, or Ctrl-C: the supervisor ends the script and what it started
                    if not exited:
                        _stop(proc, pipes)
                pipes.drain(DRAIN_GRACE_S)
        finally:
            code = proc.wait()
            proc.stdout.close()
            proc.stderr.close()
        if not exited:
            raise SkillToolError(
                f"{rel} of skill {skill.name!r} did not finish within {self.timeout_s:g} s and was stopped "
                f"(its process group was killed). Output before it was stopped:\n"
                f"{_block('stdout', _tail(out.text()))}\n{_block('stderr', _tail(err.text()))}"
            )
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


class _Pipes:
    """The script's two pipes, read without blocking as data arrives (``os.read`` returns what
    is there; a buffered ``read(n)`` would wait for ``n`` bytes or end-of-file, which a child
    holding the pipe open never sends), and the watch on the script's exit."""

    def __init__(self, proc: subprocess.Popen[bytes], streams: dict[int, StreamCapture]) -> None:
        self.proc = proc
        self.selector = selectors.DefaultSelector()
        for fd, capture in streams.items():
            os.set_blocking(fd, False)
            self.selector.register(fd, selectors.EVENT_READ, capture)
        self.exit_fd = _exit_fd(proc.pid)
        if self.exit_fd is not None:
            self.selector.register(self.exit_fd, selectors.EVENT_READ, None)

    def __enter__(self) -> _Pipes:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.selector.close()
        if self.exit_fd is not None:
            os.close(self.exit_fd)

    def _open_pipes(self) -> int:
        return sum(1 for key in self.selector.get_map().values() if key.data is not None)

    def _read(self, timeout: float) -> None:
        """Wait up to ``timeout`` for data (or the exit), and keep what every ready pipe holds."""
        for key, _ in self.selector.select(max(timeout, 0.0)):
            if key.data is None:
                continue  # the exit watch: the caller checks
            try:
                chunk = os.read(key.fd, 65536)
            except BlockingIOError:
                continue
            if chunk:
                key.data.feed(chunk)
            else:  # end of file: every writer closed it
                self.selector.unregister(key.fd)

    def read_until_exit(self, timeout_s: float) -> bool:
        """Read until the script exits (True) or ``timeout_s`` passes (False)."""
        deadline = time.monotonic() + timeout_s
        while not _exited(self.proc):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._read(left if self.exit_fd is not None else min(left, POLL_S))
        return True

    def drain(self, grace_s: float) -> None:
        """Read what is left until both pipes are closed, for at most ``grace_s``."""
        if self.exit_fd is not None:  # readable for good once the script exited: stop watching
            self.selector.unregister(self.exit_fd)
        deadline = time.monotonic() + grace_s
        while self._open_pipes() and (left := deadline - time.monotonic()) > 0:
            self._read(left)


def _exit_fd(pid: int) -> int | None:
    """A descriptor that becomes readable when ``pid`` exits (Linux's ``pidfd_open``), else None."""
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None:
        return None
    try:
        return int(pidfd_open(pid))
    except OSError:
        return None


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    """Whether the supervisor has exited: the script did, and nothing it started is left."""
    return proc.poll() is not None


def _stop(proc: subprocess.Popen[bytes], pipes: _Pipes) -> None:
    """SIGTERM to the supervisor: it ends the script's group and every child re-parented to it
    (within its ``END_S``), while what they still print is read; SIGKILL to the supervisor if
    it lingers past :data:`STOP_GRACE_S` (only what the kernel does not let die lingers)."""
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    if not pipes.read_until_exit(STOP_GRACE_S):
        with contextlib.suppress(ProcessLookupError):
            proc.kill()


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
