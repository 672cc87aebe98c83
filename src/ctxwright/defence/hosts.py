"""Hosts as a URL parser reads them, and the site (registrable domain) that owns them.

Why: the gate compares where a call points with the user's allowlists and with what untrusted
content said. The same host has many spellings that every browser and HTTP client treats as
one: ``%65vil.example`` (percent-encoded), ``EVIL.example.`` (case, the root's trailing dot),
``ｅvil。example`` (full-width letters and dots), ``bücher.example`` next to its A-label
``xn--bcher-kva.example``, and ``2130706433`` or ``0x7f.1`` for ``127.0.0.1``. An attacker
picks whichever spelling a string comparison misses. :func:`canonical_host` reads a host the
way the WHATWG URL Standard's host parser does (percent-decode, UTS #46 mapping without
transitional processing -- what browsers use --, A-labels, the IPv4 number forms; a host with
a forbidden code point is no host) and drops trailing dots; IPv6 addresses are compressed.

Why sites: mail to ``boss@evil.example`` or ``x@mail.evil.example`` reaches the same owner as
``attacker@evil.example``. :func:`site_of` is a host's registrable domain ("eTLD+1") by the
Public Suffix List (the ``publicsuffixlist`` package, which ships the list: nothing is fetched
at run time), so ``mail.evil.example`` belongs to ``evil.example`` while ``shop.co.uk`` and
``bank.co.uk`` are two sites, as are ``a.github.io`` and ``b.github.io`` (the list's private
section: each is its own owner). A name outside any listed suffix (``evil.example``,
``localhost``) is read by the list's default rule: its last label is the suffix.
"""

from __future__ import annotations

import ipaddress
import re
from functools import cache
from urllib.parse import unquote

import idna
from publicsuffixlist import PublicSuffixList

__all__ = ["canonical_host", "site_of"]

#: WHATWG's forbidden domain code points: C0 controls, space, ``#%/:<>?@[\\]^|`` and DEL.
_FORBIDDEN = re.compile(r"[\x00-\x20#%/:<>?@\[\\\]^|\x7f]")
#: Dots UTS #46 maps to ``.`` (ideographic, full-width and half-width full stops).
_DOTS = re.compile("[\u3002\uff0e\uff61]")
_IPV4_PART = re.compile(r"^(?:0[xX][0-9a-fA-F]*|[0-9]+)$")


def canonical_host(text: str) -> str | None:
    """``text`` (a host as it stands in a URL or after an address's ``@``) as the WHATWG host
    parser reads it, lower case, A-labels, IPv4 dotted, IPv6 compressed, no trailing dot;
    ``None`` when that parser would refuse it."""
    raw = text.strip()
    bracketed = raw.startswith("[") and raw.endswith("]")
    if bracketed:
        raw = raw[1:-1]
    if bracketed or ":" in raw:  # only an IPv6 address is bracketed or holds a colon
        try:
            return ipaddress.IPv6Address(raw).compressed
        except ValueError:
            return None
    decoded = unquote(raw, errors="replace")
    try:
        mapped = idna.uts46_remap(_DOTS.sub(".", decoded), std3_rules=False, transitional=False)
    except idna.IDNAError:
        return None
    labels = mapped.split(".")
    ascii_labels: list[str] = []
    for label in labels:
        if label.isascii():
            if label.startswith("xn--") and not _punycode_ok(label):
                return None
            ascii_labels.append(label)
            continue
        try:
            ascii_labels.append("xn--" + label.encode("punycode").decode("ascii"))
        except UnicodeError:
            return None
    host = ".".join(ascii_labels)
    if not host.strip(".") or _FORBIDDEN.search(host):
        return None
    if _ends_in_number(host):
        return _ipv4(host)
    return host.rstrip(".")


def _punycode_ok(label: str) -> bool:
    try:
        label[4:].encode("ascii").decode("punycode")
    except UnicodeError:
        return False
    return True


def _ends_in_number(host: str) -> bool:
    """WHATWG's "ends in a number": the last label (one trailing dot aside) is digits or hex."""
    parts = host.split(".")
    if parts[-1] == "" and len(parts) > 1:
        parts.pop()
    last = parts[-1]
    return bool(last) and (last.isdigit() or (_IPV4_PART.match(last) is not None and last[:2].lower() == "0x"))


def _ipv4(host: str) -> str | None:
    """WHATWG's IPv4 parser: up to four parts, each decimal, ``0x`` hex or ``0``-led octal, the
    last filling the bytes left (``127.1``, ``2130706433``, ``0x7f.0.0.1``)."""
    parts = host.split(".")
    if parts[-1] == "" and len(parts) > 1:
        parts.pop()
    if len(parts) > 4:
        return None
    numbers: list[int] = []
    for part in parts:
        if not _IPV4_PART.match(part):
            return None
        if part[:2].lower() == "0x":
            numbers.append(int(part[2:] or "0", 16))
        elif len(part) > 1 and part.startswith("0"):
            if not re.fullmatch(r"[0-7]+", part):
                return None
            numbers.append(int(part, 8))
        else:
            numbers.append(int(part))
    if any(n > 255 for n in numbers[:-1]) or numbers[-1] >= 256 ** (5 - len(numbers)):
        return None
    value = numbers[-1]
    for i, n in enumerate(numbers[:-1]):
        value += n * 256 ** (3 - i)
    return str(ipaddress.IPv4Address(value))


@cache
def _psl() -> PublicSuffixList:
    """The list, parsed once (about 10,000 rules) on first use."""
    return PublicSuffixList()


def site_of(host: str) -> str:
    """The registrable domain of a canonical host (``mail.evil.example`` -> ``evil.example``,
    ``shop.co.uk`` -> ``shop.co.uk``); an IP address, or a host that is itself a public suffix,
    is its own site."""
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    site = _psl().privatesuffix(host)
    return site if isinstance(site, str) and site else host
