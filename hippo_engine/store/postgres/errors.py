"""psycopg's errors become the engine's own at the store boundary.

:func:`guard_driver_errors` wraps every public method of a PostgreSQL store class (and the
context managers and generators they return) so that a ``psycopg.Error`` leaves it as a
:class:`~hippo_engine.store.base.StoreError` that says what happened and what to do: a server
that went away (:class:`~hippo_engine.store.base.StoreConnectionLost`: open the index again), a
value over one of PostgreSQL's limits, anything else with the server's own message. libpq's
messages pass through :func:`hippo_engine.dsn.scrub`, so no password reaches a message.
"""
from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable

from hippo_engine.dsn import redact_dsn, scrub
from hippo_engine.store.base import StoreConnectionLost, StoreError

#: SQLSTATE classes of a connection that is gone: 08 connection exception, 57P operator
#: intervention (admin or crash shutdown, cannot connect now)
_GONE_STATES = ("08", "57P")
#: methods (besides the public ones) that talk to the database
_DUNDERS = ("__init__", "__len__", "__contains__")


def _psycopg_error_class():
    try:
        import psycopg
    except ImportError:
        return None
    return psycopg.Error


def server_text(err: BaseException, dsn: str | None = None) -> str:
    """The server's (or libpq's) message of ``err``, one line, password-safe."""
    diag = getattr(err, "diag", None)
    text = (getattr(diag, "message_primary", None) or str(err) or type(err).__name__).strip()
    return scrub(" ".join(text.split()), dsn)


def connection_gone(err: BaseException, conn=None) -> bool:
    """Whether ``err`` means the connection to the server is lost (or was closed)."""
    import psycopg
    state = getattr(err, "sqlstate", None) or ""
    if state.startswith(_GONE_STATES):
        return True
    closed = conn is not None and getattr(conn, "closed", False)
    return isinstance(err, (psycopg.OperationalError, psycopg.InterfaceError)) and (closed or not state)


def translate(err: BaseException, location: str, conn=None, dsn: str | None = None) -> StoreError:
    """The engine's error for the driver error ``err`` raised on the index at ``location``."""
    import psycopg
    text = server_text(err, dsn)
    if connection_gone(err, conn):
        return StoreConnectionLost(
            f"{location}: the PostgreSQL server went away or the connection broke ({text}); a write in "
            "progress was not committed. This object cannot be used any more: open the index again (a new "
            "HippoRAG) once the server is reachable.")
    if isinstance(err, psycopg.errors.ProgramLimitExceeded):
        return StoreError(f"{location}: a value is over one of PostgreSQL's limits ({text}); nothing of this "
                          "write was committed. Document ids are limited to 1,024 UTF-8 bytes.")
    if isinstance(err, psycopg.DataError):
        return StoreError(f"{location}: PostgreSQL refused a value ({text}); nothing of this write was committed.")
    return StoreError(f"{location}: PostgreSQL error {type(err).__name__} ({text})")


def connect_error(err: BaseException, dsn: str, schema: str) -> StoreError:
    """The error for a failed connection to ``dsn`` (shown redacted; libpq's text scrubbed)."""
    return StoreError(f"cannot connect to the PostgreSQL server at {redact_dsn(dsn)} for index schema {schema}: "
                      f"{server_text(err, dsn)}")


def _context(obj) -> tuple[str, object, str | None]:
    """(location, connection, dsn) of a store object (an index store or one of its embedding stores)."""
    db = obj if hasattr(obj, "dsn") else getattr(obj, "db", None)
    location = getattr(db, "location", None) or "the PostgreSQL index"
    return location, getattr(db, "conn", None), getattr(db, "dsn", None)


def _raise_translated(err: BaseException, owner) -> None:
    """Raise the engine's error for ``err`` if it is a driver error (else return)."""
    base = _psycopg_error_class()
    if base is not None and isinstance(err, base):
        location, conn, dsn = _context(owner)
        raise translate(err, location, conn, dsn) from err


class _GuardedContext:
    """A context manager whose enter and exit raise the engine's errors, not psycopg's."""

    def __init__(self, inner, owner):
        self._inner, self._owner = inner, owner

    def __enter__(self):
        try:
            return self._inner.__enter__()
        except Exception as e:  # noqa: BLE001 - only driver errors are translated
            _raise_translated(e, self._owner)
            raise

    def __exit__(self, *exc):
        try:
            return self._inner.__exit__(*exc)
        except Exception as e:  # noqa: BLE001
            _raise_translated(e, self._owner)
            raise


def _guarded_generator(gen, owner):
    try:
        return (yield from gen)
    except Exception as e:  # noqa: BLE001
        _raise_translated(e, owner)
        raise


def _guard(fn: Callable) -> Callable:
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        try:
            out = fn(self, *args, **kwargs)
        except Exception as e:  # noqa: BLE001 - a try costs nothing when nothing is raised
            _raise_translated(e, self)
            raise
        if isinstance(out, types.GeneratorType):
            return _guarded_generator(out, self)
        if hasattr(out, "__exit__") and not hasattr(out, "execute"):
            return _GuardedContext(out, self)
        return out
    wrapper.__guarded__ = True  # type: ignore[attr-defined]  # a marker on the function object
    return wrapper


def guard_driver_errors(*, skip: tuple[str, ...] = ()):
    """Class decorator: every public method (and ``__init__``, ``__len__``, ``__contains__``),
    inherited ones included, raises :class:`StoreError` instead of a ``psycopg.Error``."""
    def decorate(cls):
        for name in dir(cls):
            if name in skip or (name.startswith("_") and name not in _DUNDERS):
                continue
            raw = inspect.getattr_static(cls, name)
            if inspect.isfunction(raw) and not getattr(raw, "__guarded__", False):
                setattr(cls, name, _guard(raw))
        return cls
    return decorate


__all__ = ["connect_error", "connection_gone", "guard_driver_errors", "server_text", "translate"]
