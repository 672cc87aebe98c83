"""Which files are agent logs, which agent wrote each, and in what order they are read.

* ``ctxwright audit --claude`` reads ``<config>/projects/**/*.jsonl`` for each Claude Code
  config folder: those named in ``CLAUDE_CONFIG_DIR`` (comma-separated, as Claude Code and
  ccusage read it), else ``~/.config/claude`` and ``~/.claude`` (ccusage's defaults).
* ``ctxwright audit --codex`` reads ``$CODEX_HOME/sessions/**/*.jsonl`` (``~/.codex`` by default).
* ``ctxwright audit PATH`` reads a file or every ``*.jsonl`` under a folder; each file's first
  lines say which agent wrote it (:func:`detect`).

Order: Claude Code files are read oldest first, by the earliest ``timestamp`` in each (ccusage's
order). It decides which copy of a repeated answer is counted -- a resumed session copies
earlier lines into its new file -- and so which session the tokens land in.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

from ctxwright.agent_logs import claude_code, codex
from ctxwright.agent_logs.lines import numbered_lines
from ctxwright.agent_logs.records import CLAUDE_CODE, CODEX
from ctxwright.audit.logs import open_log
from ctxwright.errors import CtxwrightError

#: the lines of a file looked at to tell which agent wrote it, and the bytes of each
DETECT_LINES = 50
DETECT_LINE_BYTES = 1 << 20
_STAMP = b'"timestamp":"'
_SCAN_CHUNK = 4 << 20


def detect(path: Path) -> str | None:
    """``claude-code``, ``codex`` or ``None`` (neither), from the file's first lines: a Codex
    rollout line is ``{timestamp, type, payload}`` with a rollout type; a Claude Code line has
    a Claude Code type and a ``sessionId`` (or is a ``summary`` title)."""
    seen = 0
    with open_log(path) as f:
        for _, raw in numbered_lines(f, cap=DETECT_LINE_BYTES):
            if seen >= DETECT_LINES:
                break
            seen += 1
            if isinstance(raw, int) or not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except (ValueError, RecursionError):
                continue
            if not isinstance(obj, dict):
                continue
            kind = obj.get("type")
            if kind in codex.TYPES and "payload" in obj:
                return CODEX
            if kind in claude_code.TYPES and ("sessionId" in obj or kind == "summary"):
                return CLAUDE_CODE
            message = obj.get("message")
            if isinstance(message, dict) and "usage" in message:
                return CLAUDE_CODE
    return None


def claude_roots(env: Mapping[str, str] | None = None) -> list[Path]:
    """The ``projects`` folders of Claude Code's config folders (see the module's docstring)."""
    env = os.environ if env is None else env
    given = [p.strip() for p in env.get("CLAUDE_CONFIG_DIR", "").split(",") if p.strip()]
    home = Path(env.get("HOME") or Path.home())
    bases = [Path(p).expanduser() for p in given] or [home / ".config" / "claude", home / ".claude"]
    roots = [b / "projects" for b in bases if (b / "projects").is_dir()]
    if not roots:
        where = " or ".join(str(b / "projects") for b in bases)
        hint = "CLAUDE_CONFIG_DIR names" if given else "Claude Code keeps its logs in"
        raise CtxwrightError(f"no Claude Code logs found: {hint} {where}, which does not exist")
    return roots


def codex_root(env: Mapping[str, str] | None = None) -> Path:
    """``$CODEX_HOME/sessions`` (``~/.codex/sessions``)."""
    env = os.environ if env is None else env
    home = Path(env.get("HOME") or Path.home())
    base = Path(env["CODEX_HOME"]).expanduser() if env.get("CODEX_HOME", "").strip() else home / ".codex"
    root = base / "sessions"
    if not root.is_dir():
        hint = "CODEX_HOME names" if env.get("CODEX_HOME", "").strip() else "Codex keeps its logs in"
        raise CtxwrightError(f"no Codex logs found: {hint} {base}, and {root} does not exist")
    return root


def jsonl_files(root: Path) -> Iterator[Path]:
    """Every ``*.jsonl`` file under ``root``, in name order (folders are not followed through
    symbolic links: a link to a parent would never end)."""
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".jsonl"):
                yield Path(folder) / name


def earliest_stamp(path: Path) -> str | None:
    """The earliest ``"timestamp":"..."`` written in the file, read as bytes without parsing
    (the order files are read in; a file without one sorts last)."""
    best: bytes | None = None
    tail = b""
    with open_log(path) as f:
        while True:
            chunk = f.read(_SCAN_CHUNK)
            if not chunk:
                break
            data = tail + chunk
            at = data.find(_STAMP)
            while at >= 0:
                start = at + len(_STAMP)
                end = data.find(b'"', start, start + 40)
                if end < 0:
                    break
                value = data[start:end]
                if best is None or value < best:
                    best = value
                at = data.find(_STAMP, end)
            tail = data[-64:]
    return best.decode("ascii", "replace") if best is not None else None
