"""The web page of ``hippo-engine serve`` (issue 23): static files, no build step.

``index.html``, ``app.css`` and the scripts (``app.js``: helpers and start-up; ``search.js``,
``graph.js``, ``documents.js``, ``stats.js``: one view each) are plain HTML, CSS and JavaScript;
``vendor/`` holds the graph library (Cytoscape.js, minified, with its license; see
``vendor/README.txt``). The HTTP app serves :data:`WEB_DIR` at ``/`` and the page calls its JSON
API; nothing is fetched from elsewhere.
"""
from __future__ import annotations

from pathlib import Path

#: The folder with the page's files (served at ``/`` by :func:`hippo_engine.service.app.create_app`).
WEB_DIR = Path(__file__).parent

#: The files the page needs; the wheel ships them (package data in pyproject.toml).
FILES = ("index.html", "app.css", "app.js", "graph.js", "search.js", "documents.js", "stats.js",
         "vendor/cytoscape.min.js", "vendor/cytoscape.LICENSE", "vendor/README.txt")

__all__ = ["FILES", "WEB_DIR"]
