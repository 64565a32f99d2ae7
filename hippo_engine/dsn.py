"""PostgreSQL connection strings in messages: :func:`redact_dsn` masks their passwords.

Works on any text that was meant as a DSN, parsable or not (a refused scheme such as
``postgresql+psycopg://user:pw@host/db``, a key=value string libpq cannot parse), without the
driver: every message that shows a DSN shows ``redact_dsn(dsn)``, never the DSN itself, and
never libpq's own parse message when the DSN holds a password (it can quote a fragment of it).
"""
from __future__ import annotations

import re

MASK = "***"

# scheme://user:password@host... (the authority ends at the first / ? #; a password may hold '@':
# the last '@' before the host ends the user info, as libpq reads it)
_URL_USERINFO = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^:/?#@]*):(?P<pw>[^/?#]*)@")
# password=... (or sslpassword=...) in a URL's query string
_URL_QUERY_PW = re.compile(r"(?P<key>[?&](?:ssl)?password=)[^&#]*", re.IGNORECASE)
# key=value: a quoted value (possibly unterminated), else everything up to the next ``word=`` (a
# malformed value such as ``password=se cret host=x`` is masked whole, not just ``se``)
_KV_PW = re.compile(r"(?P<key>\b(?:ssl)?password\s*=\s*)(?:'(?:[^'\\]|\\.)*(?:'|$)|.*?(?=\s+[A-Za-z_]+\s*=|$))",
                    re.IGNORECASE | re.DOTALL)


def is_url(dsn: str) -> bool:
    """Whether ``dsn`` has the URL form (``scheme://...``), whatever the scheme."""
    return re.match(r"^[A-Za-z][A-Za-z0-9+.\-]*://", dsn) is not None


def redact_dsn(dsn: str | None) -> str:
    """``dsn`` with every password replaced by ``***`` (URL user info and ``password=`` query
    parameters; ``password=`` / ``sslpassword=`` in key=value strings). Safe on malformed DSNs."""
    if dsn is None:
        return "None"
    text = str(dsn)
    if is_url(text):
        text = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text, count=1)
        return _URL_QUERY_PW.sub(lambda m: m["key"] + MASK, text)
    return _KV_PW.sub(lambda m: m["key"] + MASK, text)


def has_password(dsn: str | None) -> bool:
    """Whether ``dsn`` holds a password (then a driver's message about it must not be shown)."""
    return dsn is not None and redact_dsn(dsn) != str(dsn)


def scrub(message: str, dsn: str | None) -> str:
    """``message`` (a driver's text about ``dsn``) safe to show: the DSN itself is replaced by its
    redacted form; if the DSN holds a password and the text still shares any three characters in
    a row with it (libpq quotes fragments of a DSN it cannot parse), only a generic note remains."""
    if dsn is None or not has_password(dsn):
        return message
    message = message.replace(str(dsn), redact_dsn(dsn))
    for pw in _passwords(str(dsn)):
        if pw in message or any(pw[i:i + 3] in message for i in range(len(pw) - 2)):
            return "(the driver's message is withheld: it could quote the password)"
    return message


def _passwords(dsn: str) -> list[str]:
    """The password texts in ``dsn`` (for :func:`scrub`)."""
    found = []
    m = _URL_USERINFO.match(dsn) if is_url(dsn) else None
    if m:
        found.append(m["pw"])
    for km in (_URL_QUERY_PW if is_url(dsn) else _KV_PW).finditer(dsn):
        found.append(dsn[km.end("key"):km.end()].strip("'"))
    return [pw for pw in found if pw]


__all__ = ["MASK", "has_password", "redact_dsn", "scrub"]
