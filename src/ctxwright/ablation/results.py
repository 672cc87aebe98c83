"""An ablation's JSON file: written as the runs go, read back to resume a stopped ablation.

Why as the runs go: an ablation on a served model takes hours (arms x tasks x trials runs of a
whole agent), and one stopped half way -- Ctrl-C, a closed SSH session, a kill, a reboot --
must leave what it measured, readable, rather than nothing. The file holds every run so far
and the summary of every finished arm, with ``"complete": false`` and ``runs_done`` of
``runs_total`` until the last run; the same command with ``--resume`` reads it back and runs
only what is missing.

Why replaced whole: each write goes to a temporary file beside the target, is flushed to disk,
then renamed over it (``os.replace`` is atomic on POSIX), so a kill in the middle of a write
leaves the previous version, never half a JSON document.

Why at most every few seconds: the file grows with the runs (a few hundred bytes each, at most
:data:`~ctxwright.ablation.run.MAX_RUNS` of them), so writing it after every run of a fast model
would cost more than the runs. :class:`Checkpoint` writes when an arm ends and otherwise when
:data:`MIN_INTERVAL_S` -- or ten times the last write's own duration, whichever is longer -- has
passed since the last write: the writes stay under a tenth of the time, and a stop loses at most
the runs of those last seconds.

Why a plan in the file: a resumed ablation must measure the same thing. The plan names every
arm with a hash of its system prompt, every task with a hash of what is scored, the trials, the
backend and the model; a file whose plan differs is refused rather than mixed with new runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
import time
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

from ctxwright.ablation.run import AblationResult, ArmSummary, RunRecord
from ctxwright.errors import AblationInputError

__all__ = ["MIN_INTERVAL_S", "Checkpoint", "read_results", "stopped_runs", "write_results"]

#: the shortest time between two writes of the file while an arm runs
MIN_INTERVAL_S = 2.0
#: a results file larger than this is not read back (MAX_RUNS runs are far less)
MAX_FILE_BYTES = 256 * 1024 * 1024


def write_results(path: str | Path, result: AblationResult) -> None:
    """Replace ``path`` with ``result`` as JSON, whole (a temporary file beside it, renamed over it)."""
    p = Path(path).expanduser()
    data = (json.dumps(result.to_dict(), indent=1, ensure_ascii=False) + "\n").encode("utf-8", "surrogatepass")
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except OSError as exc:
        raise AblationInputError(f"--json {path}: cannot write it ({exc.strerror or exc})") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


class Checkpoint:
    """Writes the ablation so far to ``path`` (``run_ablation``'s ``on_progress``): when an arm
    ends, and otherwise at most every :data:`MIN_INTERVAL_S` (or ten times the last write's
    duration). :meth:`flush` writes the latest state whatever the time (a stop)."""

    def __init__(self, path: str | Path, min_interval_s: float = MIN_INTERVAL_S) -> None:
        self.path = path
        self.min_interval_s = min_interval_s
        self.writes = 0
        self._so_far: Callable[[], AblationResult] | None = None
        self._dirty = False
        self._last = time.monotonic()
        self._cost = 0.0

    def __call__(self, so_far: Callable[[], AblationResult], arm_ended: bool) -> None:
        self._so_far, self._dirty = so_far, True
        if arm_ended or time.monotonic() - self._last >= max(self.min_interval_s, 10 * self._cost):
            self.flush()

    def flush(self) -> None:
        """Write the ablation as it is now, unless nothing changed since the last write."""
        if self._so_far is None or not self._dirty:
            return
        start = time.monotonic()
        write_results(self.path, self._so_far())
        self._last = time.monotonic()
        self._cost = self._last - start
        self._dirty = False
        self.writes += 1


def _load(path: Path) -> dict[str, Any] | None:
    """The file's JSON object, ``None`` when there is no file; anything unreadable is an
    :class:`AblationInputError` naming it."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise AblationInputError(f"--json {path}: cannot read it ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):  # a FIFO would block the read forever; a folder, a device...
        raise AblationInputError(f"--json {path}: not a regular file; give a file such as ablation.json")
    if st.st_size > MAX_FILE_BYTES:
        raise AblationInputError(
            f"--json {path}: {st.st_size:,} bytes, more than an ablation writes; give another file"
        )
    try:
        # O_NONBLOCK: should it be swapped for a FIFO since the stat, opening does not wait for a writer
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise AblationInputError(f"--json {path}: not a regular file; give a file such as ablation.json")
            raw = f.read(MAX_FILE_BYTES + 1)
        if len(raw) > MAX_FILE_BYTES:
            raise AblationInputError(f"--json {path}: more than {MAX_FILE_BYTES:,} bytes; give another file")
        data = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError) as exc:
        raise AblationInputError(
            f"--json {path}: not an ablation's results file ({exc}); give another file, or remove it"
        ) from None
    if not isinstance(data, dict):
        raise AblationInputError(f"--json {path}: not an ablation's results file; give another file, or remove it")
    return data


def stopped_runs(path: str | Path) -> tuple[int, int] | None:
    """``(runs_done, runs_total)`` when ``path`` holds an ablation that was stopped before its
    end; ``None`` when there is no such file, or it holds a complete one."""
    data = _load(Path(path).expanduser())
    if data is None or data.get("complete", True) is not False:
        return None
    return _whole(data, "runs_done", path), _whole(data, "runs_total", path)


def _whole(data: dict[str, Any], key: str, path: str | Path) -> int:
    """``data[key]``, a count of 0 or more (absent: 0); another type names the file."""
    value = data.get(key) or 0
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise AblationInputError(f"--json {path}: {key} is {str(value)[:40]!r}, not a count; give another file")
    return value


_RUN_FIELDS = {f.name for f in fields(RunRecord)}
_ARM_FIELDS = {f.name for f in fields(ArmSummary)}


#: the JSON types of a run's fields as ``RunRecord.to_dict`` writes them: a kept run is summed
#: and averaged with the new ones, so a string where a bool or a number belongs would fail (or
#: count wrong) only at the end of hours of runs
_INT, _NUM, _STR, _NONE, _BOOL = (int,), (int, float), (str,), (type(None),), (bool,)
_RUN_TYPES: dict[str, tuple[type, ...]] = {
    "arm": _STR,
    "task": _STR,
    "trial": _INT,
    "success": _BOOL,
    "calls_ok": _BOOL + _NONE,
    "state_ok": _BOOL + _NONE,
    "answer_ok": _BOOL + _NONE,
    "expected_calls": _INT,
    "matched_calls": _INT,
    "prompt_tokens": _INT + _NONE,
    "answer": _STR + _NONE,
    "stop_reason": _STR,
    "seconds": _NUM,
    "error": _STR + _NONE,
}


def _run(obj: Any, where: str) -> RunRecord:
    if not isinstance(obj, dict) or not {"arm", "task", "trial", "success"} <= obj.keys():
        raise AblationInputError(f"{where}: a run without arm, task, trial and success; give another file")
    for key, types in _RUN_TYPES.items():
        value = obj.get(key)
        if key in obj and (not isinstance(value, types) or (isinstance(value, bool) and bool not in types)):
            raise AblationInputError(f"{where}: its {key} is {str(value)[:40]!r}, of the wrong type; give another file")
    for key in ("calls", "problems"):
        value = obj.get(key) or []
        if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise AblationInputError(f"{where}: its {key} is not a list of text; give another file")
    try:
        kwargs = {k: v for k, v in obj.items() if k in _RUN_FIELDS}
        kwargs["calls"] = tuple(kwargs.get("calls") or ())
        kwargs["problems"] = tuple(kwargs.get("problems") or ())
        return RunRecord(**kwargs)
    except TypeError as exc:
        raise AblationInputError(f"{where}: a run that is not an ablation's ({exc}); give another file") from None


def _in_plan(records: list[RunRecord], plan: dict[str, Any], path: str | Path) -> None:
    """Every kept run is one the plan makes, once: a run of another arm, task or trial would be
    dropped when the file is next written, and a second copy of one would be silently lost."""
    arms = {a.get("name") for a in plan.get("arms") or () if isinstance(a, dict)}
    tasks = {t.get("id") for t in plan.get("tasks") or () if isinstance(t, dict)}
    trials = int(plan.get("trials") or 0)
    seen: dict[tuple[str, str, int], int] = {}
    for i, r in enumerate(records, 1):
        if r.arm not in arms or r.task not in tasks or not 1 <= r.trial <= trials:
            raise AblationInputError(
                f"--json {path}: run {i} (arm {r.arm[:40]!r}, task {r.task[:40]!r}, trial {r.trial}) is not one "
                "of this ablation's; give another file"
            )
        first = seen.setdefault((r.arm, r.task, r.trial), i)
        if first != i:
            raise AblationInputError(
                f"--json {path}: run {i} repeats run {first} (same arm, task and trial); give another file"
            )


def read_results(path: str | Path, plan: dict[str, Any]) -> AblationResult | None:
    """The ablation ``path`` holds, to resume (``None``: no file). Refused with one line when
    it is not an ablation's file or its plan differs from ``plan`` (another prompt, tasks,
    trials, backend or model): its runs would measure something else."""
    p = Path(path).expanduser()
    data = _load(p)
    if data is None:
        return None
    old = data.get("plan")
    if not isinstance(old, dict):
        raise AblationInputError(
            f"--json {path}: written without a plan (an older ctxwright), so it cannot be resumed; give another file"
        )
    for key, what in (
        ("backend", "backend"),
        ("model", "model"),
        ("trials", "--trials"),
        ("arms", "arms (the prompt, --only, --empty)"),
        ("tasks", "tasks (--tasks, --limit)"),
    ):
        if old.get(key) != plan.get(key):
            raise AblationInputError(
                f"--json {path}: its {what} differ from this command's, so its runs measure something else; "
                "give the same options to resume it, or another --json file"
            )
    runs = data.get("runs")
    if not isinstance(runs, list):
        raise AblationInputError(f"--json {path}: no list of runs; give another file")
    records = [_run(r, f"--json {path}: run {i + 1}") for i, r in enumerate(runs)]
    _in_plan(records, plan, path)
    listed = data.get("arms")
    arms = [a for a in listed if isinstance(a, dict)] if isinstance(listed, list) else []
    try:
        summaries = [ArmSummary(**{k: v for k, v in a.items() if k in _ARM_FIELDS}) for a in arms]
    except TypeError as exc:
        raise AblationInputError(f"--json {path}: an arm summary that is not an ablation's ({exc})") from None
    seconds = data.get("seconds")
    return AblationResult(
        arms=summaries,
        runs=records,
        tasks=len(plan["tasks"]),
        trials=int(plan["trials"]),
        backend=str(plan["backend"]),
        model=str(plan["model"]),
        seconds=float(seconds) if isinstance(seconds, int | float) else 0.0,
        complete=data.get("complete", True) is not False,
        runs_total=_whole(data, "runs_total", path) or len(records),
        plan=plan,
    )
