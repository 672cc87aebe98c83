"""Where a model's attention goes over the context it was sent.

``capture.py`` reads llama.cpp's softmaxed attention while the model re-reads a request and
the answer it gave; ``spans.py`` maps the prompt's tokens to messages, status-bar lines and
system-prompt sections; ``shares.py`` turns the two into an :class:`~ctxwright.attention.model.AttentionMap`
(``model.py``), which the views (``view.py``) draw and ``ctxwright attention`` prints.
"""
