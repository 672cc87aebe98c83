"""OpenTelemetry export (``--otlp URL``, ``Harness(otlp=...)``; the ``otel`` extra): what
ctxwright records about each call, sent as traces to any OTLP/HTTP collector (an OpenTelemetry
collector, Jaeger, Phoenix...), so an agent's calls show up where the rest of a system's traces are.

One module per concern:

* :mod:`.attributes` -- every span's attributes, pure functions of the typed records
  (``CallRecord``, tool calls, ``CompactionReport``, a proxy exchange): the GenAI semantic
  conventions' ``gen_ai.*`` and ctxwright's ``ctxwright.*`` (cache audit, ledger, compaction);
* :mod:`.content` -- the messages, tool arguments and results, only with ``otlp_content``,
  bounded so they stay valid JSON;
* :mod:`.exporter` -- the SDK (imported only here, only when asked), a bounded batch queue, short
  export timeouts, errors logged once, a bounded close;
* :mod:`.spans` -- the harness's progress events as one trace per run;
* :mod:`.exchanges` -- the proxy's recorded calls, one trace each.

Layer: beside ``agent`` and ``proxy`` (``tests/test_layering.py``), whose events and recorded
exchanges it reads; the wiring (``agent/wiring.py``) opens it for a ``Harness`` or ``Context``,
``cli/proxy.py`` for ``ctxwright proxy``. Nothing below it knows it exists.
"""

from __future__ import annotations

from ctxwright.recipe.options import TelemetryOptions
from ctxwright.telemetry.exporter import Exporter, endpoint_of

__all__ = ["Exporter", "endpoint_of", "open_exporter"]


def open_exporter(options: TelemetryOptions) -> Exporter | None:
    """The exporter ``options`` ask for (``None``: ``otlp`` not given). Raises
    :class:`~ctxwright.errors.TelemetryUnavailable` -- one line naming the extra -- when the
    OpenTelemetry SDK is not installed, before anything else is started."""
    if options.otlp is None:
        return None
    return Exporter(endpoint_of(options.otlp))
