"""ctxwright under the agent frameworks people already use.

* ``recording.py``: every model call a framework makes, recorded and audited in process, through
  the ``openai`` SDK's own HTTP client (the proxy's recorder, no proxy), with a warning the first
  time a call changes the frozen prefix.
"""
