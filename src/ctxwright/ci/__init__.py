"""Judging an agent's requests against a recording, for CI: the frozen prefix cut into named
segments and diffed (``segments.py``), and the ``ctxwright.lock`` of it (``lock.py``)."""
