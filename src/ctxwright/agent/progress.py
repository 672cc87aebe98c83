"""The agent loop's progress events with data of the layers above ``core``
(:class:`Compacted`, :class:`AssistantReply`, :class:`GateDecided`), under the name the
documentation gives them. They are defined in ``ctxwright/progress.py``, below both the
agent and the telemetry that reads them.
"""

from __future__ import annotations

from ctxwright.progress import AssistantReply, Compacted, GateDecided

__all__ = ["AssistantReply", "Compacted", "GateDecided"]
