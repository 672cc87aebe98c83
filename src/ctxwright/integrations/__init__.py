"""ctxwright under the agent frameworks people already use.

* ``recording.py``: every model call a framework makes, recorded and audited in process, through
  the ``openai`` SDK's own HTTP client (the proxy's recorder, no proxy), with a warning the first
  time a call changes the frozen prefix.
* ``compaction.py``: one compactor for every framework's message list (rarely and deeply, the
  invariants kept, a loss ledger), and the tail reminder that dynamic instructions move to.
* ``langchain.py``: a LangChain v1 ``ChatOpenAI`` recorded by ``recording.py``, and middleware for
  ``create_agent`` that keeps the system prompt frozen (what a dynamic prompt changed appended) and compacts.
* ``pydantic_ai.py``: pydantic-ai's ``OpenAIChatModel`` recorded by ``recording.py``, warning about
  its dynamic instructions (a later system message) with pydantic-ai's own fix, ``on_change="append"``.
* ``openai_agents.py``: an Agents SDK ``ModelProvider`` whose calls ``recording.py`` records, and
  ``call_model_input_filter``s that freeze dynamic instructions (the change appended) and compact.
* ``deferred.py``: a framework agent's many tools behind ctxwright's own ``search_tools`` and
  ``call_tool`` (the registry, the index and the errors of ``tools/deferred.py``).
* ``status.py``: the status bar for a framework agent (calls per tool, the last error, the
  budget, the time), added at the end of each request by the recorder, earlier ones kept in place.
"""
