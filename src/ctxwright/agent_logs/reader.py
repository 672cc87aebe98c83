"""Reading a set of agent log files as one stream of calls, markers and problems.

Each file is read as a stream (``lines.py``); a file that cannot be opened or read is one
problem and the others are still read; Claude Code files are read oldest first (``find.py``) so
a repeated answer is counted in the session ccusage counts it in.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ctxwright.agent_logs.claude_code import read_claude_code
from ctxwright.agent_logs.codex import read_codex
from ctxwright.agent_logs.find import detect, earliest_stamp, jsonl_files
from ctxwright.agent_logs.records import CLAUDE_CODE, CODEX, LogItem, LogProblem, Skipped
from ctxwright.audit.logs import MAX_RECORD_BYTES
from ctxwright.errors import LogUnreadable


@dataclass(frozen=True)
class LogFile:
    """One file to read: which agent wrote it, and the folder its session keys are taken under."""

    path: Path
    agent: str
    root: Path | None = None


def _why(exc: OSError | LogUnreadable) -> str:
    return str(exc.strerror or exc) if isinstance(exc, OSError) else str(exc)


def find_logs(root: Path, agent: str | None = None) -> tuple[list[LogFile], list[LogProblem]]:
    """The agent logs in ``root`` (a file, or a folder read for ``*.jsonl``), each file's agent
    told by its first lines (``agent`` for those that do not say), and one problem per file that
    is neither agent's log."""
    files: list[LogFile] = []
    problems: list[LogProblem] = []
    is_dir = root.is_dir()
    paths = jsonl_files(root) if is_dir else iter([root])
    for path in paths:
        if is_dir and not path.is_file():  # a FIFO would wait for a writer, a device never end
            problems.append(LogProblem(str(path), 0, "not a regular file; skipped"))
            continue
        try:
            found = detect(path) or agent
        except (OSError, LogUnreadable) as exc:
            problems.append(LogProblem(str(path), 0, f"cannot be read: {_why(exc)}; skipped"))
            continue
        if found is None:
            problems.append(LogProblem(str(path), 0, "neither a Claude Code nor a Codex log; skipped"))
            continue
        files.append(LogFile(path, found, root if is_dir else None))
    return files, problems


def ordered(files: Sequence[LogFile]) -> list[LogFile]:
    """Codex files in name order (each is its own session), then Claude Code files by their
    earliest timestamp, files without one last, ties in name order."""
    codex = [f for f in files if f.agent == CODEX]
    claude = [f for f in files if f.agent == CLAUDE_CODE]
    if len(claude) > 1:
        stamps: dict[Path, str | None] = {}
        for f in claude:
            try:
                stamps[f.path] = earliest_stamp(f.path)
            except (OSError, LogUnreadable):
                stamps[f.path] = None
        claude.sort(key=lambda f: (stamps[f.path] is None, stamps[f.path] or "", str(f.path)))
    return codex + claude


def read_logs(
    files: Sequence[LogFile], *, skipped: Skipped | None = None, cap: int = MAX_RECORD_BYTES
) -> Iterator[LogItem]:
    """Every item of every file, file after file (:func:`ordered`)."""
    seen: set[int] = set()
    skipped = skipped if skipped is not None else Skipped()
    for f in ordered(files):
        try:
            if f.agent == CODEX:
                yield from read_codex(f.path, root=f.root, skipped=skipped, cap=cap)
            else:
                yield from read_claude_code(f.path, root=f.root, seen=seen, skipped=skipped, cap=cap)
        except (OSError, LogUnreadable) as exc:
            yield LogProblem(str(f.path), 0, f"reading stopped: {_why(exc)}")
