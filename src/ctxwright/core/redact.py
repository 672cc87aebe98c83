"""Credentials out of everything ctxwright prints or stores.

Why: a base URL may carry its credentials -- ``https://user:pass@host/v1`` (basic auth),
``?api-key=...`` (Azure OpenAI), ``?key=...`` (Google's OpenAI-compatible endpoint),
``?token=...`` / ``?access_token=...`` behind proxies. The URL ends up in error messages
(printed, and stored with the failed call in SQLite) and in the session's record, so one
pasted log or shared database would leak the key. :func:`redact` is the one function that
removes them; the OpenAI-compatible backend (``backends/openai_compat.py``) passes every
message it raises through it, and the store (``store/sessions.py``) every call error it writes.
:func:`redact_query` is the same rule for a request path of known shape: ``ctxwright proxy``
stores the path of every request it relays (``proxy/store.py``), and a client configured with
its key in the URL sends it there on every call.

What is kept: scheme, host, port, path and the names of the query parameters, so the
message still says *which* endpoint failed. What goes: the user-info part of a URL and the
value of every query parameter whose name looks like a credential (:func:`is_secret_name`,
the one list of such names). A name is judged percent-decoded, as the server that reads it
decodes it: ``?k%65y=...`` is a ``key`` too.
"""

from __future__ import annotations

import re
from urllib.parse import unquote_plus

#: What a redacted value is replaced with.
MASK = "***"

# user:password@ (or a lone token@) between "scheme://" and the host
_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.\-]*://)(?P<info>[^/\s@?#]+)@")
# a parameter name that looks like a credential: key, api-key, api_key, apikey, x-api-key,
# token, access_token, client_secret, password, auth, sig (a signed URL), session, code (OAuth)
_SECRET_NAME = re.compile(r"key|token|secret|password|passwd|pwd|auth|sig|credential|session|code", re.IGNORECASE)
# name=value in a query string or a fragment (the name is judged by is_secret_name)
_PARAM = re.compile(r"(?P<lead>[?&#;])(?P<name>[^=&#\s?]*)=(?P<value>[^&#\s\"'<>]*)")


def redact(text: str) -> str:
    """``text`` with every URL credential replaced by ``***`` (see the module docstring).

    Idempotent, and safe on any text: only ``scheme://user@`` and credential-named query
    parameters change.
    """
    if "@" not in text and "=" not in text:
        return text
    out = _USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@" if m["info"] != MASK else m[0], text)
    return _PARAM.sub(
        lambda m: f"{m['lead']}{m['name']}={MASK}" if m["value"] and is_secret_name(m["name"]) else m[0], out
    )


def scrub_secret(exc: BaseException, secret: str) -> BaseException:
    """``exc`` and every exception it was raised from with ``secret`` masked in their messages.

    Why: a server may echo the API key it was sent in its error body ("invalid key sk-...");
    the backend quotes the provider's words, and ``--debug`` prints the whole chain. Keys
    shorter than 8 characters (placeholders) are left alone."""
    if len(secret) < 8:
        return exc
    seen: list[BaseException] = []
    inner: BaseException | None = exc
    while inner is not None and inner not in seen:
        seen.append(inner)
        inner.args = tuple(a.replace(secret, MASK) if isinstance(a, str) else a for a in inner.args)
        if hasattr(inner, "message") and isinstance(inner.message, str):
            inner.message = inner.message.replace(secret, MASK)
        inner = inner.__cause__ or inner.__context__
    return exc


def is_secret_name(name: str) -> bool:
    """True when a query parameter called ``name`` carries a credential (judged percent-decoded)."""
    return _SECRET_NAME.search(unquote_plus(name)) is not None


def redact_query(path: str) -> str:
    """A request target (``/v1/chat/completions?key=...``) with the value of every
    credential-named query parameter replaced by ``***``; the path and the other parameters
    are kept byte for byte.

    Unlike :func:`redact`, which must find a URL's end inside free text, this knows the whole
    string is one path: a value runs to the next ``&`` or ``;`` (both separate parameters on
    some servers) whatever it holds, so a quote or a space in it cannot end the mask early. A
    stray ``?`` or ``#`` also starts a new parameter here: a mask too many is harmless, a
    ``?key=`` hidden behind one is not.
    """
    head, sep, query = path.partition("?")
    if not sep:
        return path
    parts = re.split(r"([&;?#])", query)
    for i in range(0, len(parts), 2):
        name, eq, value = parts[i].partition("=")
        if eq and value and value != MASK and is_secret_name(name):
            parts[i] = f"{name}={MASK}"
    return f"{head}?{''.join(parts)}"


def has_credentials(url: str) -> bool:
    """True when :func:`redact` would change ``url`` (it carries a credential)."""
    return redact(url) != url


def is_redacted(url: str) -> bool:
    """True when ``url`` had credentials that :func:`redact` replaced (it cannot be used as is)."""
    return f"{MASK}@" in url or f"={MASK}" in url


__all__ = ["MASK", "has_credentials", "is_redacted", "is_secret_name", "redact", "redact_query", "scrub_secret"]
