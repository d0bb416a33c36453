"""Small MCP servers, written with the official SDK, that the MCP tests start."""
