"""Memory as a service: the HTTP API and web page (FastAPI) and the MCP server over one index.

Optional: ``pip install 'hippo-engine[server]'``. See ``hippo-engine serve`` and ``hippo-engine mcp``.
"""
