"""Compaction without an LLM, cheapest layer first, and the invariants every layer keeps.

One module per rule or layer:

* invariants -- :mod:`.pairing`, :mod:`.batches`, :mod:`.reasoning_loops`, :mod:`.pinned`,
  combined in :mod:`.cutpoints` (where a span may be cut) and :mod:`.check` (what a view
  must satisfy); :mod:`.skills` (an activated skill's instructions are never rewritten, and
  re-attached or named when turns are dropped);
* layer 1 -- :mod:`.budget` (a cap per tool result) with :mod:`.offload` (the full text on
  disk) and :mod:`.retrieval` (the ``read_result`` tool that pages it back);
* layer 2 -- :mod:`.noise` (repeated and unused results become one-line markers);
* layer 3 -- :mod:`.clearing` (old results beyond the newest K become placeholders);
* last resort -- :mod:`.trim` (drop the oldest whole units when nothing else fits);
* :mod:`.pipeline` lists the layers as tiers in the order they run (``tiers_for``, from
  :class:`CompactionConfig`) and holds the one step that checks, records and measures each;
  :mod:`.manager` runs that list before each model call; :mod:`.hooks` lets the user's
  ``before_compaction`` veto or edit a plan and ``after_compaction`` read its report, bounded.

Every layer records a ``compaction`` event; nothing already stored is ever edited.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ctxwright.compaction.config import CompactionConfig

if TYPE_CHECKING:
    from ctxwright.compaction.manager import ContextManager
    from ctxwright.compaction.pipeline import CompactionReport

__all__ = ["CompactionConfig", "CompactionReport", "ContextManager"]

#: Loaded on first use (PEP 562): the options only need the config, and importing the
#: manager brings every layer (and the tools they register) into ``ctxwright --help``.
_LAZY = {"ContextManager": "ctxwright.compaction.manager", "CompactionReport": "ctxwright.compaction.pipeline"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
