"""Argument provenance: did a value the model wants to act on come from the user, or only
from content it read?

Why: an indirect prompt injection succeeds when the model copies an attacker's value -- an
address, a URL, an account number, an amount -- from a web page or an e-mail into a call that
acts. Tags ask the model to treat data as data; this checks, by code, where each value of a
``write`` or ``external`` call was seen. A value found in untrusted content recorded in this
session (results of untrusted tools, ``<external_content>`` sections of any result) and in
none of the trusted sources (the user's messages, the system prompt, trusted tools' results)
is flagged, naming the tool and call id it came from. The book's line: the model must always
be able to tell instructions from data -- and what it cannot be trusted to tell, code checks.

What counts as a value (:func:`entities_of`), per argument:

* a whole target (``defence/policy.py`` decides which argument is one): an e-mail address, a
  URL (and its host), a host, a path, a recipient name;
* inside any string: e-mail addresses, URLs (with a scheme or ``www.``), IBANs, and account or
  phone numbers (6 or more digits, spaces and hyphens between them allowed);
* numbers: every number argument, and strings in parameters named ``amount``, ``sum``,
  ``price``, ``total``, ``cost``, ``value``, ``quantity``;
* every other string argument (and list item) as a whole (kind ``text``): a hotel's name, an
  event's title, a new password -- an attacker needs no address to do harm, ``reserve_hotel(
  "Riverside View Hotel")`` or ``update_password("new_password")`` is enough. Not compared as a
  whole: free text the model writes (parameters named ``body``, ``content``, ``text``,
  ``message``, ``subject``, ``description``, ``note``, ``comment``, or any value with a line
  break or longer than 120 characters) -- only the values inside it are, as above; a string
  that holds such an inner value (the IBAN is compared, not the sentence around it); a value
  the tool's own schema enumerates; a date or a time of day (it says when, not to whom);
* a digits-only string in a parameter whose name says it is an id (``id``, ``file``,
  ``account``, ``number``, ``key``, ``ref``, ...; kind ``id``), however short: ``delete_file(
  "13")``. Small numbers are everywhere in text (``June 13``, ``11. Serve hot``), so an id
  counts as seen in a source only where the source *refers to it as an id*: after ``id``,
  ``#``, ``no``, ``number``, ``file``, ``event``, ``record``, ``item`` or ``transaction``, with
  up to two words between (``the file with ID '13'``). The id fields of an untrusted
  structured result (``id_: '11'``) do not count there -- the system holding the records
  numbered them, not whoever wrote their text -- but they do in a trusted one. So the id a
  listing returns passes, the id an injected sentence names is flagged, and ``June 13`` in
  the user's message vouches for no file 13.

An address or a host seen nowhere itself is compared by its site, the registrable domain
(``defence/hosts.py``): with ``attacker@evil.example`` in a page, ``boss@evil.example`` and
``x@mail.evil.example`` reach the same owner and are flagged, unless a trusted source names an
address or a host of that site (an address a trusted tool echoed names none).

Values found in prose lose the quotes, brackets and punctuation around them, on both sides:
AgentDojo writes "send it to 'mark.black-2134@gmail.com'", and the quote is no part of the
address.

How values are normalised before they are compared, on both sides: Unicode NFKC, invisible
format characters removed (zero-width, bidirectional controls, tag characters -- an attacker's
``a\\u200bttacker@evil.com`` is ``attacker@evil.com``); addresses, hosts and URLs case-folded,
``mailto:``, the scheme, ``www.`` and a trailing ``/`` dropped; every host (a URL's, an
address's domain) read as a URL parser reads it (``defence/hosts.py``: ``%65vil.example``,
``EVIL.example.`` and ``ｅvil。example`` are ``evil.example``, ``bücher.example`` its A-label,
``2130706433`` is ``127.0.0.1``) and a URL's percent-escaped unreserved characters decoded;
IBANs without spaces in upper case; account numbers as their digits; amounts as decimals
(``1,000.50``, ``1.000,50``, ``1 000.5``, ``1_000.5`` and ``1000.5`` are one value; ``1,000``
may be either ``1000`` or ``1``, so both; exponent form ``1.2e3`` and integer literals ``0x4b0``,
``0o2260``, ``0b10010110000`` are ``1200``; numbers in words are not read), and a string that is
a number in one of these forms is compared as one wherever it sits; paths through
``normpath``; names case-folded with whitespace collapsed.

What is never flagged -- the minimum: a text value shorter than :data:`MIN_CHARS` (4)
characters after normalisation, or one of :data:`COMMON` (``true``, ``none``, ``inbox``, ...);
a number with fewer than :data:`MIN_DIGITS` (2) digits in its decimal form (``1`` to ``9``),
unless it is an id (above). A whole ``text`` value counts as seen only as a whole phrase
(word boundaries on both sides, case-folded, whitespace collapsed).
Such values occur everywhere and say nothing about where an intention came from.

Laundering a value through the agent's own words does not make it trusted: a tool's result
counts as trusted only for values that were not in the arguments of the call that produced it
(a tool that echoes its input proves nothing), a failed result (an error, which echoes the
arguments) not at all, and a sub-agent's task (written by the parent model) is not a user
message -- the parent's sources are used instead (``agent/delegate.py``). And a trusted tool
called with values from untrusted content returns untrusted content
(:meth:`ProvenanceIndex._taint`): a ``reverse_text`` or a base64 decoder given a page's string
turns it into the attacker's address in clear, which is then flagged as seen in that tool's
result, ``via`` the page.
"""

from __future__ import annotations

import json
import posixpath
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

from ctxwright.core.events import AssistantEvent, Event, ToolEvent, UserEvent
from ctxwright.defence.hosts import canonical_host, site_of
from ctxwright.defence.marking import TAG
from ctxwright.defence.policy import email_parts, host_of, leaves, name_words, targets_of

__all__ = [
    "COMMON",
    "MIN_CHARS",
    "MIN_DIGITS",
    "Entity",
    "EntityKind",
    "ProvenanceIndex",
    "Seen",
    "entities_of",
    "flag_reason",
    "normalise",
    "normalise_amount",
    "normalise_email",
    "normalise_url",
]

EntityKind = Literal["email", "url", "host", "path", "name", "iban", "account", "amount", "text", "id"]

#: Text values shorter than this (after normalisation) are never flagged.
MIN_CHARS = 4
#: Numbers with fewer digits than this in their decimal form are never flagged.
MIN_DIGITS = 2
#: Values too common to say where an intention came from.
COMMON = frozenset(
    {
        "true",
        "false",
        "none",
        "null",
        "undefined",
        "default",
        "inbox",
        "draft",
        "drafts",
        "sent",
        "today",
        "yesterday",
        "tomorrow",
        "everyone",
        "here",
        "general",
        "random",
        "admin",
        "user",
        "users",
        "self",
        "test",
        "home",
        "main",
        "index",
        "output",
        "input",
        "file",
        "files",
        "data",
        "tmp",
        "/tmp",
    }
)

_AMOUNT_WORDS = frozenset({"amount", "sum", "price", "total", "cost", "value", "quantity"})
#: Parameters whose value is free text a model writes (a mail's body, a subject, a message):
#: compared by the values inside them, never as a whole -- the whole text is the model's own.
_FREE_TEXT_WORDS = frozenset(
    {"body", "content", "contents", "text", "message", "msg", "subject", "description", "note", "notes", "comment"}
)
#: Parameters whose digits-only value is an identifier (``delete_file("13")``): such a value is
#: compared however short it is -- "13" says nothing as a word, but as a file id copied from a
#: listing it names exactly what an attacker wants deleted.
_ID_WORDS = frozenset({"id", "ids", "file", "account", "number", "no", "num", "iban", "uid", "key", "ref", "reference"})
_ID_REF = re.compile(
    r"(?:\b(?:ids?|id_|no|nos|number|num|file|files|event|events|record|item|transaction)\b|#)"
    r"[^\w\n]{0,4}(?:[a-z]+[^\w\n]{1,4}){0,2}?(\d+)(?![\w]|[.:/-]\d)",
    re.IGNORECASE,
)
#: A date or a time of day (``2024-05-20``, ``2024-05-20 10:00``, ``10:00``): it says when an
#: effect happens, not who receives it or what it touches, and calendars copied from data are
#: the ordinary case -- never compared as a value of its own.
_DATE = re.compile(r"(?:\d{4}-\d{1,2}-\d{1,2}(?:[ T]\d{1,2}:\d{2}(?::\d{2})?)?|\d{1,2}:\d{2}(?::\d{2})?)")
#: A word this long that is no plain word (:data:`_PLAIN_WORD`) taints the call it is an
#: argument of when only untrusted content holds it (``ProvenanceIndex._taint``).
_TAINT_WORD = 8
#: A plain word of prose: letters, capitalised at most -- not ``elpmaxe.live@rekcatta``,
#: ``YXR0YWNrZXI=`` or ``6576696c``.
_PLAIN_WORD = re.compile(r"[^\W\d_][^\W\d_A-Z]*")
#: A string longer than this, or with a line break, is free text whatever its parameter's name.
_MAX_PHRASE = 120
#: Quotes, brackets and sentence punctuation around a value as written in prose ("to
#: 'mark@example.com'", "(see www.example.com).") -- never part of the value.
_SURROUND = "'\"`‘’“”«»<>()[]{}.,;:!?"
_EMAIL_IN = re.compile(r"(?<![\w.+-])[\w.!#$%&'*+/=?^`{|}~-]+@[\w-]+(?:\.[\w-]+)+")
_URL_IN = re.compile(r"(?:\bhttps?://|(?<![\w.@-])www\.)[^\s<>\"'`()\[\]{}|\\^]+", re.IGNORECASE)
_IBAN_IN = re.compile(r"\b[A-Z]{2}\d{2}(?:[A-Z0-9]{11,30}|(?: [A-Z0-9]{4}){2,7}(?: [A-Z0-9]{1,4})?)\b", re.IGNORECASE)
_BARE_URL_IN = re.compile(
    r"(?<![\w@.-])(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,24}(?::\d+)?(?:/[^\s<>\"'`()\[\]{}|\\^]*)?(?![\w-])",
    re.IGNORECASE,
)
_DIGITS_IN = re.compile(r"(?<![\w.,])\+?\d(?:[ -]?\d){5,}(?![\w])")
#: A number written in text, in any form :func:`normalise_amount` reads: an integer literal in
#: another base (``0x4b0``), exponent form (``1.2e3``), thousands grouped by ``,``, ``.``,
#: ``'``, ``_`` or a space (``1_200``), or plain digits with a decimal part.
_NUMBER_IN = re.compile(
    r"(?<![\w.,])(?:[-+]?0[xXoObB][0-9a-fA-F]{1,128}(?![\w])"
    r"|[-+]?\d+(?:[.,]\d+)?[eE][-+]?\d{1,4}(?![\w])"
    r"|[-+]?\d{1,3}(?:[,.'_ \u00a0]\d{3})+(?:[.,]\d+)?(?!\d)"
    r"|[-+]?\d+(?:[.,]\d+)?(?!\d))"
)
_FILE_SUFFIXES = frozenset(
    [
        "txt",
        "pdf",
        "md",
        "py",
        "json",
        "csv",
        "doc",
        "docx",
        "xls",
        "xlsx",
        "ppt",
        "pptx",
        "png",
        "jpg",
        "jpeg",
        "gif",
        "svg",
        "html",
        "htm",
        "log",
        "yaml",
        "yml",
        "zip",
        "tar",
        "gz",
        "sh",
        "js",
        "ts",
        "xml",
        "ini",
        "cfg",
        "toml",
        "rs",
        "go",
        "c",
        "h",
        "cpp",
        "java",
        "rb",
        "php",
        "sql",
        "db",
        "bak",
        "tmp",
        "lock",
    ]
)
#: A section marked as external content anywhere in a result (``defence/marking.py`` defuses
#: every tag inside a marked body, so the first closing tag is the section's own).
_WRAPPED = re.compile(rf"<{TAG}\b([^>]*)>(.*?)</{TAG}\s*>", re.DOTALL)
_ATTR = re.compile(r'(\w+)="([^"]*)"')
#: An id field of a structured result (``id_: '13'``, ``"file_id": 13``): the system that
#: holds the records numbered them, not whoever wrote their text.
_ID_FIELD = re.compile(r"""(\b(?:id_?|ids|\w+_ids?)['"]?\s*[:=]\s*['"]?)(\w+)""", re.IGNORECASE)


# --------------------------------------------------------------------------- normalisation


#: Every character of Unicode category Cf ("format": soft hyphen, zero-width, bidirectional
#: controls, tag characters, ...), as of Unicode 14. Removed for comparison only -- a wider set
#: than the sanitizer's, which changes what the model sees and names each kind it removes.
_FORMAT_CHARS = re.compile(
    "[\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e"
    "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U00013438"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]"
)


def normalise(text: str) -> str:
    """NFKC with invisible format characters (Unicode category Cf: zero-width, bidirectional
    controls, tag characters) removed."""
    text = unicodedata.normalize("NFKC", text)
    return text if text.isascii() else _FORMAT_CHARS.sub("", text)


def normalise_email(value: str) -> str | None:
    """``Bob@Example.COM`` and ``mailto:bob@example.com`` -> ``bob@example.com``; the domain
    as a host (``bob@bücher.example`` is ``bob@xn--bcher-kva.example``)."""
    parts = email_parts(normalise(value))
    if parts is None:
        return None
    return f"{parts[0]}@{canonical_host(parts[1]) or parts[1]}"


def normalise_host(value: str) -> str | None:
    host = host_of(normalise(value))
    if host is None:
        return None
    return host[4:] if host.startswith("www.") else host


def normalise_url(value: str) -> str:
    """``HTTPS://www.Example.com/a/`` -> ``example.com/a``: no scheme, no ``www.``, no
    trailing slash or sentence punctuation, case-folded; the host read as a URL parser reads
    it (``%65xample.com`` is ``example.com``: :func:`~ctxwright.defence.hosts.canonical_host`)
    and percent-encoded unreserved characters decoded (``/%61`` is ``/a``, RFC 3986 6.2.2.2)."""
    text = normalise(value).strip()
    text = re.sub(r"^[a-z][a-z0-9+.-]*://", "", text, flags=re.IGNORECASE)
    split = re.match(r"[^/?#]*", text)
    end = split.end() if split else 0
    authority, rest = text[:end], text[end:]
    userinfo, at, hostport = authority.rpartition("@")
    port = re.search(r":\d*$", hostport) if not hostport.endswith("]") else None
    host = hostport[: port.start()] if port else hostport
    host = canonical_host(host) or host.casefold()
    host = host[4:] if host.startswith("www.") else f"[{host}]" if ":" in host else host
    rest = _UNRESERVED_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), rest).casefold()
    text = userinfo.casefold() + at + host + (port.group(0) if port else "") + rest
    return text.rstrip("/.,;:!?")


#: A percent-escape of an unreserved character (RFC 3986: letters, digits, ``-._~``), which
#: means the character itself.
_UNRESERVED_ESCAPE = re.compile(r"%(2[de]|3[0-9]|[46][1-9a-f]|[57][0-9a]|5f|7e)", re.IGNORECASE)


def normalise_path(value: str) -> str:
    text = normalise(value).strip()
    if not text:
        return ""
    out = posixpath.normpath(text)
    return out[2:] if out.startswith("./") else out


def normalise_name(value: str) -> str:
    return " ".join(normalise(value).casefold().split())


def normalise_amount(value: object) -> set[str]:
    """Every decimal a written number may mean, canonical (``98.70`` -> ``{"98.7"}``,
    ``1,000`` -> ``{"1000", "1"}``, ``1.2e3`` and ``0x4b0`` -> ``{"1200"}``); empty when it is
    not a number."""
    if isinstance(value, bool):
        return set()
    if isinstance(value, int):
        return {_canon(Decimal(value))} if value.bit_length() <= _MAX_INT_BITS else set()
    if isinstance(value, float):
        return {_canon(Decimal(repr(value)))} if value == value and abs(value) != float("inf") else set()
    if not isinstance(value, str):
        return set()
    text = normalise(value).strip().replace("\u2212", "-")  # the minus sign is a minus
    text = text.replace("\u00a0", " ").replace("'", "").replace(" ", "").replace("_", "")
    based = _BASED.fullmatch(text)
    if based:  # 0x4b0, 0o2260, 0b10010110000: a program's integer literal
        number = int(based.group(2), 0)
        return {_canon(Decimal(-number if based.group(1) == "-" else number))}
    if re.match(r"[-+]?0[xob]", text, re.IGNORECASE):  # too long, or no literal: not its leading 0
        return set()
    text = re.sub(r"^[^\d+-]+|[^\d.]+$", "", text)  # currency signs and words around it
    exponent = 0
    sci = _EXPONENT.fullmatch(text)
    if sci:  # 1.2e3, 1,2E+3: the mantissa is read as any number, then scaled
        text, exponent = sci.group(1), int(sci.group(2))
    sign = ""
    if text[:1] in "+-":
        sign, text = ("-" if text[0] == "-" else ""), text[1:]
    if not re.fullmatch(r"\d[\d.,]*", text or "x"):
        return set()
    readings: set[str] = set()
    last = max(text.rfind("."), text.rfind(","))
    seps = set(c for c in text if c in ".,")
    if not seps:
        readings.add(text)
    elif len(seps) == 2:  # both: the last one is the decimal point
        readings.add(re.sub(r"[.,]", "", text[:last]) + "." + text[last + 1 :])
    else:
        sep = seps.pop()
        groups = text.split(sep)
        if len(groups) > 2:  # 1,000,000: thousands only
            readings.add("".join(groups))
        else:
            readings.add(groups[0] + "." + groups[1])  # a decimal point
            if len(groups[1]) == 3:  # 1,000 may be a thousand too
                readings.add("".join(groups))
    out = set()
    for r in readings:
        try:
            read = Decimal(sign + r.strip("."))
            out.add(_canon(read.scaleb(exponent) if exponent else read))
        except InvalidOperation:
            continue
    return out


#: A whole string that is a number in some written form (case-folded): compared as an amount
#: wherever it sits.
_NUMBER_WHOLE = re.compile(
    r"[-+\u2212]?(?:0x[0-9a-f]{1,32}|0o[0-7]{1,43}|0b[01]{1,128}|(?:\d[\d,.'_ ]*)?\d(?:e[-+]?\d{1,4})?)"
)
#: A program's integer literal in another base (``0x4b0``); at most 128 bits, so an
#: attacker's string of hex digits cannot make a huge number.
_BASED = re.compile(r"([-+]?)(0[xX][0-9a-fA-F]{1,32}|0[oO][0-7]{1,43}|0[bB][01]{1,128})")
#: A number in exponent form (``1.2e3``, ``12E-2``); the exponent is bounded (four digits).
_EXPONENT = re.compile(r"([-+]?\d[\d.,]*)[eE]([-+]?\d{1,4})")
#: Integers beyond this many bits are no amount anyone pays (and would be slow to print).
_MAX_INT_BITS = 256
#: Past this decimal exponent a canonical amount is written in exponent form, so that
#: ``1e9999`` is a short string, not ten thousand zeros.
_MAX_PLAIN_EXPONENT = 64


def _canon(d: Decimal) -> str:
    d = d.normalize()
    if abs(d.adjusted()) > _MAX_PLAIN_EXPONENT:
        return format(d, "E")
    text = format(d, "f")
    return "0" if text in ("-0", "0") else text


def _digits(text: str) -> int:
    return sum(c.isdigit() for c in text)


# --------------------------------------------------------------------------- entities


@dataclass(frozen=True)
class Entity:
    """A value of a call's arguments, as compared: ``norm`` is its normalised form, ``site``
    the registrable domain of an address's or a host's (``defence/hosts.py``), else empty."""

    type: EntityKind
    argument: str
    value: str
    norm: str
    site: str = ""


def _eligible(kind: EntityKind, norm: str) -> bool:
    if kind == "amount":
        return _digits(norm) >= MIN_DIGITS
    return len(norm) >= MIN_CHARS and norm not in COMMON


def _trim(raw: str) -> str:
    """A value found in prose without the quotes, brackets and punctuation around it."""
    return raw.strip(_SURROUND)


def _text_entities(text: str, *, normalised: bool = False) -> Iterable[tuple[EntityKind, str, str]]:
    """``(kind, raw, norm)`` of the addresses, URLs, hosts, IBANs and long numbers in ``text``
    (each distinct written form once)."""
    text = text if normalised else normalise(text)
    for raw in dict.fromkeys(_trim(m.group(0)) for m in _EMAIL_IN.finditer(text)):
        norm = normalise_email(raw)
        if norm:
            yield "email", raw, norm
    blanked = _EMAIL_IN.sub(lambda m: " " * len(m.group(0)), text)
    for raw in dict.fromkeys(_trim(m.group(0)) for m in _URL_IN.finditer(blanked)):
        yield "url", raw, normalise_url(raw)
        host = normalise_host(raw)
        if host:
            yield "host", raw, host
    blanked = _URL_IN.sub(lambda m: " " * len(m.group(0)), blanked)
    for raw in dict.fromkeys(_trim(m.group(0)) for m in _BARE_URL_IN.finditer(blanked)):
        host = normalise_host(raw)  # example.com/path without a scheme
        if host and host.rsplit(".", 1)[-1] not in _FILE_SUFFIXES:
            yield "url", raw, normalise_url(raw)
            yield "host", raw, host
    for raw in dict.fromkeys(m.group(0) for m in _IBAN_IN.finditer(text)):
        yield "iban", raw, raw.replace(" ", "").upper()
    # an IBAN's digits are not also an account number (its spaces would make them one)
    for raw in dict.fromkeys(m.group(0) for m in _DIGITS_IN.finditer(_IBAN_IN.sub(" ", text))):
        if _DATE.fullmatch(raw):  # 2024-05-20 is a date, not an account
            continue
        yield "account", raw, re.sub(r"\D", "", raw)


def entities_of(arguments: Mapping[str, Any], schema: Mapping[str, Any] | None = None) -> tuple[Entity, ...]:
    """The values of a call's arguments provenance checks (the module docstring lists them),
    each eligible (:data:`MIN_CHARS`, :data:`MIN_DIGITS`, :data:`COMMON`), without duplicates."""
    found: dict[tuple[str, str, str], Entity] = {}

    def add(kind: EntityKind, argument: str, value: str, norm: str | None) -> None:
        if norm and _eligible(kind, norm):
            found.setdefault((kind, argument, norm), Entity(kind, argument, value, norm, _site(kind, norm)))

    targeted: set[str] = set()
    for t in targets_of(arguments, schema):
        targeted.add(t.argument)
        if t.type == "email":
            add("email", t.argument, t.value, normalise_email(t.value))
        elif t.type == "url":
            add("url", t.argument, t.value, normalise_url(t.value))
            add("host", t.argument, t.value, normalise_host(t.value))
        elif t.type == "host":
            add("host", t.argument, t.value, normalise_host(t.value))
        elif t.type == "path":
            add("path", t.argument, t.value, normalise_path(t.value))
        else:
            add("name", t.argument, t.value, normalise_name(t.value))
    for place, name, prop, value in leaves(arguments, schema):
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, (int, float)):
            for norm in normalise_amount(value):
                add("amount", place, str(value), norm)
            continue
        if not isinstance(value, str):
            continue
        inner = list(_text_entities(value))
        for kind, raw, norm in inner:
            add(kind, place, raw, norm)
        words = name_words(name)
        if words & _AMOUNT_WORDS:
            for norm in normalise_amount(value):
                add("amount", place, value, norm)
        if inner or place in targeted or _free_text(words, value) or _enumerated(prop, value):
            # the values inside are compared (an IBAN written with or without spaces), not
            # the whole string
            continue
        whole = normalise_name(value)
        if whole.isdigit():
            if words & _ID_WORDS:  # an id however short: delete_file("13")
                norm = whole.lstrip("0") or "0"
                found.setdefault(("id", place, norm), Entity("id", place, value, norm))
            elif len(whole) < 6:  # 6+ digits are an account number, above
                for norm in normalise_amount(whole):
                    add("amount", place, value, norm)
            continue
        if _NUMBER_WHOLE.fullmatch(whole):  # "1.2e3", "0x4b0", "1,200.50": the number it means
            for norm in normalise_amount(whole):
                add("amount", place, value, norm)
        if not _DATE.fullmatch(whole):
            add("text", place, value, _trim(whole))
    return tuple(found.values())


def _site(kind: EntityKind, norm: str) -> str:
    """The site an address or a host belongs to (``x@mail.evil.example`` -> ``evil.example``);
    empty for every other kind. A URL's site is its host entity's, so one URL is not flagged
    twice for its site."""
    if kind == "email":
        return site_of(norm.rpartition("@")[2])
    if kind == "host":
        return site_of(norm)
    return ""


def _free_text(words: frozenset[str], value: str) -> bool:
    """A value the model writes in its own words (a body, a subject): only the values inside
    it say where an intention came from, not the whole text."""
    return bool(words & _FREE_TEXT_WORDS) or "\n" in value or len(value) > _MAX_PHRASE


def _enumerated(schema: Mapping[str, Any], value: str) -> bool:
    """A value the tool's own schema lists (``enum``): it comes from the tool, not from data."""
    enum = schema.get("enum") if isinstance(schema, Mapping) else None
    return isinstance(enum, list) and value in enum


# --------------------------------------------------------------------------- sources


@dataclass
class _Source:
    """One piece of recorded content: its entities by kind and its text for substring search."""

    tool: str | None
    call_id: str | None
    entities: dict[str, set[str]]
    text: str  # normalised, for paths
    folded: str  # normalised and case-folded, for names
    prose: str = ""  # ``text`` with the values of id fields blanked, for ids
    #: for a result computed from untrusted values: the untrusted results they came from
    via: tuple[Seen, ...] = ()

    @classmethod
    def of(cls, text: str, tool: str | None = None, call_id: str | None = None, via: tuple[Seen, ...] = ()) -> _Source:
        ents: dict[str, set[str]] = {}
        norm = normalise(text)
        for kind, _raw, value in _text_entities(norm, normalised=True):
            ents.setdefault(kind, set()).add(value)
        for m in _EMAIL_IN.finditer(norm):  # an address's domain is a host seen there too
            domain = m.group(0).rsplit("@", 1)[1]
            ents.setdefault("host", set()).add(canonical_host(domain) or domain.casefold().rstrip("."))
        ents["site"] = {site_of(h) for h in ents.get("host", ())}  # and every host's site
        amounts = ents.setdefault("amount", set())
        for written in set(m.group(0) for m in _NUMBER_IN.finditer(norm)):
            amounts.update(normalise_amount(written))
        prose = _ID_FIELD.sub(lambda m: m.group(1) + " " * len(m.group(2)), norm)
        return cls(tool, call_id, ents, norm, " ".join(norm.casefold().split()), prose, via)

    def without(self, values: Iterable[Entity], texts: Iterable[str]) -> _Source:
        """This source minus the values of the call that produced it (a tool echoing its input)."""
        ents = {k: set(v) for k, v in self.entities.items()}
        for e in values:
            ents.get(e.type, set()).discard(e.norm)
            ents.get("site", set()).discard(e.site)  # an echoed address vouches for no site
        text, folded = self.text, self.folded
        for t in texts:
            if len(t) >= MIN_CHARS:
                text = text.replace(normalise(t), "\x00")
                folded = folded.replace(" ".join(normalise(t).casefold().split()), "\x00")
        prose = self.prose
        for t in texts:
            if t:
                prose = prose.replace(normalise(t), "\x00")
        return _Source(self.tool, self.call_id, ents, text, folded, prose, self.via)

    def seen(self, site: str = "") -> Seen:
        """Where a value (or only its ``site``) was seen: this source."""
        return Seen(self.tool or "?", self.call_id or "?", site, self.via)

    def has(self, e: Entity, *, trusted: bool = False) -> bool:
        if e.type == "path":
            return _bounded(e.norm, self.text, r"[\w/.-]", r"[\w/-]")
        if e.type in ("name", "text"):
            return self.has_phrase(e.norm)
        if e.type == "id":  # "13" as a token, not inside 2024-05-13 or 13.5
            return e.norm in _id_refs(self.text if trusted else self.prose)
        return e.norm in self.entities.get(e.type, ())

    def has_phrase(self, phrase: str) -> bool:
        """Whether ``phrase`` (case-folded, whitespace collapsed) stands here as whole words."""
        return _bounded(phrase, self.folded, r"\w", r"\w")

    def has_site(self, site: str) -> bool:
        """Whether an address or a host of this source belongs to ``site``."""
        return bool(site) and site in self.entities.get("site", ())


def _phrases(value: str) -> Iterable[str]:
    """The whole of ``value`` and its words that are no plain word, as a source's ``folded``
    text would hold them (see :meth:`ProvenanceIndex._taint`)."""
    norm = normalise(value)
    whole = _trim(" ".join(norm.casefold().split()))
    if len(whole) >= MIN_CHARS and whole not in COMMON and not _DATE.fullmatch(whole):
        yield whole
    for word in norm.split():
        word = _trim(word)
        if len(word) >= _TAINT_WORD and not _PLAIN_WORD.fullmatch(word) and word.casefold() != whole:
            yield word.casefold()


def _id_refs(text: str) -> set[str]:
    """The numbers ``text`` refers to as ids: after ``id``, ``#``, ``no``, ``number``, ``file``,
    ``event``, ... with up to two words between (``the file with ID '13'``, ``id_: '13'``) --
    not the 13 of ``June 13`` or of ``13. Serve hot``."""
    return {m.group(1).lstrip("0") or "0" for m in _ID_REF.finditer(text)}


def _bounded(needle: str, hay: str, before: str, after: str) -> bool:
    if not needle or needle not in hay:
        return False
    return re.search(f"(?<!{before}){re.escape(needle)}(?!{after})", hay) is not None


@dataclass(frozen=True)
class Seen:
    """Where an untrusted value was seen: the tool and the call whose result held it;
    ``site`` is set when only the value's site was seen there (another mailbox or host of
    the same registrable domain), not the value itself."""

    tool: str
    call_id: str
    site: str = ""
    #: when that result was computed by a trusted tool from untrusted values (``reverse_text``
    #: of a page's string): the untrusted results those values came from
    via: tuple[Seen, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"tool": self.tool, "call_id": self.call_id}
        if self.site:
            out["site"] = self.site
        if self.via:
            out["via"] = [v.to_dict() for v in self.via]
        return out

    def describe(self) -> str:
        """``reverse_text (c2, from read_webpage (c1))``: the tool, the call, the origin."""
        origin = f", from {', '.join(v.describe() for v in self.via)}" if self.via else ""
        return f"{self.tool} ({self.call_id}{origin})"


@dataclass
class ProvenanceIndex:
    """The session's sources, split into trusted and untrusted, built from its events and
    extended as events are appended (the log is append-only, so each event is read once).

    ``untrusted_tool(name)`` says whether a tool's whole result is untrusted (its
    ``Tool.trust``); ``dispatchers`` are tools that run another tool named in their
    arguments (``call_tool``), whose results count as that tool's.
    """

    untrusted_tool: Callable[[str], bool]
    dispatchers: frozenset[str] = frozenset({"call_tool"})
    trusted: list[_Source] = field(default_factory=list)
    untrusted: list[_Source] = field(default_factory=list)
    _read: dict[str, int] = field(default_factory=dict)
    _calls: dict[str, tuple[str, str]] = field(default_factory=dict)

    def add_trusted_text(self, text: str) -> None:
        """A trusted source outside the event log: the system prompt."""
        if text:
            self.trusted.append(_Source.of(text))

    def update(self, key: str, events: Sequence[Event], *, user_trusted: bool = True) -> None:
        """Read ``events`` of the log named ``key`` past what was read before. With
        ``user_trusted=False`` (a sub-agent's log), its user messages are not trusted: the
        parent model wrote them."""
        start = self._read.get(key, 0)
        for ev in events[start:]:
            self._add(ev, user_trusted)
        self._read[key] = max(start, len(events))

    def _add(self, ev: Event, user_trusted: bool) -> None:
        if isinstance(ev, UserEvent):
            if user_trusted and not ev.is_reminder:
                self.trusted.append(_Source.of(ev.message.content or ""))
        elif isinstance(ev, AssistantEvent):
            for tc in ev.message.tool_calls:
                self._calls[tc.id] = (tc.name, tc.arguments)
        elif isinstance(ev, ToolEvent):
            self._add_result(ev)

    def _add_result(self, ev: ToolEvent) -> None:
        content = ev.message.content or ""
        call_id = ev.message.tool_call_id or ""
        name, raw_args = self._calls.get(call_id, (ev.tool_name, "{}"))
        args = _parse(raw_args)
        if name in self.dispatchers and isinstance(args.get("name"), str):
            name = args["name"]
            inner = args.get("arguments")
            args = inner if isinstance(inner, dict) else {}
        if ev.external or self.untrusted_tool(name):
            self.untrusted.append(_Source.of(content, name, call_id))
            if ev.sanitized is not None:  # what the tool said before the sanitizer: the same values
                self.untrusted.append(_Source.of(ev.sanitized.original, name, call_id))
            return
        rest: list[str] = []
        last = 0
        for m in _WRAPPED.finditer(content):
            attrs = dict(_ATTR.findall(m.group(1)))
            source = attrs.get("source", "")
            tool = source[5:] if source.startswith("tool:") else source or name
            self.untrusted.append(_Source.of(m.group(2), tool, attrs.get("id") or call_id))
            rest.append(content[last : m.start()])
            last = m.end()
        rest.append(content[last:])
        texts = [v for _, _, _, v in leaves(args) if isinstance(v, str)]
        taint = self._taint(args)
        if taint:  # computed from untrusted values: what it made of them is untrusted too
            derived = _Source.of("\n".join(rest), name, call_id, taint)
            self.untrusted.append(derived.without(entities_of(args), texts))
        elif ev.ok and not ev.interrupted:
            self.trusted.append(_Source.of("\n".join(rest)).without(entities_of(args), texts))

    def _taint(self, args: Mapping[str, Any]) -> tuple[Seen, ...]:
        """The untrusted results (the first of a chain) that values of a trusted tool's
        arguments came from, or ``()``. Why: a trusted ``reverse_text`` or base64 decoder
        given a page's string returns the attacker's address in clear, and a result of a
        trusted tool would vouch for it. Its values are the ones the gate compares
        (:func:`entities_of`) and, for any string argument, free text included, the whole
        string and each of its words of :data:`_TAINT_WORD` or more characters that is no
        plain word (a digit, a symbol or a capital inside: a reversed address, base64, hex),
        found in untrusted content and in no trusted source."""
        seen: dict[Seen, None] = {}
        for e in entities_of(args):
            seen.update(dict.fromkeys(self.seen_untrusted(e)))
        for _, _, _, value in leaves(args):
            if isinstance(value, str):
                for phrase in _phrases(value):
                    if not any(s.has_phrase(phrase) for s in self.trusted):
                        seen.update(dict.fromkeys(s.seen() for s in self.untrusted if s.has_phrase(phrase)))
        return tuple(dict.fromkeys(root for s in seen for root in (s.via or (Seen(s.tool, s.call_id),))))

    def seen_untrusted(self, e: Entity) -> tuple[Seen, ...]:
        """Where ``e`` was seen in untrusted content, or ``()`` when it was not or when a
        trusted source holds it too. An address or a host seen nowhere itself is looked up
        by its site: with ``attacker@evil.example`` in a page, ``boss@evil.example`` and
        ``x@mail.evil.example`` reach the same owner, unless a trusted source names an
        address or a host of that site."""
        if any(s.has(e, trusted=True) for s in self.trusted):
            return ()
        seen = tuple(dict.fromkeys(s.seen() for s in self.untrusted if s.has(e)))
        if seen or not e.site or any(s.has_site(e.site) for s in self.trusted):
            return seen
        return tuple(dict.fromkeys(s.seen(e.site) for s in self.untrusted if s.has_site(e.site)))


def flag_reason(e: Entity, seen: Sequence[Seen]) -> str:
    """The gate's reason for a provenance flag, for a person: the value, where it was seen,
    and whether only its site was."""
    where = ", ".join(s.describe() for s in seen)
    what = f"its site {e.site}" if seen and all(s.site for s in seen) else f"this {e.type}"
    return (
        f"{e.argument}={e.value!r}: {what} appears in untrusted content from {where} "
        "and in none of the user's messages, the system prompt or trusted results"
    )


def _parse(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
