"""MCP client bridge: servers from ``mcpServers`` JSON, their tools as registry tools."""
