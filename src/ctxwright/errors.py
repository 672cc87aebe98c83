"""The exceptions ctxwright raises. Each message says what was wrong and what to do.

Why one module: callers catch *our* types, never a provider's string (DESIGN.md,
complaint 7: context-window errors arrive as provider-specific strings).
"""

from __future__ import annotations


class CtxwrightError(Exception):
    """Base class of every error ctxwright raises on purpose."""


class PrefixFrozenError(CtxwrightError):
    """Something tried to change the static prefix after the session started."""


class BackendError(CtxwrightError):
    """A model backend failed in a way the caller should see."""


class BackendUnavailable(BackendError):
    """The backend cannot be reached or loaded (dead URL, missing model file)."""


class ContextWindowExceeded(BackendError):
    """The request does not fit the model's context window (any provider's wording)."""


class MalformedResponse(BackendError):
    """The backend answered, but not in a shape we can read."""


class SessionNotFound(CtxwrightError):
    """No session with that ID in the store."""


class EventFormatError(CtxwrightError, ValueError):
    """A stored or exported event whose payload does not have the shape of its kind."""


class StoreUnusable(CtxwrightError):
    """The database file cannot be used as a ctxwright store; it was left untouched."""


class NotADatabase(StoreUnusable):
    """The file is not an SQLite database (another program's file, or a damaged one)."""


class SchemaTooNew(StoreUnusable):
    """The database was written by a newer ctxwright, with migrations this build does not know."""


class ConfigError(CtxwrightError):
    """An option that cannot work as given (an unknown backend, a missing model name, a
    ``--tool`` spec that does not import); the message names the option and the fix."""


class PrefixMismatch(CtxwrightError):
    """The system prompt or tools given to continue a session differ from the prefix it was
    started with. Why refused: the model would be offered tools its recorded prefix never
    declared (or lose ones it did), and the provider's cache of that prefix would be lost."""
