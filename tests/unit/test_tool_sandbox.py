"""The team's Python code run apart (src/ces_eval/core/io/tool_sandbox.py; docs/tools.md,
"Running the team's code"): each bound holds against code written to break it (a loop, an
allocation, too much output, a file, a socket, the environment), and ExecuteTool runs fakes and
Python tools through it only when the server runs with --run-tool-fakes."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from ces_eval.core.aip import pages
from ces_eval.core.aip.context import Settings
from ces_eval.core.aip.ports import CodeFailed
from ces_eval.core.io.tool_sandbox import Bounds, Sandbox
from ces_eval.core.service import Core
from ces_eval.generated.google.cloud.ces.v1beta import agent_service_pb2 as agent_pb2
from ces_eval.generated.google.cloud.ces.v1beta import tool_pb2, tool_service_pb2
from tests.unit.test_core import APP, Harness

BOUNDS = Bounds(cpu_seconds=1, memory_bytes=128 * 2**20, wall_seconds=3.0, output_bytes=4096)


def _call(code: str, *, convention: str = "function", **call: Any) -> Any:
    sandbox = Sandbox(BOUNDS)
    functions = ["fake_t", "fake_tool_call"] if convention == "fake" else ["f"]
    call.setdefault("input", {})
    return asyncio.run(sandbox.call(code, functions, convention, call))


def _failure(code: str) -> str:
    with pytest.raises(CodeFailed) as raised:
        _call(code)
    return raised.value.message


def test_a_function_answers_with_its_value() -> None:
    assert _call("def f(a, b=2):\n    return {'sum': a + b}\n", input={"a": 1}) == {
        "function": "f",
        "value": {"sum": 3},
        "variables": {},
    }


def test_a_fake_gets_the_tool_its_input_and_the_variables_it_may_change() -> None:
    code = (
        "def fake_tool_call(tool, input, callback_context):\n"
        "    callback_context.variables['seen'] = tool['id']\n"
        "    return {'echo': input['q']}\n"
    )
    answer = _call(code, convention="fake", tool={"id": "t"}, input={"q": "hi"}, variables={"a": 1})
    assert answer == {
        "function": "fake_tool_call",
        "value": {"echo": "hi"},
        "variables": {"a": 1, "seen": "t"},
    }
    # A fake of this very tool is preferred; defining none answers nothing.
    both = code + "def fake_t(tool, input, context):\n    return {'own': True}\n"
    assert _call(both, convention="fake", tool={}, input={})["value"] == {"own": True}
    assert _call("x = 1\n", convention="fake", tool={}, input={}) == {}


def test_an_exception_is_the_tool_s_error() -> None:
    answer = _call("def f():\n    raise ValueError('no such order')\n")
    assert answer == {"function": "f", "error": "ValueError: no such order"}
    assert _call("def f():\n    return object()\n")["error"].startswith("The answer is not JSON")


def test_a_loop_is_stopped() -> None:
    assert "seconds" in _failure("def f():\n    while True:\n        pass\n")


def test_a_sleep_is_stopped_by_the_wall_clock() -> None:
    message = _failure("import time\ndef f():\n    time.sleep(60)\n")
    assert message == "The code ran longer than 3 seconds and was stopped."


def test_closing_its_pipes_does_not_escape_the_wall_clock() -> None:
    message = _failure("import os\nos.close(1)\nos.close(2)\nwhile True:\n    pass\n")
    assert "seconds" in message


def test_an_allocation_past_the_memory_bound_fails() -> None:
    answer = _call("def f():\n    return len(bytearray(512 * 2**20))\n")
    assert answer["error"].startswith("MemoryError")


def test_output_past_its_bound_stops_the_code() -> None:
    message = _failure("import os\ndef f():\n    while True:\n        os.write(1, b'x' * 1024)\n")
    assert message == "The code printed more than 4096 bytes and was stopped."
    # What print writes is the code's own business: dropped, never the answer's.
    assert _call("def f():\n    print('x' * 100000)\n    return 1\n")["value"] == 1


def test_the_environment_is_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CES_EVAL_SECRET_FOR_TEST", "s3cr3t")
    answer = _call("import os\ndef f():\n    return dict(os.environ)\n")
    assert "CES_EVAL_SECRET_FOR_TEST" not in answer["value"]
    assert "s3cr3t" not in str(answer["value"])


def test_files_sockets_and_processes_are_refused(tmp_path: Path) -> None:
    target = tmp_path / "written"
    wrote = _call(f"def f():\n    open({str(target)!r}, 'w').write('x')\n")
    assert wrote["error"].startswith("PermissionError")
    assert not target.exists()
    connected = _call("import socket\ndef f():\n    socket.create_connection(('127.0.0.1', 9))\n")
    assert connected["error"].startswith("PermissionError")
    spawned = _call("import os\ndef f():\n    os.system('touch x')\n")
    assert spawned["error"].startswith("PermissionError")
    # Its folder is its own and gone afterwards: the server's is untouched.
    assert _call("import os\ndef f():\n    return os.getcwd()\n")["value"] != os.getcwd()


def test_code_that_does_not_run_says_so() -> None:
    assert _call("def f(:\n")["error"].startswith("The code does not run: SyntaxError")


# -- through ExecuteTool -------------------------------------------------------------------------


class Fakes(Harness):
    def __init__(self, path: Path, *, run: bool) -> None:
        super().__init__(path)
        self.core = Core(
            self.storage,
            pages.PageTokens(self.run(self.storage.secret())),
            settings=Settings(run_tool_fakes=run),
        )


@pytest.fixture
def fakes(tmp_path: Path) -> Iterator[Fakes]:
    harness = Fakes(tmp_path / "db.sqlite", run=True)
    yield harness
    harness.close()


def test_execute_tool_runs_a_fake_and_a_python_tool(fakes: Fakes) -> None:
    fake = (
        "def fake_lookup(tool, input, callback_context):\n"
        "    callback_context.variables['calls'] = callback_context.variables.get('calls', 0) + 1\n"
        "    return {'output': {'order': input['order_id'], 'status': 'shipped'}}\n"
    )
    tool = tool_pb2.Tool(
        client_function={"name": "lookup"},
        tool_fake_config={"enable_fake_mode": True, "code_block": {"python_code": fake}},
    )
    fakes.call("create_tool", agent_pb2.CreateToolRequest(parent=APP, tool_id="lookup", tool=tool))
    request = tool_service_pb2.ExecuteToolRequest(
        parent=APP, tool=f"{APP}/tools/lookup", args={"order_id": 42}, variables={"calls": 1}
    )
    answer = json_format.MessageToDict(fakes.call("execute_tool", request))
    assert answer["response"] == {"output": {"order": 42, "status": "shipped"}}
    assert answer["variables"] == {"calls": 2}
    python = tool_pb2.Tool(
        python_function={"python_code": "def add(a: int, b: int) -> int:\n    return a + b\n"}
    )
    fakes.call("create_tool", agent_pb2.CreateToolRequest(parent=APP, tool_id="add", tool=python))
    added = fakes.call(
        "execute_tool",
        tool_service_pb2.ExecuteToolRequest(
            parent=APP, tool=f"{APP}/tools/add", args={"a": 2, "b": 3}
        ),
    )
    assert json_format.MessageToDict(added.response) == {"output": 5}
