"""Thin adapters that expose the one service core over gRPC, HTTP (REST, health) and MCP.

Each surface keeps only its wire decode and encode: ``grpc_api`` (metadata, protobuf, status
trailers), ``rest`` (HTTP/JSON through :mod:`ces_eval.transcoding`), ``mcp_tools`` and
``mcp_bodies`` (MCP tools over the SDK). What every call crosses is written once in ``boundary``
(admission, authentication, deadline, last-resort catch, request line); HTTP's shared parts
are ``http_app`` (the app, its browser guard and body limit) and ``asgi`` (the one error writer
and its status/header table).
"""
