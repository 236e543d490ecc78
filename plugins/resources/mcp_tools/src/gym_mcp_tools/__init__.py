"""The tools of any MCP server (stdio or HTTP) as an environment's tools, verified by a row-supplied rule."""
