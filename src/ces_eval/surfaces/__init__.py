"""Thin adapters that expose the one service core over gRPC, HTTP (REST, health) and MCP."""
