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
        size = path.stat().st_size
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise AblationInputError(f"--json {path}: cannot read it ({exc.strerror or exc})") from None
    if size > MAX_FILE_BYTES:
        raise AblationInputError(f"--json {path}: {size:,} bytes, more than an ablation writes; give another file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
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
    return int(data.get("runs_done") or 0), int(data.get("runs_total") or 0)


_RUN_FIELDS = {f.name for f in fields(RunRecord)}
_ARM_FIELDS = {f.name for f in fields(ArmSummary)}


def _run(obj: Any, where: str) -> RunRecord:
    if not isinstance(obj, dict) or not {"arm", "task", "trial", "success"} <= obj.keys():
        raise AblationInputError(f"{where}: a run without arm, task, trial and success; give another file")
    try:
        kwargs = {k: v for k, v in obj.items() if k in _RUN_FIELDS}
        kwargs["calls"] = tuple(kwargs.get("calls") or ())
        kwargs["problems"] = tuple(kwargs.get("problems") or ())
        return RunRecord(**kwargs)
    except TypeError as exc:
        raise AblationInputError(f"{where}: a run that is not an ablation's ({exc}); give another file") from None


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
    arms = [a for a in data.get("arms") or () if isinstance(a, dict)]
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
        runs_total=int(data.get("runs_total") or len(records)),
        plan=plan,
    )
