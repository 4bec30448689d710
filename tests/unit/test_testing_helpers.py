"""ces_eval.testing and its pytest plugin run in users' test processes, beside google-cloud-ces,
which registers ``google.cloud.ces.v1beta`` in protobuf's default pool as ces-eval's generated
modules do: importing them loads none of those modules."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta

import pytest
from google.protobuf import struct_pb2

from ces_eval.testing import emulator, plugin


def test_the_helpers_load_no_generated_module_and_no_server() -> None:
    probe = (
        "import json, sys\n"
        "import ces_eval.testing, ces_eval.testing.plugin\n"
        "loaded = [m for m in sys.modules if m.startswith(('ces_eval.', 'google.cloud'))]\n"
        "print(json.dumps(sorted(loaded)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(done.stdout) == [
        "ces_eval.testing",
        "ces_eval.testing.emulator",
        "ces_eval.testing.exec",  # the plugin reads the variables exec sets
        "ces_eval.testing.plugin",
        "ces_eval.testing.server",
    ]


@pytest.mark.parametrize(
    ("given", "written"),
    [(3600, "3600s"), (1.5, "1.5s"), (timedelta(milliseconds=1), "0.001s"), (0, "0s")],
)
def test_durations_are_written_in_their_json_form(given: float | timedelta, written: str) -> None:
    assert emulator._seconds(given) == written


def test_resources_are_sent_as_proto3_json() -> None:
    assert emulator._document({"displayName": "x"}) == {"displayName": "x"}
    assert emulator._document(
        struct_pb2.Struct(fields={"a": struct_pb2.Value(number_value=1)})
    ) == {"a": 1.0}
    with pytest.raises(TypeError, match="proto-plus"):
        emulator._document(42)


@pytest.mark.parametrize(
    "given", [["--ces-eval-url", "http://127.0.0.1:1"], ["--ces-eval-grpc", "h:1"]]
)
def test_a_running_server_is_named_by_both_addresses(
    pytester: pytest.Pytester, given: list[str]
) -> None:
    """One of --ces-eval-url and --ces-eval-grpc alone is a usage error, said in one line,
    before any test runs."""
    pytester.makepyfile("def test_any(ces_eval_server):\n    pass\n")
    done = pytester.runpytest_subprocess(*given, "-p", "no:cacheprovider")
    assert done.ret == pytest.ExitCode.USAGE_ERROR
    done.stderr.fnmatch_lines(["*give both --ces-eval-url and --ces-eval-grpc*"])


def test_given_addresses_are_used_as_they_are(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The URL from the environment, the gRPC address from the command line: no server is
    started, the addresses are the fixture's."""
    pytester.makepyfile(
        "def test_any(ces_eval_server):\n"
        "    assert ces_eval_server.http_url == 'http://127.0.0.1:9'\n"
        "    assert ces_eval_server.grpc_target == '127.0.0.1:8'\n"
        "    assert ces_eval_server.mcp_url == 'http://127.0.0.1:9/mcp'\n"
    )
    monkeypatch.setenv("CES_EVAL_URL", "http://127.0.0.1:9/")
    done = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--ces-eval-grpc", "127.0.0.1:8")
    done.assert_outcomes(passed=1)


def test_the_official_clients_are_skipped_without_google_cloud_ces(
    pytester: pytest.Pytester,
) -> None:
    """ces-eval's own environment has no google-cloud-ces: the client fixtures skip, saying
    why, and start no server for it."""
    pytester.makepyfile(
        "def test_grpc(ces_client):\n    pass\n\ndef test_rest(ces_rest_client):\n    pass\n"
    )
    done = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    done.assert_outcomes(skipped=2)
    done.stdout.fnmatch_lines(["*google-cloud-ces is not installed*"])
    assert plugin._NO_CLIENT in done.stdout.str()
