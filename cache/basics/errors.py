"""Every error the cache raises on bad input derives from CacheError.

A call that raises one of these has changed nothing: the cache validates before it
mutates, so the workbench can report the error and carry on with the same state.
"""


class CacheError(Exception):
    """Base class: a bad call, reported clearly, with the cache left intact."""


class InvalidKeyError(CacheError, ValueError):
    """Token ids that are not non-negative ints, or a malformed key."""


class InvalidValueError(CacheError, ValueError):
    """A value tensor of the wrong length, dtype or device."""


class ReferenceAssertsError(CacheError):
    """A call SGLang 0.5.23 answers with an assert (a server would crash there); ours
    refuses it, keeping only what SGLang did before the assert (a request's match, a
    checkpoint's insert on the path it already holds), and names the assert."""


class LockError(CacheError):
    """Unlock without lock, a receipt released twice or on another node."""


class StorageDirError(CacheError, ValueError):
    """A directory the file storage backend may not use (not its own, a symlink, a
    file, unwritable): refused with nothing created or removed."""


class PoolError(CacheError):
    """Base class for allocator misuse."""


class PoolExhaustedError(PoolError):
    """An allocation larger than what is free (after eviction, if any); ``pool`` names
    the component whose pool it was, where known."""

    def __init__(self, message: str = "", pool: str | None = None) -> None:
        super().__init__(message)
        self.pool = pool


class DoubleFreeError(PoolError):
    """Freeing a slot that is already free."""


class ForeignIndexError(PoolError):
    """Freeing an index outside the pool, or of the wrong dtype or device."""


class UnknownNodeError(CacheError, KeyError):
    """A node id that is not (or no longer) in the tree."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else "unknown node"


class StateSlotsAssertError(ReferenceAssertsError, PoolExhaustedError):
    """A request's own state slots (Mamba's) that eviction cannot free: SGLang 0.5.23's
    req_to_token pool asserts; ours refuses the admission with nothing changed."""
