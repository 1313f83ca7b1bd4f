"""The hub's MCP server at `/mcp` (streamable HTTP, the official `mcp` SDK): tools that let an
assistant operate callboard (`tools`), their arguments taken as JSON sent them (`arguments`),
mounted behind the REST API's key (`mount`)."""
