"""Fixtures of the HTTP unit tests: the fake workspaces (``http_fakes``) and a client of the app over them.
A test module that needs other settings (limits, a key) defines its own ``ws``/``client``."""
import pytest
from http_fakes import FakeWorkspaces, make_client


@pytest.fixture
def ws():
    return FakeWorkspaces()


@pytest.fixture
def client(ws):
    with make_client(ws) as c:
        yield c
