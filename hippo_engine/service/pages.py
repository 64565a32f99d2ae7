"""The app's two non-JSON surfaces: ``/docs``, a page that describes the OpenAPI schema (written
here, plain HTML: FastAPI's own pages load Swagger UI from a CDN, and the server works offline),
and the web page's static files (:func:`install_files`, only the files the page lists)."""
from __future__ import annotations

import html
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.responses import FileResponse, HTMLResponse
from starlette.requests import Request
from starlette.routing import Route

METHODS = ("get", "post", "put", "patch", "delete")
STYLE = ("body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}"
         "h2{border-bottom:1px solid #ccc}.op{margin:1rem 0;padding:.5rem 1rem;border-left:4px solid #68a}"
         ".m{font-weight:bold;text-transform:uppercase;margin-right:.5rem}code,pre{background:#f4f4f4}"
         "pre{padding:.5rem;overflow-x:auto}td{padding:0 .6rem;vertical-align:top}")


def _e(text: Any) -> str:
    return html.escape(str(text))


def _schema_ref(schema: dict[str, Any] | None) -> str:
    """A schema named by its component link, or shown inline."""
    if not schema:
        return ""
    ref = schema.get("$ref") or (schema.get("items") or {}).get("$ref")
    if ref:
        name = ref.rsplit("/", 1)[-1]
        shown = f"array of {name}" if "items" in schema else name
        return f'<a href="#schema-{_e(name)}">{_e(shown)}</a>'
    return f"<code>{_e(json.dumps(schema))}</code>"


def _parameters(op: dict[str, Any]) -> str:
    rows = [f"<tr><td><code>{_e(p['name'])}</code></td><td>{_e(p['in'])}{' (required)' if p.get('required') else ''}"
            f"</td><td>{_schema_ref(p.get('schema'))}</td><td>{_e(p.get('description', ''))}</td></tr>"
            for p in op.get("parameters", ())]
    return f"<table>{''.join(rows)}</table>" if rows else ""


def _body(op: dict[str, Any]) -> str:
    content = (op.get("requestBody") or {}).get("content") or {}
    return "".join(f"<p>body ({_e(media)}): {_schema_ref(c.get('schema'))}</p>" for media, c in content.items())


def _responses(op: dict[str, Any]) -> str:
    items = []
    for status, r in op.get("responses", {}).items():
        schemas = [_schema_ref(c.get("schema")) for c in (r.get("content") or {}).values()]
        items.append(f"<li><b>{_e(status)}</b> {_e(r.get('description', ''))} {' / '.join(s for s in schemas if s)}"
                     "</li>")
    return f"<ul>{''.join(items)}</ul>"


def render(spec: dict[str, Any]) -> str:
    """The HTML page of an OpenAPI document."""
    info = spec.get("info", {})
    parts = [f"<!doctype html><meta charset=utf-8><title>{_e(info.get('title', 'API'))} API</title>"
             f"<style>{STYLE}</style><h1>{_e(info.get('title', ''))} {_e(info.get('version', ''))}</h1>",
             f"<p>{_e(info.get('description', ''))}</p><p>Machine-readable: <a href=\"openapi.json\">openapi.json"
             "</a></p><h2>Routes</h2>"]
    for path, item in spec.get("paths", {}).items():
        for method in METHODS:
            op = item.get(method)
            if op is None:
                continue
            locked = " (access key)" if op.get("security") else ""
            parts.append(f"<div class=op><p><span class=m>{method}</span><code>{_e(path)}</code> "
                         f"{_e(op.get('summary', ''))}{locked}</p><p>{_e(op.get('description', ''))}</p>"
                         f"{_parameters(op)}{_body(op)}{_responses(op)}</div>")
    parts.append("<h2>Schemas</h2>")
    for name, schema in spec.get("components", {}).get("schemas", {}).items():
        parts.append(f"<h3 id=\"schema-{_e(name)}\">{_e(name)}</h3><pre>{_e(json.dumps(schema, indent=1))}</pre>")
    return "".join(parts)


def install_docs(app: FastAPI) -> None:
    """``GET /docs``: the page of the app's OpenAPI schema."""
    async def docs(request: Request) -> HTMLResponse:
        return HTMLResponse(render(app.openapi()))

    app.router.routes.append(Route("/docs", docs, methods=["GET"], include_in_schema=False))


def install_files(app: FastAPI, folder: Path, files: Iterable[str]) -> set[str]:
    """``GET /`` (``index.html``) and ``GET /<file>`` for each of ``files`` in ``folder``, nothing else;
    returns the paths served."""
    def serve(path: Path):
        async def endpoint(request: Request) -> FileResponse:
            return FileResponse(path)
        return endpoint

    paths = {"/": folder / "index.html"} | {f"/{name}": folder / name for name in files if (folder / name).is_file()}
    for path, file in paths.items():
        app.router.routes.append(Route(path, serve(file), methods=["GET"], include_in_schema=False))
    return set(paths)
