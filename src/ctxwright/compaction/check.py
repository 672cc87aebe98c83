"""Every invariant at once, for tests, benchmarks and a debug assertion before each call."""

from __future__ import annotations

from collections.abc import Collection

from ctxwright.compaction.pairing import pairing_violations
from ctxwright.compaction.pinned import pinned_violations
from ctxwright.compaction.reasoning_loops import reasoning_violations
from ctxwright.core.messages import Message


def violations(
    recorded: list[Message],
    view: list[Message],
    catalogs: Collection[Message] = (),
    pins: Collection[Message] = (),
) -> list[str]:
    """What is wrong with ``view`` (the trajectory to send, system message excluded) given
    the ``recorded`` trajectory it was rendered from; ``catalogs``: the session's skills catalog
    messages (``pinned.catalog_messages``); ``pins``: its pinned messages as recorded
    (``pins.pinned_messages``), each of which the view must still show. Empty: the request is valid."""
    return [
        *pairing_violations(view),
        *reasoning_violations(view),
        *pinned_violations(recorded, view, catalogs, pins),
    ]
