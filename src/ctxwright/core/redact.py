"""Credentials out of everything ctxwright prints or stores.

Why: a base URL may carry its credentials -- ``https://user:pass@host/v1`` (basic auth),
``?api-key=...`` (Azure OpenAI), ``?key=...`` (Google's OpenAI-compatible endpoint),
``?token=...`` / ``?access_token=...`` behind proxies. The URL ends up in error messages
(printed, and stored with the failed call in SQLite) and in the session's record, so one
pasted log or shared database would leak the key. :func:`redact` is the one function that
removes them; the OpenAI-compatible backend (``backends/openai_compat.py``) passes every
message it raises through it, and the store (``store/sessions.py``) every call error it writes.

What is kept: scheme, host, port, path and the names of the query parameters, so the
message still says *which* endpoint failed. What goes: the user-info part of a URL and the
value of every query parameter whose name looks like a credential.
"""

from __future__ import annotations

import re

#: What a redacted value is replaced with.
MASK = "***"

# user:password@ (or a lone token@) between "scheme://" and the host
_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.\-]*://)(?P<info>[^/\s@?#]+)@")
# name=value where name looks like a credential, in a query string or a fragment
_SECRET_PARAM = re.compile(
    r"(?P<lead>[?&#;])(?P<name>[^=&#\s?]*(?:key|token|secret|password|passwd|pwd|auth|sig|signature|"
    r"credential|session|code)[^=&#\s?]*)=(?P<value>[^&#\s\"'<>]*)",
    re.IGNORECASE,
)


def redact(text: str) -> str:
    """``text`` with every URL credential replaced by ``***`` (see the module docstring).

    Idempotent, and safe on any text: only ``scheme://user@`` and credential-named query
    parameters change.
    """
    if "@" not in text and "=" not in text:
        return text
    out = _USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@" if m["info"] != MASK else m[0], text)
    return _SECRET_PARAM.sub(lambda m: f"{m['lead']}{m['name']}={MASK}" if m["value"] else m[0], out)


def has_credentials(url: str) -> bool:
    """True when :func:`redact` would change ``url`` (it carries a credential)."""
    return redact(url) != url


def is_redacted(url: str) -> bool:
    """True when ``url`` had credentials that :func:`redact` replaced (it cannot be used as is)."""
    return f"{MASK}@" in url or f"={MASK}" in url


__all__ = ["MASK", "has_credentials", "is_redacted", "redact"]
