"""The protocol-independent core: rules shared by the gRPC, REST/JSON and MCP front ends."""
