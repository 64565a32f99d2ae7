"""DSNs in messages: :func:`hippo_engine.dsn.redact_dsn` masks every password, parsable or not."""
from __future__ import annotations

import pytest

from hippo_engine.dsn import redact_dsn, scrub


@pytest.mark.parametrize("dsn, shown", [
    ("postgresql+psycopg://user:pw@host/db", "postgresql+psycopg://user:***@host/db"),
    ("postgresql://u:p@ss@h:5432/db?sslmode=require", "postgresql://u:***@h:5432/db?sslmode=require"),
    ("postgres://:only@h/db", "postgres://:***@h/db"),
    ("postgresql://h/db?user=u&password=sec&x=1", "postgresql://h/db?user=u&password=***&x=1"),
    ("host=h password=se cret dbname=x", "host=h password=*** dbname=x"),
    ("host=h password = 'a b=c' user=u sslpassword=k2", "host=h password = *** user=u sslpassword=***"),
    ("password='unterminated host=x", "password=***"),
    ("postgresql://u@h/db", "postgresql://u@h/db"),
    ("host=h dbname=d", "host=h dbname=d"),
])
def test_redact_dsn_masks_passwords_in_every_form(dsn, shown):
    assert redact_dsn(dsn) == shown


def test_scrub_withholds_a_driver_message_quoting_part_of_the_password():
    dsn = "host=h password=se cretpart dbname=x"
    assert "cret" not in scrub('missing "=" after "cretpart" in connection info string', dsn)
    assert scrub("connection refused", dsn) == "connection refused"
    assert scrub(f"bad dsn {dsn}", "host=h dbname=x") == f"bad dsn {dsn}"          # no password: unchanged
    assert scrub("x postgresql://u:pw12@h/db y", "postgresql://u:pw12@h/db") == "x postgresql://u:***@h/db y"
