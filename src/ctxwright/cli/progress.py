"""What ``ctxwright run`` prints while it works: every event of the run, literally, with a
live line during each model call and each tool batch, streamed answer tokens, and an echo
cap; and the per-call table, sized for an 80-column terminal.

Why each rule:

* **Literal text.** User, model and tool text is arbitrary: a prompt quoting ``[/INST]``, a
  path such as ``[/etc/hosts]``, a model that answers ``[red]x[/red]``. Rich parses any
  string it prints as console markup, and an unmatched closing tag raises ``MarkupError``
  -- which used to end ``run`` mid-session (and then ``show`` and ``sessions``, which print
  the same text back). ``rich.markup.escape`` is not enough either: it doubles a trailing
  backslash. So such text is only ever put into a :class:`~rich.text.Text` (never parsed);
  only our own fixed labels carry styles.
* **Feedback during long work.** A model call on a CPU can take minutes, a tool as long as
  its timeout. When stderr is a terminal, a transient spinner there shows what is running
  and for how long (rich ``Live``, redrawn in place, erased when the step ends). When it is
  not (CI logs, ``| tee``), one plain line per step and no animation, so the log stays
  readable: a spinner's redraws would fill it with carriage returns and escape codes.
* **Streamed tokens.** A backend that streams delivers ``Token`` events
  during its call; they are printed as they come, and the finished answer is then not
  printed again. A backend that does not stream sends none, and the answer is printed
  when it is complete: the printer works either way.
* **Echo cap.** Rich lays out every character it prints; a 30 MB answer took six minutes.
  The terminal gets the first and last part of a long text and one line saying how many
  bytes are not shown and that ``ctxwright show ID`` has them: the store keeps everything,
  the echo is only a view.
* **80 columns.** The per-call table's default columns fit an 80-column terminal without
  folding a number over two lines; ``--wide`` shows all of them, with the compaction tiers and the planner's decision before each call.
* **Each thing said once.** The status bar the model gets before every call holds the
  environment (cwd, OS, shell, Python: over 300 characters, the same on every call), the clock
  and the last tools' timings; echoed whole, it buried the run. The echo shows the environment
  once, then per call only what is not on a line of its own already (a result line has its
  milliseconds, the repeated-call warning its own line, which the result's echo then leaves
  out). What the model is sent is not changed: the store has every status as sent.
"""

from __future__ import annotations

import functools
import time
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from ctxwright.agent.progress import AssistantReply, Compacted, GateDecided
from ctxwright.compaction.hooks import CompactionHookWarning
from ctxwright.core.progress import (
    BackendFailed,
    CompactionAhead,
    LedgerWarning,
    McpToolsChanged,
    McpWarning,
    ProgressEvent,
    RepeatedCall,
    RequestSent,
    Retry,
    SkillsCatalog,
    SkillsWarning,
    StatusShown,
    Stopped,
    StreamFallback,
    Token,
    ToolDone,
    ToolStart,
    UserInput,
)
from ctxwright.core.tokens import Ledger
from ctxwright.status.bar import ENV_KEYS, STATUS_CLOSE, STATUS_OPEN

if TYPE_CHECKING:
    from ctxwright.agent.loop import CallReport

__all__ = ["ECHO_HEAD_CHARS", "ECHO_TAIL_CHARS", "RunPrinter", "calls_table", "clip", "status_echo", "utf8_len"]

#: The echo of one answer, prompt or argument list: its first and last characters.
ECHO_HEAD_CHARS = 48 * 1024
ECHO_TAIL_CHARS = 16 * 1024
#: A tool result is echoed as a one-line preview (the model sees what was recorded).
RESULT_PREVIEW_CHARS = 300
_SLICE = 1 << 20


def ahead_line(event: CompactionAhead) -> str:
    """The one line printed before a deep compaction: what it hides and what the cache pays."""
    stage = f" stage {event.stage}" if event.stage else ""
    return (
        f"ahead: {event.layer}{stage} will hide {event.events} event(s) ({event.hidden_tokens:,} tokens) of a "
        f"{event.tokens_before:,}-token request; cache cost ~{event.reprefill_tokens:,} tokens after the cut "
        "prefilled again"
    )


def utf8_len(text: str) -> int:
    """Bytes of ``text`` in UTF-8, counted in 1 MB slices (no second copy of a huge text)."""
    return sum(len(text[i : i + _SLICE].encode("utf-8", "surrogatepass")) for i in range(0, len(text), _SLICE))


def clip(
    text: str, session_id: str | None, head: int = ECHO_HEAD_CHARS, tail: int = ECHO_TAIL_CHARS
) -> tuple[str, str, str]:
    """``(head, note, tail)`` of ``text`` for the terminal; ``note`` is empty when the text
    is shown whole, else one line saying how many bytes are left out and where they are."""
    if len(text) <= head + tail:
        return text, "", ""
    hidden = utf8_len(text[head : len(text) - tail])
    where = f"`ctxwright show {session_id}` has it all" if session_id else "the session's store has it all"
    return text[:head], f"\n… {hidden:,} bytes not shown; {where}\n", text[len(text) - tail :]


#: Status keys the echo leaves out: on a line of their own already (a result's milliseconds,
#: the repeated-call warning) or the terminal's own business (the clock).
_NOT_ECHOED = ("time_now", "last_calls", "repeated_call")


def status_echo(content: str) -> tuple[str, str]:
    """``(environment, readings)`` of an ``<agent_status>`` message for the terminal, each as
    one ``key: value · key: value`` line: the environment lines (:data:`ENV_KEYS`), and the
    others without those in :data:`_NOT_ECHOED` and a ``last_error`` of ``none``."""
    body = content.removeprefix(STATUS_OPEN + "\n").removesuffix("\n" + STATUS_CLOSE)
    env: list[str] = []
    readings: list[str] = []
    for line in body.split("\n"):
        key, sep, value = line.partition(": ")
        if sep and key in ENV_KEYS:
            env.append(line)
        elif not (sep and (key in _NOT_ECHOED or (key == "last_error" and value == "none"))):
            readings.append(line)
    return " · ".join(env), " · ".join(readings)


def _literal(label: str, style: str, *parts: str | tuple[str, str]) -> Text:
    """A styled label, then text that is printed exactly as given (never parsed as markup)."""
    out = Text(label, style=style)
    for p in parts:
        if isinstance(p, tuple):
            out.append(p[0], style=p[1])
        else:
            out.append(p)
    return out


class _Activity:
    """The live line: a spinner, what is running, and its elapsed time (computed at each
    redraw, so the clock moves while the call blocks)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.started = time.monotonic()
        self.spinner = Spinner("dots", style="cyan")

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        frame = self.spinner.render(time.monotonic())
        line = frame.copy() if isinstance(frame, Text) else Text()
        line.append(" ")
        line.append(self.label)
        line.append(f" · {self.elapsed():.1f} s", style="dim")
        line.truncate(max(10, options.max_width), overflow="ellipsis")
        yield line


class _Tail:
    """The last ``limit`` characters (at least) of a stream of pieces, kept in a deque so
    that a 30 MB stream of small tokens is not copied on every token; counts the UTF-8
    bytes of what it dropped."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.pieces: deque[str] = deque()
        self.chars = 0
        self.dropped_bytes = 0

    def add(self, text: str) -> None:
        self.pieces.append(text)
        self.chars += len(text)
        while self.pieces and self.chars - len(self.pieces[0]) >= self.limit:
            gone = self.pieces.popleft()
            self.chars -= len(gone)
            self.dropped_bytes += utf8_len(gone)

    def text(self) -> str:
        return "".join(self.pieces)


class RunPrinter:
    """The ``on_event`` of ``ctxwright run``: prints each event of the run as it happens.

    ``out`` gets the run's record (prompts, calls, results, answers); ``err`` the live line.
    ``live`` forces the animated line on or off (default: whether ``err`` is a terminal).
    Set :attr:`session_id` once the session exists, for the echo cap's pointer to ``show``.
    """

    def __init__(self, out: Console, err: Console, *, live: bool | None = None) -> None:
        self.out = out
        self.err = err
        self.live = err.is_terminal if live is None else live
        self.session_id: str | None = None
        self._activity: _Activity | None = None
        self._display: Live | None = None
        self._streamed = 0  # characters of the current call's streamed text
        self._tail: _Tail | None = None  # its end, once more than the head came
        self._env_echoed = ""  # the environment lines of the status, once printed
        self._notes: dict[str, str] = {}  # call id -> the repeated-call note printed on its own line

    # -- the live line ---------------------------------------------------------------------
    def _start(self, label: str) -> None:
        self._stop()
        self._activity = _Activity(label)
        if self.live:
            # not redirecting stdout: the record goes to stdout, never into the live line's stream
            self._display = Live(
                self._activity,
                console=self.err,
                transient=True,
                refresh_per_second=8,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._display.start()
        else:
            self.err.print(Text(f"… {label}", style="dim"), soft_wrap=True)

    def _stop(self) -> None:
        if self._display is not None:
            self._display.stop()
            self._display = None
        self._activity = None

    def close(self) -> None:
        """Erase the live line and end a streamed answer (call when the run ends, however)."""
        self._stop()
        self._end_stream()

    # -- streamed tokens -------------------------------------------------------------------
    def _token(self, text: str) -> None:
        if not text:
            return
        if self._streamed == 0:
            self._stop()  # the tokens are the feedback now
            self.out.print(Text("answer ", style="bold green"), end="")
        room = max(0, ECHO_HEAD_CHARS - self._streamed)
        if room:
            self.out.print(Text(text[:room]), end="", soft_wrap=True)
        if len(text) > room:
            if self._tail is None:
                self._tail = _Tail(ECHO_TAIL_CHARS)
            self._tail.add(text[room:])
        self._streamed += len(text)

    def _end_stream(self) -> bool:
        """Finish a streamed answer's echo; whether anything was streamed."""
        if not self._streamed:
            return False
        if self._tail is not None:
            if self._tail.dropped_bytes:
                self.out.print(Text(self._not_shown(self._tail.dropped_bytes), style="dim"), end="")
            self.out.print(Text(self._tail.text()), end="", soft_wrap=True)
        self.out.print()
        self._streamed, self._tail = 0, None
        return True

    def _not_shown(self, n_bytes: int) -> str:
        where = f"`ctxwright show {self.session_id}` has it all" if self.session_id else "the store has it all"
        return f"\n… {n_bytes:,} bytes not shown; {where}\n"

    # -- the events --------------------------------------------------------------------------
    def _clipped(self, label: str, style: str, text: str, *after: tuple[str, str]) -> None:
        head, note, tail = clip(text, self.session_id)
        line = _literal(label, style, head)
        if note:
            line.append(note, style="dim")
            line.append(tail)
        for part, part_style in after:
            line.append(part, style=part_style)
        # soft_wrap: the terminal wraps long lines itself; rich need not lay out every word
        self.out.print(line, soft_wrap=True)

    def __call__(self, event: ProgressEvent) -> None:
        """Progress of a run (the Harness's ``on_event``); of a sub-agent, only its calls and results."""
        if event.child is not None and not isinstance(event, _CHILD_SHOWN):
            return
        if event.child is None and not isinstance(event, _NOT_RECORDED):
            self._stop()  # a line of the record: the live line goes first
        self._on(event)

    # one handler per event type (core/progress.py, agent/progress.py); other types print nothing
    @functools.singledispatchmethod
    def _on(self, event: ProgressEvent) -> None:
        pass

    @_on.register
    def _(self, event: Token) -> None:
        self._token(event.text)

    @_on.register
    def _(self, event: UserInput) -> None:
        self._clipped("user  ", "bold cyan", event.content)

    @_on.register
    def _(self, event: RequestSent) -> None:
        self._start(f"model call {event.index}")  # numbered as in the per-call table

    @_on.register
    def _(self, event: AssistantReply) -> None:
        streamed = False if event.child is not None else self._end_stream()
        msg = event.message
        for tc in msg.tool_calls:
            self._clipped("call  ", "bold yellow", f"{tc.name}({tc.arguments})", ("  " + tc.id, "dim"))
        if not msg.tool_calls and not streamed:
            self._clipped("answer ", "bold green", str(msg.content or ""))

    @_on.register
    def _(self, event: ToolStart) -> None:
        name = event.call.name
        if self._activity is not None and self._activity.label.startswith("tool"):
            self._activity.label = "tools " + self._activity.label.split(" ", 1)[1] + ", " + name
            if not self.live:
                self.err.print(Text(f"… tool {name}", style="dim"), soft_wrap=True)
        else:
            self._start(f"tool {name}")

    @_on.register
    def _(self, event: ToolDone) -> None:
        content = event.content
        note = self._notes.pop(event.call.id, None) if event.child is None else None
        if note is not None:  # said on its own line already
            content = content.removesuffix("\n" + note)
        tag, tag_style = ("result", "bold") if event.ok else ("error", "bold red")
        line = _literal(tag, tag_style, " ", event.call.name, (f" {event.elapsed_ms:.0f} ms", "dim"), "  ")
        line.append(content[:RESULT_PREVIEW_CHARS])
        if len(content) > RESULT_PREVIEW_CHARS:
            line.append(f"… ({len(content):,} chars)", style="dim")
        self.out.print(line, soft_wrap=True)

    @_on.register
    def _(self, event: GateDecided) -> None:
        decision = event.decision
        style = "bold green" if decision.approved else "bold red"
        self.out.print(
            _literal(
                "gate",
                style,
                f" {decision.decision} {event.request.tool}",
                (f" ({decision.by})", "dim"),
                "  ",
                decision.reason,
            ),
            soft_wrap=True,
        )

    @_on.register
    def _(self, event: RepeatedCall) -> None:
        self._notes[event.call.id] = event.note
        self.out.print(_literal("repeated", "bold magenta", " ", event.note), soft_wrap=True)

    @_on.register
    def _(self, event: CompactionAhead) -> None:
        self.out.print(_literal("compaction", "bold yellow", " ", ahead_line(event)), soft_wrap=True)

    @_on.register
    def _(self, event: Compacted) -> None:
        c = event.report
        self.out.print(
            _literal(
                "compaction",
                "bold blue",
                f" {c.layer}: {c.messages_changed} message(s) · request {c.tokens_before:,} → "
                f"{c.tokens_after:,} tokens",
                (f" (event #{c.event_seq})", "dim"),
            ),
            soft_wrap=True,
        )

    @_on.register
    def _(self, event: StatusShown) -> None:
        env, readings = status_echo(event.content)
        if env and env != self._env_echoed:  # fixed for the session: once (again if it changed)
            self._env_echoed = env
            self.out.print(Text("environment  " + env, style="dim"), soft_wrap=True)
        if readings:
            self.out.print(Text("status  " + readings, style="dim"), soft_wrap=True)

    @_on.register
    def _(self, event: Retry) -> None:  # on stderr, as it happens: a server that does not answer is not silent
        self.err.print(
            _literal(
                "retry",
                "yellow",
                f" {event.attempt}/{event.max_retries} in {float(event.wait_s):.1f} s: ",
                event.reason,
                (f" ({event.url})", "dim"),
            ),
            soft_wrap=True,
        )

    @_on.register
    def _(self, event: SkillsWarning) -> None:
        self.err.print(_literal("skills", "yellow", " ", event.message), soft_wrap=True)

    @_on.register
    def _(self, event: SkillsCatalog) -> None:
        self.out.print(Text("skills  " + ", ".join(event.names), style="dim"), soft_wrap=True)

    @_on.register
    def _(self, event: CompactionHookWarning) -> None:
        self.err.print(_literal("compaction hook", "yellow", " ", event.message), soft_wrap=True)

    @_on.register
    def _(self, event: McpWarning) -> None:
        self.err.print(_literal("mcp", "yellow", " ", event.message), soft_wrap=True)

    @_on.register
    def _(self, event: McpToolsChanged) -> None:
        added = ", ".join(event.added) or "none"
        removed = ", ".join(event.removed) or "none"
        self.out.print(_literal("mcp", "dim", " ", f"tools changed: added {added}; removed {removed}"), soft_wrap=True)

    @_on.register
    def _(self, event: StreamFallback) -> None:
        self.err.print(Text(f"streaming off: {event.reason}", style="dim"), soft_wrap=True)

    @_on.register
    def _(self, event: LedgerWarning) -> None:
        self.err.print(_literal("warning", "yellow", f" call {event.index}: ", event.mismatch.message), soft_wrap=True)

    @_on.register
    def _(self, event: BackendFailed) -> None:
        self.close()
        self.err.print(_literal("error", "red", " ", event.error), soft_wrap=True)

    @_on.register
    def _(self, event: Stopped) -> None:
        self.close()
        self.out.print(_literal("stopped", "red", " ", event.reason), soft_wrap=True)


#: A sub-agent's events that are printed (its calls, results and retries); the rest are its own business.
_CHILD_SHOWN = (ToolDone, AssistantReply, Retry)
#: Events that are not a line of the record: the live line stays up through them.
_NOT_RECORDED = (Token, RequestSent, ToolStart, Retry)


# -- the per-call table ------------------------------------------------------------------------


def _fmt(v: Any, digits: int = 0) -> str:
    if v is None:
        return "?"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return f"{v:,}"


def _ms(report: CallReport) -> str:
    """The call's wall time (around the backend call); prefill + decode for a report that
    has none."""
    if report.wall_ms is not None:
        return _fmt(report.wall_ms)
    if report.prefill_ms is None and report.decode_ms is None:
        return "?"
    return _fmt((report.prefill_ms or 0.0) + (report.decode_ms or 0.0))


def calls_table(reports: Sequence[CallReport], *, wide: bool = False) -> Table:
    """One row per model call: what it cost, what it reused, and why.

    Compact (default, fits 80 columns): call, prompt tokens, cached/reusable tokens, the
    call's wall time beside them, the audit's cause, output tokens. ``wide``: every column,
    the prompt's ledger too.

    Why the wall time sits by the reusable tokens: servers that report no cached tokens
    (llama-cpp-python's) leave ``cached`` at ``?``; a call that reused most of its prompt is
    still visibly faster. The ledger's parts and framing add up to ``counted``, ctxwright's
    count of the prompt (``core/tokens.py``); with the template/tokenizer difference, to the
    prompt the server counted.
    """
    if not wide:
        t = Table(title="model calls")
        for col in ("call", "prompt", "cached/reusable", "wall ms", "cause", "out"):
            t.add_column(col, justify="left" if col == "cause" else "right", no_wrap=True)
        for r in reports:
            t.add_row(
                str(r.index),
                _fmt(r.prompt_tokens),
                f"{_fmt(r.cached_tokens)}/{_fmt(r.reusable_tokens)}",
                _ms(r),
                Text(r.cause or ""),
                _fmt(r.completion_tokens),
            )
        return t
    t = Table(title="model calls")
    for col in (
        "call",
        "prompt tok",
        "reused tok",
        "reusable tok",
        "wall ms",
        "cause",
        "prefill ms",
        "decode ms",
        "out tok",
        "compaction",
        *(Ledger.LABELS[k] for k in Ledger.SHOWN),
        "counted",
    ):
        # numbers stay on one line; the planner's decision is the cell that wraps
        if col == "compaction":
            t.add_column(col, justify="left", overflow="fold", min_width=10)
        else:
            t.add_column(col, justify="right", no_wrap=True)
    for r in reports:
        sh = r.ledger.shares()
        t.add_row(
            str(r.index),
            _fmt(r.prompt_tokens),
            _fmt(r.cached_tokens),
            _fmt(r.reusable_tokens),
            _fmt(r.wall_ms),
            Text(r.cause or ""),
            _fmt(r.prefill_ms),
            _fmt(r.decode_ms),
            _fmt(r.completion_tokens),
            Text(compaction_cell(r)),
            *[f"{r.ledger.to_dict()[k]:,} ({sh[k]:.0%})" for k in r.ledger.PARTS],
            _fmt(r.ledger.template_difference),  # the backend's count less ctxwright's (core/tokens.py)
            f"{r.ledger.total:,}",
        )
    return t


def compaction_cell(report: CallReport) -> str:
    """The tiers that ran before this call and the planner's decision that ran them
    (``compaction/planner.py``: why, at which trigger point, how deep), for ``--wide``."""
    if not report.compactions:
        return ""
    tiers = "+".join(c.layer for c in report.compactions)
    decision = next((c.decision for c in report.compactions if c.decision is not None), None)
    before, after = report.compactions[0].tokens_before, report.compactions[-1].tokens_after
    return f"{tiers} {before:,}→{after:,}" + (f"; {decision.describe()}" if decision is not None else "")
