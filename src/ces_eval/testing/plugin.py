"""ces-eval's pytest plugin: a server for a test suite, and clean projects for its tests.

Active wherever ces-eval is installed (the ``pytest11`` entry point ``ces_eval``). Fixtures:

- ``ces_eval_server`` (session): ``ces-eval serve`` started on free ports with a database in a
  temporary folder, healthy before the first test, stopped after the last; or, with
  ``--ces-eval-url`` and ``--ces-eval-grpc`` (``CES_EVAL_URL``, ``CES_EVAL_GRPC``), a server
  already running there. Attributes ``http_url``, ``grpc_target`` and ``mcp_url``.
- ``ces_eval_project`` (function): a project of its own for each test (``id``, ``name``,
  ``app()``), reset after it, so tests never see each other's data, also under pytest-xdist.
- ``ces_eval_admin`` (session): :class:`~ces_eval.testing.Emulator` bound to the server.
- ``ces_client`` and ``ces_rest_client`` (session): Google's ``EvaluationServiceClient`` wired
  to the server over gRPC and REST; skipped, saying why, without ``google-cloud-ces``.

Like :mod:`ces_eval.testing`, it imports none of ces-eval's generated modules.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from ces_eval.testing.emulator import Emulator
from ces_eval.testing.exec import GRPC_VARIABLE, URL_VARIABLE
from ces_eval.testing.server import start_server

__all__ = ["CesEvalProject", "CesEvalServer"]

_NO_CLIENT = "google-cloud-ces is not installed (pip install google-cloud-ces)"


@dataclass(frozen=True)
class CesEvalServer:
    """Where a ces-eval server answers: ``http_url`` (``http://host:port``: REST, MCP, health)
    and ``grpc_target`` (``host:port``)."""

    http_url: str
    grpc_target: str

    @property
    def mcp_url(self) -> str:
        return f"{self.http_url}/mcp"


@dataclass(frozen=True)
class CesEvalProject:
    """A project no other test uses: ``id`` (``test-…``) and ``name`` (``projects/test-…``)."""

    id: str

    @property
    def name(self) -> str:
        return f"projects/{self.id}"

    def app(self, app: str = "app", location: str = "us-central1") -> str:
        """The name of an app in this project (apps need no creating)."""
        return f"{self.name}/locations/{location}/apps/{app}"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ces-eval")
    group.addoption(
        "--ces-eval-url",
        dest="ces_eval_url",
        metavar="URL",
        help="use the ces-eval server whose HTTP port is URL (http://host:port) instead of "
        "starting one; with --ces-eval-grpc (or CES_EVAL_URL)",
    )
    group.addoption(
        "--ces-eval-grpc",
        dest="ces_eval_grpc",
        metavar="HOST:PORT",
        help="the gRPC address of that server (or CES_EVAL_GRPC)",
    )


_GIVEN = pytest.StashKey["CesEvalServer | None"]()


def pytest_configure(config: pytest.Config) -> None:
    """A server named by halves is refused before anything runs (a usage error)."""
    config.stash[_GIVEN] = _given(config)


def _given(config: pytest.Config) -> CesEvalServer | None:
    # ces-eval exec sets both for its command (testing/exec.py).
    http_url = config.getoption("ces_eval_url") or os.environ.get(URL_VARIABLE)
    grpc_target = config.getoption("ces_eval_grpc") or os.environ.get(GRPC_VARIABLE)
    if not http_url and not grpc_target:
        return None
    if not (http_url and grpc_target):
        raise pytest.UsageError(
            "ces-eval: a running server is named by its HTTP URL and its gRPC address together: "
            "give both --ces-eval-url and --ces-eval-grpc (or CES_EVAL_URL and CES_EVAL_GRPC)"
        )
    return CesEvalServer(http_url.rstrip("/"), grpc_target)


@pytest.fixture(scope="session")
def ces_eval_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CesEvalServer]:
    given = request.config.stash[_GIVEN]
    if given is not None:
        yield given
        return
    folder = tmp_path_factory.mktemp("ces-eval")
    running = start_server(folder / "ces-eval.db", "--log-level", "warning")
    try:
        yield CesEvalServer(running.http_base, running.grpc_target)
    finally:
        running.stop()


@pytest.fixture(scope="session")
def ces_eval_admin(ces_eval_server: CesEvalServer) -> Emulator:
    return Emulator(ces_eval_server.http_url)


@pytest.fixture
def ces_eval_project(ces_eval_admin: Emulator) -> Iterator[CesEvalProject]:
    project = CesEvalProject(f"test-{uuid.uuid4().hex[:16]}")
    yield project
    ces_eval_admin.reset_project(project.name)


def _official() -> Any:  # noqa: ANN401 - google.cloud.ces_v1beta, when installed
    return pytest.importorskip("google.cloud.ces_v1beta", reason=_NO_CLIENT)


@pytest.fixture(scope="session")
def ces_client(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Google's EvaluationServiceClient over gRPC (an insecure channel to the server)."""
    ces_v1beta = _official()  # skipped before any server starts
    ces_eval_server: CesEvalServer = request.getfixturevalue("ces_eval_server")
    import grpc  # noqa: PLC0415 - installed with google-cloud-ces
    from google.cloud.ces_v1beta.services.evaluation_service.transports import (  # noqa: PLC0415
        EvaluationServiceGrpcTransport,
    )

    channel = grpc.insecure_channel(ces_eval_server.grpc_target)
    client = ces_v1beta.EvaluationServiceClient(
        transport=EvaluationServiceGrpcTransport(channel=channel)
    )
    try:
        yield client
    finally:
        channel.close()


@pytest.fixture(scope="session")
def ces_rest_client(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Google's EvaluationServiceClient over REST, without credentials."""
    ces_v1beta = _official()
    ces_eval_server: CesEvalServer = request.getfixturevalue("ces_eval_server")
    from google.auth.credentials import AnonymousCredentials  # noqa: PLC0415

    client = ces_v1beta.EvaluationServiceClient(
        transport="rest",
        client_options={"api_endpoint": ces_eval_server.http_url},
        credentials=AnonymousCredentials(),
    )
    try:
        yield client
    finally:
        client.transport.close()
