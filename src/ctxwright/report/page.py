"""The one HTML page ctxwright's views are drawn into: the report (``report/html.py``) and the
attention page (``attention/view.py``) render through this module, so both get the same shell.

Why one shell: a page is looked at after the fact, often on another machine or attached to a
bug report, and must open without network access. So plotly.js is embedded once per page (no
CDN), each chart's figure sits in the page as JSON, and a ``Content-Security-Policy`` of
``default-src 'none'`` forbids every fetch (``templates/page.html.j2``) -- a page that tried to
load anything would show it as a console error, which the Chromium tests look for.

Everything shown is untrusted text (a message, a token, a span label may hold ``<script>``):
the templates are Jinja2 with autoescape, each figure's JSON is written by
:func:`script_json` with ``<``, ``>`` and ``&`` as ``\\u`` escapes, so no string can end its
``<script>`` element, and :func:`plotly_text` keeps markup in a chart's labels as text.
"""

from __future__ import annotations

import errno
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

from ctxwright.errors import CtxwrightError
from ctxwright.store.private import open_private


@dataclass(frozen=True)
class Chart:
    """A chart's element id and its figure as JSON safe inside a ``<script>`` element."""

    id: str
    title: str
    json: str
    #: drawn across the whole width of the page (a per-token strip), not in the two-column grid
    wide: bool = False


def script_json(fig: go.Figure) -> str:
    """The figure as JSON that cannot end the ``<script>`` element it is written into."""
    text = pio.to_json(fig, validate=False, engine="json")
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def plotly_text(text: str) -> str:
    """``text`` for a Plotly label or hover text, shown as written.

    Plotly reads its strings as a small HTML subset (``<b>``, ``<br>``, ``<a href>``) and
    decodes entities; a token or label holding markup would be drawn as markup. Escaped as
    entities, it is drawn as the characters it holds."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def fmt(v: Any) -> str:
    if v is None:
        return "?"
    if isinstance(v, float):
        return f"{v:,.1f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def money(v: float | None) -> str:
    return "" if v is None else f"{v:,.4f}"


def pct(v: float | None) -> str:
    return "?" if v is None else f"{v:.1%}"


def when(t: float | None) -> str:
    return "" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def short(text: str, n: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def visible(text: str) -> str:
    """Text on one line: newlines and tabs shown, not obeyed."""
    return text.replace("\r", "␍").replace("\n", "⏎").replace("\t", "⇥")


ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("ctxwright.report", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
ENV.filters.update(n=fmt, money=money, pct=pct, when=when, short=short, visible=visible)


def render_page(template: str, *, charts: int, **context: Any) -> str:
    """``template`` (a child of ``page.html.j2``) as one HTML document with plotly.js in it.
    ``charts``: how many figures the page draws (the page counts them as it draws, for tests)."""
    return ENV.get_template(template).render(
        plotlyjs=get_plotlyjs(),
        charts=charts,
        generated=time.strftime("%Y-%m-%d %H:%M:%S", time.localtime()),
        **context,
    )


def write_page(text: str | bytes, path: str | Path, what: str) -> Path:
    """Write a rendered page (or an image of one, as bytes) to ``path`` (its folder must exist); returns the path written.

    The file is ``0600``, as the database is (``store/private.py``): a page holds the
    session's messages and tool results, which the default umask would let every local user
    read. A file that cannot be written (a full disk, ``/dev/full``, a symlink, which is not
    followed) is a :class:`~ctxwright.errors.CtxwrightError` naming it (``what``: "the report").
    """
    out = Path(path).expanduser()
    data = text.encode("utf-8") if isinstance(text, str) else text
    try:
        with open_private(out) as f:
            f.write(data)
    except OSError as exc:
        why = "it is a symbolic link, which is not followed" if exc.errno == errno.ELOOP else exc.strerror or exc
        raise CtxwrightError(
            f"cannot write {what} to {out}: {why}; give a writable file in an existing folder"
        ) from None
    return out


__all__ = ["ENV", "Chart", "plotly_text", "render_page", "script_json", "write_page"]
