"""ctxwright: context engineering for LLM agents -- a frozen prefix, an append-only
trajectory, and an audit of every model call."""

__version__ = "0.1.0"
