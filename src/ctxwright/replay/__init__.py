"""Answering an agent from a recording: ``ctxwright replay serve GOLDEN``.

``golden.py`` loads the recording (a request log, a proxy session or a stored session) into
conversations of calls, each with the reply it got (``turns.py``); ``server.py`` serves the
three model APIs on loopback, places every request in the recording (``matching.py``), refuses
what the providers refuse (``validate.py``) and answers the recorded reply in the API's own
shape (``answers.py``), recording a trace that ``ctxwright audit`` reads.
"""

from __future__ import annotations
