"""What people read about evaluation results: one rendering of a result, shared by the web view
(``/ui``) and the HTML report of ``ces-eval run``, and the comparison of two runs.

A library over REST JSON (the proto3 JSON of the messages, as ``GET /v1beta/{name}`` answers
them): it imports nothing generated and no part of the server, so that ``ces-eval run`` can use it
against any server speaking the API, hosted CES included (pyproject.toml, contract ``report``).
"""
