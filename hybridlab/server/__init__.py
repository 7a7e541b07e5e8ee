"""The MCP server."""
