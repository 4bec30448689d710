"""Token table, authentication, method access and authorization (the access package), in
process."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import message_factory
from google.protobuf.message import Message

from ces_eval.access import (
    Caller,
    JsonFields,
    MessageFields,
    Principal,
    TokenFileError,
    Tokens,
    VariableFields,
    addressed,
    authorize,
    authorized,
    bearer,
    identify,
    method_access,
    project_of,
)
from ces_eval.contract import schema
from ces_eval.core.service import implements
from ces_eval.errors import Code, ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.server import (
    ExitStatus,
    ServerConfig,
    StartupError,
    exposure_problem,
    loopback_only,
    preflight,
)
from tests.support.tokens import ADMIN as TOKEN_ADMIN
from tests.support.tokens import ALICE as TOKEN_A
from tests.support.tokens import READER as TOKEN_R

METHODS = {
    method.name: method
    for service in schema.services()
    for method in service.methods
    if implements(method)
}
APP_A = "projects/proj-a/locations/l/apps/app"


def _tokens() -> Tokens:
    return Tokens.parse(
        {
            "tokens": [
                {"name": "alice", "token": TOKEN_A, "projects": ["proj-a"]},
                {
                    "name": "reader",
                    "token": TOKEN_R,
                    "projects": ["proj-a"],
                    "access": "read-only",
                },
                {
                    "name": "admin",
                    "token_sha256": hashlib.sha256(TOKEN_ADMIN.encode()).hexdigest(),
                    "projects": ["*"],
                },
            ]
        }
    )


def test_authenticate_answers_the_principal_of_each_token_form() -> None:
    tokens = _tokens()
    assert len(tokens) == 3
    assert tokens.authenticate(TOKEN_A, presented=True) == Principal(
        "alice", frozenset({"proj-a"}), writable=True
    )
    assert not tokens.authenticate(TOKEN_R, presented=True).writable
    assert tokens.authenticate(TOKEN_ADMIN, presented=True).projects == frozenset({"*"})


@pytest.mark.parametrize(
    ("credential", "presented", "reason"),
    [
        (None, False, "CREDENTIALS_MISSING"),
        (None, True, "ACCESS_TOKEN_INVALID"),  # sent, but not a bearer token
        ("token-for-alice-0002", True, "ACCESS_TOKEN_INVALID"),
        (TOKEN_A + " ", True, "ACCESS_TOKEN_INVALID"),
    ],
)
def test_authenticate_refuses_missing_and_wrong_tokens(
    credential: str | None, presented: bool, reason: str
) -> None:
    with pytest.raises(ServiceError) as caught:
        _tokens().authenticate(credential, presented=presented)
    assert caught.value.code is Code.UNAUTHENTICATED
    assert caught.value.reason == reason
    assert TOKEN_A not in caught.value.message


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer   abc ", "abc"),
        ("BEARER abc", "abc"),
        ("Basic YWxhZGRpbjpvcGVuc2VzYW1l", None),
        ("Bearer", None),
        ("Bearer ", None),
        ("", None),
        (None, None),
    ],
)
def test_bearer_reads_the_token_of_an_authorization_value(
    header: str | None, token: str | None
) -> None:
    assert bearer(header) == token


def test_identify_records_the_principal_not_the_claimed_user() -> None:
    caller = identify(_tokens(), f"Bearer {TOKEN_A}", "mallory@example.com")
    assert caller.user == "alice"
    assert caller.principal is not None
    open_caller = identify(None, None, " someone@example.com ")
    assert (open_caller.user, open_caller.principal) == ("someone@example.com", None)


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ([], "one key, tokens"),
        ({"tokens": [], "extra": 1}, "one key, tokens"),
        ({"tokens": []}, "non-empty list"),
        ({"tokens": ["x"]}, "expected a mapping"),
        ({"tokens": [{"token": TOKEN_A, "projects": ["p"]}]}, "name is required"),
        ({"tokens": [{"name": "n", "projects": ["p"]}]}, "exactly one of token"),
        (
            {"tokens": [{"name": "n", "token": TOKEN_A, "token_sha256": "0" * 64, "projects": []}]},
            "exactly one of token",
        ),
        ({"tokens": [{"name": "n", "token": "short", "projects": ["p"]}]}, "at least 16"),
        ({"tokens": [{"name": "n", "token_sha256": "xyz", "projects": ["p"]}]}, "64 hexadecimal"),
        ({"tokens": [{"name": "n", "token": TOKEN_A, "projects": []}]}, "projects must be"),
        ({"tokens": [{"name": "n", "token": TOKEN_A, "projects": ["a/b"]}]}, "projects must be"),
        (
            {"tokens": [{"name": "n", "token": TOKEN_A, "projects": ["p"], "access": "admin"}]},
            "access must be",
        ),
        ({"tokens": [{"name": "n", "token": TOKEN_A, "projects": ["p"], "role": 1}]}, "unknown"),
        (
            {
                "tokens": [
                    {"name": "n", "token": TOKEN_A, "projects": ["p"]},
                    {"name": "m", "token": TOKEN_A, "projects": ["q"]},
                ]
            },
            "same token appears twice",
        ),
        (
            {
                "tokens": [
                    {"name": "n", "token": TOKEN_A, "projects": ["p"]},
                    {"name": "n", "token": TOKEN_R, "projects": ["q"]},
                ]
            },
            "appears twice",
        ),
    ],
)
def test_token_file_problems_are_named(document: Any, problem: str) -> None:
    with pytest.raises(TokenFileError, match=problem):
        Tokens.parse(document)


def test_a_token_file_with_plain_tokens_must_not_be_readable_by_others(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    path.write_text(f"tokens:\n  - name: alice\n    token: {TOKEN_A}\n    projects: [proj-a]\n")
    path.chmod(0o644)
    with pytest.raises(TokenFileError, match="chmod 600"):
        Tokens.load(path)
    path.chmod(0o600)
    assert len(Tokens.load(path)) == 1
    hashed = tmp_path / "hashed.json"  # JSON is YAML too; digests may be world-readable
    digest = hashlib.sha256(TOKEN_A.encode()).hexdigest()
    hashed.write_text(
        f'{{"tokens": [{{"name": "a", "token_sha256": "{digest}", "projects": ["*"]}}]}}'
    )
    hashed.chmod(0o644)
    assert Tokens.load(hashed).authenticate(TOKEN_A, presented=True).name == "a"
    with pytest.raises(TokenFileError, match="No such file"):
        Tokens.load(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("tokens: [\n")
    with pytest.raises(TokenFileError, match="not valid YAML"):
        Tokens.load(broken)


def test_every_method_addresses_resources_and_only_get_bindings_are_reads() -> None:
    for name, method in METHODS.items():
        needs = method_access(method)
        assert needs.fields, name
        rule = schema.http_rule(method)
        verb = rule.WhichOneof("pattern") if rule is not None else None
        # A method without a binding reads, unless its client streams (BidiRunSession, which
        # records its conversation).
        assert needs.write == (verb not in {None, "get"} or method.client_streaming), name
    assert method_access(METHODS["UpdateEvaluation"]).fields == (("evaluation", "name"),)
    assert method_access(METHODS["BidiRunSession"]).fields == (("config", "session"),)
    assert method_access(METHODS["WaitOperation"]).fields == (("name",),)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.capitalize() for word in rest)


def _sources(method: Any, values: dict[tuple[str, ...], str]) -> dict[str, Any]:
    """The same field values held each way the project extractor reads them: a request
    message (as the core has it), path variables (as the REST router matched them) and proto3
    JSON arguments (as MCP receives them), by JSON and by proto names."""
    request: Message = message_factory.GetMessageClass(method.input_type)()
    by_json: dict[str, Any] = {}
    by_proto: dict[str, Any] = {}
    for path, value in values.items():
        target: Any = request
        for part in path[:-1]:
            target = getattr(target, part)
        setattr(target, path[-1], value)
        for document, spell in ((by_json, _camel), (by_proto, str)):
            node = document
            for part in path[:-1]:
                node = node.setdefault(spell(part), {})
            node[spell(path[-1])] = value
    return {
        "message": request,
        "message fields": MessageFields(request),
        "variables": VariableFields({".".join(path): v for path, v in values.items()}),
        "json names": JsonFields(by_json),
        "proto names": JsonFields(by_proto),
    }


def test_one_extractor_reads_the_same_projects_from_messages_variables_and_arguments() -> None:
    """For every method the descriptors declare, the resource fields its HTTP templates bind
    give the same resource names and projects whichever form the request takes."""
    checked = 0
    for service in schema.services():
        for method in service.methods:
            fields = method_access(method).fields
            values = {
                path: f"projects/proj-{index}/locations/l/apps/a/x/{method.name}"
                for index, path in enumerate(fields)
            }
            expected = tuple(values.values())
            for form, source in _sources(method, values).items():
                assert addressed(method, source) == expected, (method.full_name, form)
                projects = [project_of(name) for name in addressed(method, source)]
                assert projects == [f"proj-{i}" for i in range(len(fields))], form
            empty = {form: addressed(method, s) for form, s in _sources(method, {}).items()}
            assert set(empty.values()) == {("",) * len(fields)}, method.full_name
            checked += 1
    assert checked == sum(len(service.methods) for service in schema.services())


def test_project_of_reads_the_leading_project_only() -> None:
    assert project_of("projects/p/locations/l") == "p"
    assert project_of("projects/p") == "p"
    assert project_of("projects//x") is None
    assert project_of("x/projects/p") is None
    assert project_of("") is None


def _principal(projects: set[str], *, writable: bool = True) -> Principal:
    return Principal("p", frozenset(projects), writable)


def test_authorize_allows_own_projects_and_denies_the_rest_alike() -> None:
    get = METHODS["GetEvaluation"]
    alice = _principal({"proj-a"})
    authorize(alice, get, service_pb2.GetEvaluationRequest(name=f"{APP_A}/evaluations/e"))
    messages = []
    for name in (
        "projects/proj-b/locations/l/apps/app/evaluations/e",
        "projects/proj-b/locations/l/apps/app/evaluations/does-not-exist",
        "projects/proj-a-suffix/locations/l/apps/app/evaluations/e",
        "",
        "proj-a",
        "//projects/proj-a",
    ):
        with pytest.raises(ServiceError) as caught:
            authorize(alice, get, service_pb2.GetEvaluationRequest(name=name))
        assert caught.value.code is Code.PERMISSION_DENIED
        assert caught.value.reason == "IAM_PERMISSION_DENIED"
        assert "(or it may not exist)" in caught.value.message
        messages.append(caught.value.message.replace(repr(name), "NAME"))
    assert len(set(messages)) == 1  # existence never changes the answer


def test_authorized_handlers_check_every_call_and_fail_closed_without_a_principal() -> None:
    """``authorized`` wraps each handler in its own method's check: the wrapped call runs for
    a principal of the addressed project only, and a call reaching it unauthenticated (a wiring
    fault) is UNAUTHENTICATED, never served."""
    path = schema.method_path(METHODS["GetEvaluation"])
    served: list[str] = []

    async def handler(request: Message, caller: Caller) -> Message:
        served.append(caller.user)
        return request

    wrapped = authorized({path: handler})[path]
    request = service_pb2.GetEvaluationRequest(name=f"{APP_A}/evaluations/e")
    asyncio.run(wrapped(request, Caller("alice", _principal({"proj-a"}))))
    assert served == ["alice"]
    for caller, code in (
        (Caller("bob", _principal({"proj-b"})), Code.PERMISSION_DENIED),
        (Caller("nobody"), Code.UNAUTHENTICATED),
    ):
        with pytest.raises(ServiceError) as caught:
            asyncio.run(wrapped(request, caller))
        assert caught.value.code is code
    assert served == ["alice"]


def test_authorize_checks_the_nested_name_of_an_update_and_write_access() -> None:
    update = METHODS["UpdateEvaluation"]
    request = service_pb2.UpdateEvaluationRequest()
    request.evaluation.name = f"{APP_A}/evaluations/e"
    authorize(_principal({"proj-a"}), update, request)
    with pytest.raises(ServiceError, match="denied"):
        authorize(_principal({"proj-a"}, writable=False), update, request)
    with pytest.raises(ServiceError, match="denied"):
        authorize(_principal({"proj-b"}), update, request)
    # A read-only principal still reads.
    authorize(
        _principal({"proj-a"}, writable=False),
        METHODS["ListEvaluationResults"],
        service_pb2.ListEvaluationResultsRequest(parent=f"{APP_A}/evaluations/-"),
    )


def test_wildcard_principals_reach_every_project_and_leave_bad_names_to_validation() -> None:
    admin = _principal({"*"})
    get = METHODS["GetEvaluation"]
    authorize(admin, get, service_pb2.GetEvaluationRequest(name="projects/any/x"))
    authorize(admin, get, service_pb2.GetEvaluationRequest(name="not-a-name"))
    with pytest.raises(ServiceError, match="denied"):
        authorize(
            _principal({"*"}, writable=False),
            METHODS["DeleteEvaluation"],
            service_pb2.DeleteEvaluationRequest(name="not-a-name"),
        )


def test_rest_variables_and_mcp_arguments_are_authorized_like_messages() -> None:
    update = METHODS["UpdateEvaluation"]
    alice = _principal({"proj-a"})
    authorize(alice, update, VariableFields({"evaluation.name": f"{APP_A}/evaluations/e"}))
    with pytest.raises(ServiceError, match="denied"):
        authorize(alice, update, VariableFields({"evaluation.name": "projects/proj-b/x"}))
    with pytest.raises(ServiceError, match="denied"):
        authorize(alice, update, VariableFields({}))
    authorize(alice, update, JsonFields({"evaluation": {"name": f"{APP_A}/evaluations/e"}}))
    authorize(
        alice,
        METHODS["ListEvaluationResults"],
        JsonFields({"parent": f"{APP_A}/evaluations/-", "pageSize": 3}),
    )
    for arguments in (
        {"evaluation": {"name": "projects/proj-b/locations/l/apps/a/evaluations/e"}},
        {"evaluation": "projects/proj-a"},
        {"evaluation": {"name": 7}},
        {},
    ):
        with pytest.raises(ServiceError, match="denied"):
            authorize(alice, update, JsonFields(arguments))


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("::1", True), ("localhost", True), ("0.0.0.0", False)],  # noqa: S104
)
def test_only_loopback_hosts_serve_without_authentication(host: str, loopback: bool) -> None:
    assert loopback_only(host) is loopback
    problem = exposure_problem(ServerConfig(host=host))
    assert (problem is None) is loopback
    if problem is not None:
        assert "--auth-tokens" in problem
        assert "--allow-unauthenticated" in problem
    assert exposure_problem(ServerConfig(host=host, allow_unauthenticated=True)) is None


def test_preflight_loads_the_token_file_or_says_what_is_wrong(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    path.write_text("tokens: []\n")
    path.chmod(0o600)
    with pytest.raises(StartupError) as raised:
        preflight(ServerConfig(host="0.0.0.0", auth_tokens=path))  # noqa: S104
    assert raised.value.status == ExitStatus.CONFIGURATION
    assert str(raised.value).startswith("--auth-tokens: ")
    assert "non-empty list" in str(raised.value)
    path.write_text(f"tokens:\n  - name: a\n    token: {TOKEN_A}\n    projects: ['*']\n")
    tokens = preflight(ServerConfig(host="0.0.0.0", auth_tokens=path))  # noqa: S104
    assert tokens is not None
