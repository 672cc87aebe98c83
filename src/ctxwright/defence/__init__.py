"""Defences against prompt injection: what separates the data tools bring in from the
instructions the model was given, and what code must stop when the model is fooled anyway.

One rule per module, each saying which model behaviour it protects against:

* ``marking.py`` -- untrusted results wrapped as ``<external_content>``, tags inside them
  neutralised, the tags explained once in the system prompt;
* ``sanitize.py`` -- invisible characters, chat-template control tokens and fake role
  headers taken out of untrusted results, with what changed recorded;
* ``levels.py`` -- the defence levels D1..D5 of the book's experiment 2-5, one switch.

Which tool is untrusted and what it does is declared on the tool (``tools/registry.py``:
``Tool.trust``, ``Tool.effects``). The layer sits above ``tools`` (it reads those
declarations) and below ``compaction`` and ``agent``, which apply it where results are
recorded.
"""

from ctxwright.defence.levels import BOOK_NAMES, DEFAULT_LEVEL, LEVELS, Features, Level, features
from ctxwright.defence.marking import TAGS_SECTION, neutralise, unwrap, wrap
from ctxwright.defence.sanitize import Sanitized, sanitize

__all__ = [
    "BOOK_NAMES",
    "DEFAULT_LEVEL",
    "LEVELS",
    "TAGS_SECTION",
    "Features",
    "Level",
    "Sanitized",
    "features",
    "neutralise",
    "sanitize",
    "unwrap",
    "wrap",
]
