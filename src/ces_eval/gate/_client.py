"""The REST calls of ``ces-eval run``: any server speaking the EvaluationService over REST/JSON,
a ces-eval or hosted CES (docs/gate.md, "Where it runs").

Authentication, in order: ``--token``, ``CES_EVAL_TOKEN``, then, for an ``https://`` server only,
Application Default Credentials when google-auth is installed (``google.auth.default`` with the
cloud-platform scope, refreshed as they expire); none otherwise. A refusal is one line with the
server's status and message (Google's error envelope, docs/semantics.md "Errors").
"""

from __future__ import annotations

import importlib
import ssl
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx

from ces_eval.gate._errors import RunNotDone

__all__ = ["Client", "adc_token_source"]

_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
_PAGE_SIZE = 1000  # the most a list answers at once (docs/semantics.md, page_size)
_RETRIED = {429, 502, 503, 504}  # worth asking again while polling: busy or restarting
_TIMEOUT = httpx.Timeout(60.0, connect=15.0)


def adc_token_source() -> Callable[[], str] | None:
    """Application Default Credentials as a source of access tokens, refreshed when expired;
    None when google-auth (with its requests transport) is not installed, or finds none."""
    try:
        auth: Any = importlib.import_module("google.auth")
        transport: Any = importlib.import_module("google.auth.transport.requests")
    except ImportError:
        return None
    try:
        credentials, _project = auth.default(scopes=[_SCOPE])
    except auth.exceptions.DefaultCredentialsError:
        return None  # none set up: the call goes without a token, and a 401 says to give one
    request = transport.Request()

    def token() -> str:
        if not credentials.valid:
            credentials.refresh(request)
        return str(credentials.token)

    return token


class _Bearer(httpx.Auth):
    def __init__(self, token: Callable[[], str]) -> None:
        self.token = token

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = f"Bearer {self.token()}"
        yield request


def _refusal(response: httpx.Response) -> str:
    """Google's error envelope in one line: ``404 NOT_FOUND: message``."""
    try:
        error = response.json().get("error", {})
    except ValueError:
        error = {}
    if not isinstance(error, dict):
        error = {}
    status = error.get("status") or response.reason_phrase
    message = " ".join(str(error.get("message") or response.text[:200]).split())
    return f"{response.status_code} {status}: {message}"


class Client:
    """REST/JSON calls to ``server`` (``http://`` or ``https://``), with a bearer token from
    ``token`` when given, trusting ``ca_file`` (else the system's and ``SSL_CERT_FILE``)."""

    def __init__(
        self, server: str, token: Callable[[], str] | None = None, ca_file: str | None = None
    ) -> None:
        parts = urlsplit(server)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise RunNotDone(f"--server {server!r}: give an http:// or https:// URL")
        self.server = server.rstrip("/")
        verify: ssl.SSLContext | bool = True
        if ca_file:
            try:
                verify = ssl.create_default_context(cafile=ca_file)
            except (OSError, ssl.SSLError) as error:
                raise RunNotDone(f"--ca-file {ca_file}: {error}") from None
        self.http = httpx.Client(
            base_url=self.server,
            auth=_Bearer(token) if token else None,
            verify=verify,
            timeout=_TIMEOUT,
            headers={"User-Agent": "ces-eval-run"},
        )

    def close(self) -> None:
        """Close the connections."""
        self.http.close()

    def call(
        self,
        method: str,
        name: str,
        *,
        body: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
        retry: bool = False,
    ) -> dict[str, Any]:
        """``method /v1beta/{name}``'s JSON answer; a refusal or a failure to reach the server is
        one line. With ``retry`` (reads while polling), an answer saying the server is busy or
        restarting, or a connection that failed, is asked again a few times."""
        attempts = 5 if retry else 1
        for attempt in range(attempts):
            try:
                response = self.http.request(method, f"/v1beta/{name}", json=body, params=params)
            except httpx.HTTPError as error:
                if attempt + 1 < attempts:
                    time.sleep(0.5 * 2**attempt)
                    continue
                raise RunNotDone(
                    f"cannot reach {self.server}: {error or type(error).__name__}"
                ) from None
            if response.status_code in _RETRIED and attempt + 1 < attempts:
                time.sleep(0.5 * 2**attempt)
                continue
            if response.status_code != 200:
                hint = ""
                if response.status_code == 401:
                    hint = " (give a token: --token or CES_EVAL_TOKEN)"
                raise RunNotDone(f"{method} {name}: {_refusal(response)}{hint}")
            try:
                answer = response.json()
            except ValueError:
                raise RunNotDone(f"{method} {name}: the answer is not JSON") from None
            if not isinstance(answer, dict):
                raise RunNotDone(f"{method} {name}: the answer is not a JSON object")
            return answer
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def pages(
        self, name: str, key: str, params: Mapping[str, Any] | None = None
    ) -> Iterator[dict[str, Any]]:
        """Every item of a list method (AIP-158), page after page."""
        token = ""
        while True:
            query = {**(params or {}), "pageSize": _PAGE_SIZE}
            if token:
                query["pageToken"] = token
            answer = self.call("GET", name, params=query, retry=True)
            yield from (item for item in answer.get(key, []) if isinstance(item, dict))
            token = str(answer.get("nextPageToken", ""))
            if not token:
                return
