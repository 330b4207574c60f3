"""Calls tools of `turnback mcp` with the official MCP Python SDK and prints each result as
one JSON line: the structured content, or {"isError": true, "error": {...}} (the error
document the command line prints).
Usage: call.py TURNBACK_EXE WORKSPACE TOOL ARGS_JSON [TOOL ARGS_JSON ...]
The server runs `turnback --workspace WORKSPACE mcp`, started in $SERVER_CWD if set (else
in WORKSPACE). The environment (TURNBACK_HOME, TURNBACK_KEY, ...) is passed through."""

import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def attr(obj, snake, camel):
    """Field access across SDK generations (2.x snake_case, 1.x camelCase)."""
    return getattr(obj, snake) if hasattr(obj, snake) else getattr(obj, camel)


async def main(exe, ws, calls):
    cwd = os.environ.get("SERVER_CWD", ws)
    params = StdioServerParameters(command=exe, args=["--workspace", ws, "mcp"], env=dict(os.environ), cwd=cwd)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            info = await session.initialize()
            server = attr(info, "server_info", "serverInfo")
            print(json.dumps({"server": {"name": server.name, "version": server.version}}))
            for name, args in calls:
                result = await session.call_tool(name, args)
                if attr(result, "is_error", "isError"):
                    # The error document `--json` prints, as the tool error's text.
                    print(json.dumps({"isError": True, **json.loads(result.content[0].text)}))
                else:
                    print(json.dumps(attr(result, "structured_content", "structuredContent")))


calls = [(sys.argv[i], json.loads(sys.argv[i + 1])) for i in range(3, len(sys.argv), 2)]
asyncio.run(main(sys.argv[1], sys.argv[2], calls))
