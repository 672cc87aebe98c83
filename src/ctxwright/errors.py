"""Every exception ctxwright raises on purpose, under one base class, :class:`CtxwrightError`.

Callers catch *our* types, never a provider's string: a context-window overflow is
:class:`ContextWindowExceeded` whichever server worded it, and ``except CtxwrightError``
catches everything the library raises deliberately. Each message says what was wrong and
what to do about it.

Some classes also derive from :class:`ValueError` because they reject a value (a tool
argument, a log record, an event payload) and callers written before this module caught them as such.

This module is the lowest layer of the package: it imports nothing from ctxwright.
"""

from __future__ import annotations

__all__ = [
    "AblationInputError",
    "AmbiguousSessionId",
    "AttentionError",
    "BackendError",
    "BackendUnavailable",
    "CalculatorError",
    "ClientStalled",
    "ConfigError",
    "ContextWindowExceeded",
    "CtxwrightError",
    "DeadlinePassed",
    "DynamicSectionInPrefix",
    "EventFormatError",
    "FrontMatterRefused",
    "GateError",
    "GateRuleError",
    "GoldenUnusable",
    "LockFileError",
    "LogRecordRejected",
    "LogUnreadable",
    "MalformedResponse",
    "McpServerError",
    "McpToolError",
    "NoSuchSkillFile",
    "NotADatabase",
    "PrefixFrozenError",
    "PrefixMismatch",
    "PricesFileError",
    "ReasoningMissing",
    "ReasoningPolicyConflict",
    "ReplyTooLarge",
    "RequestRefused",
    "ResponseTruncated",
    "SchemaTooNew",
    "SessionInUse",
    "SessionNotFound",
    "SkillLinkLeavesFolder",
    "SkillPathError",
    "SkillToolError",
    "StoreLocked",
    "StoreMissing",
    "StoreReadOnly",
    "StoreUnusable",
    "StoreWriteFailed",
    "SummaryFailed",
    "TelemetryUnavailable",
    "TodoError",
    "ToolCatalogError",
    "ToolFailure",
    "ToolSearchError",
    "UndecodableBody",
    "Veto",
]


class CtxwrightError(Exception):
    """Base class of every error ctxwright raises on purpose."""


# -- the static prefix ---------------------------------------------------------------------


class PrefixFrozenError(CtxwrightError):
    """Something tried to change the static prefix after the session started."""


class DynamicSectionInPrefix(CtxwrightError):
    """A prompt section declared ``dynamic`` was put in the static prefix (``core/sections.py``)."""


# -- sessions and their store --------------------------------------------------------------


class SessionNotFound(CtxwrightError):
    """No session with that ID in the store."""


class AmbiguousSessionId(SessionNotFound):
    """The ID given is the start of more than one session's ID (``store/ids.py``)."""


class EventFormatError(CtxwrightError, ValueError):
    """A stored or exported event whose payload does not have the shape of its kind."""


class StoreUnusable(CtxwrightError):
    """The database file cannot be used as a ctxwright store; it was left untouched.

    ``reason`` says what is wrong without the advice (a message built around it, such as
    :class:`StoreWriteFailed`'s, gives its own)."""

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message


class NotADatabase(StoreUnusable):
    """The file is not an SQLite database (another program's file, or a damaged one)."""


class SchemaTooNew(StoreUnusable):
    """The database was written by a newer ctxwright, with migrations this build does not know."""


class StoreMissing(StoreUnusable):
    """A command that only reads was pointed at a store that does not exist: no file there, or
    a database without ctxwright's tables. Nothing was created (a mistyped ``--db`` used to
    leave a new database, and its folders, behind)."""


class StoreLocked(StoreUnusable):
    """Another process held the database's lock for longer than ctxwright waits
    (``CTXWRIGHT_DB_WAIT`` seconds, retried with backoff); nothing was written."""


class StoreReadOnly(StoreUnusable):
    """The database file, or the folder SQLite must create its ``-wal``/``-shm`` files in, is
    not writable; nothing was written."""


class StoreWriteFailed(StoreUnusable):
    """An event (a model reply, a tool result) could not be written to the database. It was
    saved to a private recovery file instead (``recovery_path``), which resuming the session
    imports; ``recovery_path`` is ``None`` only if that file could not be written either."""

    def __init__(self, message: str, *, recovery_path: str | None = None) -> None:
        super().__init__(message)
        self.recovery_path = recovery_path


class SessionInUse(CtxwrightError):
    """Another live process is running the session (one writer per session: two would both
    append the same event numbers); the message names it (pid, host, since when)."""


# -- assembling an agent (harness.py, cli/) -------------------------------------------------


class ConfigError(CtxwrightError):
    """An option that cannot work as given (an unknown backend, a missing model name, a
    ``--tool`` spec that does not import); the message names the option and the fix."""


class PricesFileError(ConfigError):
    """A ``--prices`` file that cannot be used (``cache/prices.py``): not TOML, larger than
    1 MB, an unknown key, a price that is negative or not a number. Refused before any call is
    priced: a price read wrong would misstate every cost."""


class LockFileError(ConfigError):
    """A ``ctxwright.lock`` that cannot be used (``ci/lock.py``): missing, not TOML, too large,
    not a regular file, edited by hand into a shape ``ctxwright lock`` never writes. The check
    cannot judge the prefix against it, so it says how to regenerate it instead of guessing."""


class GateRuleError(ConfigError, ValueError):
    """A confirmation-gate rule that cannot be applied (``defence/policy.py``): an allowlist
    entry that is not a path, a domain, an address or a host, an unknown key in a rules file,
    an approval mode that does not exist. Refused when the agent is assembled, never in the
    middle of a session, where a rule that silently matched nothing would let calls through."""


class AblationInputError(ConfigError):
    """An input of ``ctxwright ablate`` that cannot be used (``ablation/``): a tasks file that is
    missing, too large or has a malformed line, a system prompt with no sections, an unknown
    section, a task environment that does not import. Refused before the first model call, with
    the file (and line) and what to fix: an ablation that ran on a half-read task list would
    report a success rate of some other experiment."""


class TelemetryUnavailable(ConfigError):
    """``--otlp`` (``otlp=``) was given, but the OpenTelemetry SDK and its OTLP/HTTP exporter are
    not installed (``telemetry/exporter.py`` imports them only when asked). Refused before the
    model loads, in one line that says what to install: an agent run that silently exported
    nothing would look like a collector that lost every span."""


class PrefixMismatch(CtxwrightError):
    """The system prompt or tools given to continue a session differ from the prefix it was
    started with. Why refused: the model would be offered tools its recorded prefix never
    declared (or lose ones it did), and the provider's cache of that prefix would be lost."""


# -- reasoning pass-back (core/reasoning.py) -----------------------------------------------


class ReasoningMissing(CtxwrightError):
    """An assistant tool-call turn that must send its reasoning back has none recorded."""

    def __init__(self, message: str, *, index: int) -> None:
        super().__init__(message)
        #: Position of the offending message in the list the policy was applied to
        #: (plus the ``index_offset`` given to ``ReasoningPolicy.apply``).
        self.index = index


class ReasoningPolicyConflict(CtxwrightError):
    """A session was asked to render reasoning in a different mode than it already uses."""


# -- model backends ------------------------------------------------------------------------


class BackendError(CtxwrightError):
    """A model backend failed in a way the caller should see."""


class BackendUnavailable(BackendError):
    """The backend cannot be reached or loaded (dead URL, missing model file)."""


class ResponseTruncated(BackendError):
    """The server answered, but the reply stopped mid-transfer (fewer bytes than its
    ``Content-Length``, or a stream without its end): the server or a proxy closed the
    connection early. Not a connection failure: the host and port are right."""


class ContextWindowExceeded(BackendError):
    """The request does not fit the model's context window (any provider's wording)."""


class MalformedResponse(BackendError):
    """The backend answered, but not in a shape we can read. The message ends with what to check:
    ``hint`` when the backend gives its own (the Anthropic base URL has no /v1), else :attr:`HINT`."""

    HINT = (
        "Check that the base URL is the API root of an OpenAI-compatible server (it ends in /v1) "
        "and that no proxy in between rewrites the replies."
    )

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(f"{message} -- {hint or self.HINT}")


class ReplyTooLarge(MalformedResponse):
    """A reply that ctxwright stopped reading: larger than the cap once decoded (a
    compression bomb, an endless stream), or in an encoding it did not ask for
    (``backends/bounded_http.py``). Never retried: the same server sends the same reply."""

    HINT = "Check the server at the base URL, and any proxy in between, then retry."


class DeadlinePassed(CtxwrightError):
    """A try's time (``timeout``, the whole answer included) ran out while a backend waited on
    the server (``backends/bounded_http.py``). Raised inside the SDK's HTTP client, as that
    client's own timeout error too; the backend turns it into a :class:`BackendUnavailable`
    that says so (and retries), so a caller never sees this type."""

    def __init__(self, seconds: float, received: int) -> None:
        super().__init__(f"the try's {seconds:g} s ran out after {received:,} bytes of the answer")
        self.seconds = seconds
        #: bytes read from the server during the try (0: it sent nothing at all)
        self.received = received


# -- tools ---------------------------------------------------------------------------------


class CalculatorError(CtxwrightError, ValueError):
    """The calculator tool's expression is not allowed or cannot be evaluated; the message says why.

    The tool registry turns it into an error result the model reads (``"type": "CalculatorError"``).
    """


class TodoError(CtxwrightError, ValueError):
    """A TODO tool call the model got wrong; the message says how to fix it."""


class SkillToolError(CtxwrightError, ValueError):
    """A ``Skill`` or ``read_skill_file`` call the model got wrong (an unknown skill, a path
    outside the skill's folder, not a regular file); the message says how to fix it.

    The tool registry turns it into an error result the model reads (``"type": "SkillToolError"``).
    """


class AttentionError(CtxwrightError):
    """An attention map that cannot be made: a request over the model's window, an answer too
    long to explain, or a llama.cpp whose attention tensor no longer has the layout
    ``attention/capture.py`` reads (the message names the installed version and the pinned one)."""


class ToolSearchError(CtxwrightError, ValueError):
    """A tool-search query the index cannot answer: empty, too long, an invalid regex, a bad limit.

    The message says how to ask again; a ``search_tools`` call turns it into a tool error the
    model reads, so it can retry with a few plain keywords.
    """


class ToolCatalogError(CtxwrightError, ValueError):
    """A tool definition that cannot join a catalog or an index: not a tool object, a duplicate
    name, a ``parameters`` that is not valid JSON Schema. The message names where it came from
    (``file:line``, or both places of a duplicate) and what to fix."""


class ToolFailure(CtxwrightError):
    """A tool body failed in a way it can name: ``error_type`` and ``hint`` go into the
    structured error result the model reads, instead of the exception's class name and the
    registry's generic hint. ``external``: the message is the tool's own text (e.g. an MCP
    server's error), not ctxwright's -- marked as external content when the tool is untrusted.
    """

    def __init__(self, message: str, *, error_type: str, hint: str, external: bool = False) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.hint = hint
        self.external = external


class McpToolError(ToolFailure):
    """A call to an MCP server's tool failed: an ``isError`` result, an error response, a
    timeout, a removed tool, or a server that exited. The session goes on."""


# -- MCP servers (mcp/) ----------------------------------------------------------------------


class McpServerError(CtxwrightError):
    """An MCP server could not be started, initialized or listed; the message names the
    server's command and what to check."""


# -- audit ---------------------------------------------------------------------------------


class LogRecordRejected(CtxwrightError, ValueError):
    """One record of a request log cannot become an audit request.

    Raised and caught inside ``audit/logs.py``: its message becomes a ``ParseProblem`` for
    that line, and the rest of the log is still read.
    """


class GateError(CtxwrightError):
    """The CI gate cannot run at all (``ci/gate.py``): no command after ``--``, a command that
    does not exist, a golden with no model call. Exit 2, never 1 (1 is a regression)."""


class GoldenUnusable(CtxwrightError):
    """A golden recording cannot be replayed (``replay/golden.py``): not a regular file, too
    large, not a request log, no model call in it, or a session that is not in the store."""


class LogUnreadable(CtxwrightError):
    """A request log that cannot be read as one, as a whole: not a regular file nor a pipe (a
    device never ends, a folder is not a log), or a record (a line) longer than the cap, which
    would take many times its size in memory. Unlike :class:`LogRecordRejected`, reading stops."""


# -- compaction ----------------------------------------------------------------------------


class Veto(CtxwrightError):
    """A ``before_compaction`` hook returns (or raises) this to stop the plan a compaction tier is
    about to apply; ``reason`` is recorded in the hook's event (``compaction/hooks.py``). An
    exception so that a hook may raise it from deep inside its own code."""

    def __init__(self, reason: str = "") -> None:
        super().__init__(reason)
        self.reason = reason


class SummaryFailed(CtxwrightError):
    """An LLM summary could not be used; ``reason`` is one of error, timeout, empty, oversized, busy.

    The compaction manager catches it, records it as an event and counts it in its circuit
    breaker, then falls back to the layers that need no model (noise, clearing, trim).
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(
            f"summary failed ({reason}): {detail}. Compaction falls back to the layers without a model; "
            "if this repeats, give the summarizer its own model object, a longer timeout or a larger max_chars."
        )
        self.reason = reason
        #: what went wrong, without the advice (what the ``summary_failed`` event records)
        self.detail = detail


# -- skills --------------------------------------------------------------------------------


class FrontMatterRefused(CtxwrightError):
    """A ``SKILL.md`` front matter that is valid YAML but would blow up once built: aliases that
    repeat too much (an alias bomb), an alias inside the value it names, nesting too deep.
    Raised while PyYAML composes the document, before any value exists; ``problem`` says which
    bound and what to write instead, ``line`` is PyYAML's 0-based line of the offending mark."""

    def __init__(self, problem: str, line: int | None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.line = line


class SkillPathError(CtxwrightError):
    """A path of a skill folder that cannot be used; the caller words it for its reader (a
    warning of the loader, an error result of ``read_skill_file``)."""


class NoSuchSkillFile(SkillPathError):
    """Nothing at that path of a skill folder: missing, a dangling link, or a link loop."""


class SkillLinkLeavesFolder(SkillPathError):
    """A link somewhere along a skill folder's path whose real path is outside the folder: a
    skill's files are what its folder holds, wherever the link points."""


# -- proxy ---------------------------------------------------------------------------------


class ClientStalled(CtxwrightError):
    """A proxy client sent nothing of its request body for the body timeout; the proxy answers
    408 and closes the connection, so a stalled client cannot hold a connection slot."""


class RequestRefused(CtxwrightError):
    """The replay server refuses a request before placing it in the recording (a body over
    the cap, stalled, not JSON): ``status`` is the HTTP status it answers; the message is the
    error's text. Raised and caught inside ``replay/server.py``."""

    def __init__(self, status: int, message: str, *, close: bool = False) -> None:
        super().__init__(message)
        self.status, self.message, self.close = status, message, close


class UndecodableBody(CtxwrightError):
    """A recorded body's bytes are not valid in their declared ``Content-Encoding`` (or end
    early); the proxy records it as size and hash, the relay itself is unaffected."""
