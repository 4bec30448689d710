"""README's methods table is ``ces_eval.methods.markdown_table()`` and says what the server serves.

The second half reads the table from README itself and asks a real ``ces-eval serve``: every
method that gRPC reflection lists has a row; every official method's row is marked served; a row
marked served answers its gRPC path and each of its HTTP routes with anything but UNIMPLEMENTED /
501 (or 404 / 405 for the route), one marked as needing a model FAILED_PRECONDITION / 400
MODEL_NOT_CONFIGURED; a row marked "not yet" (none is official) answers
UNIMPLEMENTED on gRPC and 501 on every route it lists.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass

import grpc
from google.protobuf import descriptor_pool
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from ces_eval.contract import schema
from ces_eval.methods import NEEDS_MODEL, NOT_SERVED, SERVED, markdown_table
from ces_eval.testing.server import RunningServer
from tests.support import contract
from tests.unit.test_official_routes import sample_path

README = contract.ROOT / "README.md"
BEGIN, END = "<!-- methods:begin -->\n", "<!-- methods:end -->"
_CODE = re.compile(r"`([^`]+)`")
# Services the server adds beside the API (server.py); they are not API methods.
_INFRASTRUCTURE = ("grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection")


@dataclass(frozen=True)
class Row:
    path: str  # "/package.Service/Method"
    bindings: tuple[tuple[str, str], ...]  # (verb, template)
    served: bool
    needs_model: bool = False


def readme_table() -> str:
    text = README.read_text(encoding="utf-8")
    assert text.count(BEGIN) == 1, "README needs one methods:begin marker"
    assert text.count(END) == 1, "README needs one methods:end marker"
    return text.split(BEGIN, 1)[1].split(END, 1)[0]


def readme_rows() -> list[Row]:
    rows = []
    for line in readme_table().splitlines()[2:]:
        method, http, _tool, status = (cell.strip() for cell in line.strip("|").split(" | "))
        assert status in {SERVED, NOT_SERVED, NEEDS_MODEL}, line
        bindings = tuple(
            (verb, template)
            for verb, template in (code.split(" ", 1) for code in _CODE.findall(http))
        )
        path = "/" + _CODE.findall(method)[0]
        rows.append(Row(path, bindings, status != NOT_SERVED, status == NEEDS_MODEL))
    return rows


def test_readme_table_is_the_generated_table() -> None:
    assert readme_table() == markdown_table(), (
        "README's methods table is stale: make generate writes it (tools/readme_methods.py: "
        "ces_eval.methods.markdown_table() between the markers)"
    )


def test_the_writer_of_the_table_finds_it_current() -> None:
    done = subprocess.run(
        [sys.executable, str(contract.ROOT / "tools" / "readme_methods.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def grpc_code(channel: grpc.Channel, path: str) -> grpc.StatusCode:
    """The status of an empty request to ``path`` (OK when it succeeds)."""
    try:
        channel.unary_unary(path)(b"", timeout=30)
    except grpc.RpcError as error:
        code: grpc.StatusCode = error.code()
        return code
    return grpc.StatusCode.OK


def rest_answer(server: RunningServer, verb: str, template: str) -> tuple[int, str]:
    """HTTP status and ErrorInfo reason ("" on success) for ``verb`` on a path of
    ``template``, with an empty JSON body where the verb takes one."""
    request = urllib.request.Request(
        server.http_base + sample_path(template),
        data=b"{}" if verb in {"POST", "PATCH"} else None,
        method=verb,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, ""
    except urllib.error.HTTPError as error:
        details = json.loads(error.read())["error"]["details"]
        reasons = [d["reason"] for d in details if d["@type"].endswith("ErrorInfo")]
        return error.code, reasons[0]


def test_every_reflected_method_has_a_row(module_server: RunningServer) -> None:
    rows = {row.path for row in readme_rows()}
    with grpc.insecure_channel(module_server.grpc_target) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        pool = descriptor_pool.DescriptorPool(database)
        services = [s for s in database.get_services() if s not in _INFRASTRUCTURE]
        assert services
        reflected = {
            f"/{name}/{method.name}"
            for name in services
            for method in pool.FindServiceByName(name).methods
        }
    assert reflected <= rows, sorted(reflected - rows)


def test_served_rows_are_what_the_server_serves(module_server: RunningServer) -> None:
    rows = readme_rows()
    official = {method.path for method in schema.official_routes().methods}
    assert official <= {row.path for row in rows}
    # The product's acceptance: no official method is left "not yet".
    assert [row.path for row in rows if row.path in official and not row.served] == []
    with grpc.insecure_channel(module_server.grpc_target) as channel:
        answered = {
            row.path
            for row in rows
            if grpc_code(channel, row.path) is not grpc.StatusCode.UNIMPLEMENTED
        }
        needing = {
            row.path
            for row in rows
            if grpc_code(channel, row.path) is grpc.StatusCode.FAILED_PRECONDITION
        }
    assert {row.path for row in rows if row.served} == answered
    assert {row.path for row in rows if row.needs_model} <= needing
    for row in rows:
        for verb, template in row.bindings:
            status, reason = rest_answer(module_server, verb, template)
            if row.needs_model:
                assert (status, reason) == (400, "MODEL_NOT_CONFIGURED"), (row.path, verb)
            elif row.served:
                assert status != 501, (row.path, verb, template)
                assert reason not in {"PATH_NOT_FOUND", "METHOD_NOT_ALLOWED"}, (row.path, verb)
            else:
                assert (status, reason) == (501, "METHOD_NOT_IMPLEMENTED"), (row.path, verb)
