"""A small MCP server written with the official SDK's FastMCP (stdio, or streamable HTTP via `app()`)."""

import sys
import time

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("calc")


@mcp.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@mcp.tool()
def divide(a: float, b: float) -> float:
    """Divide a by b."""
    if b == 0:
        raise ValueError("division by zero")
    return a / b


@mcp.tool()
def nap(seconds: float) -> str:
    """Sleep for some seconds."""
    time.sleep(seconds)
    return "awake"


@mcp.tool()
def shout(text: str, times: int = 1) -> str:
    """Repeat text in capitals."""
    return text.upper() * times


if __name__ == "__main__":
    mcp.run(sys.argv[1] if len(sys.argv) > 1 else "stdio")
