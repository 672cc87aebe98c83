"""``ctxwright report``: one self-contained HTML file per session, log or proxy session.

``data.py`` gathers what a report shows from a stored session, a request log or request
records; ``html.py`` draws it (Plotly, embedded) into one file that opens offline, in the
page shell of ``page.py`` (which the attention page shares).
"""

from ctxwright.report.data import ReportData, from_log, from_proxy, from_requests, from_store
from ctxwright.report.html import render_html, write_report

__all__ = ["ReportData", "from_log", "from_proxy", "from_requests", "from_store", "render_html", "write_report"]
