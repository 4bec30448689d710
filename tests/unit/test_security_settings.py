"""A location's security settings through the core, over a real SQLite file: the defaults of
settings never written, an update with a mask and an etag (AIP-134, AIP-154), output-only
fields ignored; and GenerateAppResource, which needs a model ces-eval does not have."""

from __future__ import annotations

from google.protobuf import field_mask_pb2

from ces_eval.errors import Code
from ces_eval.generated.google.cloud.ces.v1beta import agent_service_pb2, security_settings_pb2
from tests.unit.test_core import APP, Harness, core, violations

__all__ = ["core"]  # the fixture, used by name

NAME = "projects/p/locations/l/securitySettings"
Settings = security_settings_pb2.SecuritySettings
Policy = security_settings_pb2.EndpointControlPolicy
S = agent_service_pb2


def get(core: Harness, name: str = NAME) -> Settings:
    result: Settings = core.call("get_security_settings", S.GetSecuritySettingsRequest(name=name))
    return result


def update(core: Harness, settings: Settings, *paths: str) -> Settings:
    mask = field_mask_pb2.FieldMask(paths=paths) if paths else None
    result: Settings = core.call(
        "update_security_settings",
        S.UpdateSecuritySettingsRequest(security_settings=settings, update_mask=mask),
    )
    return result


def test_settings_never_written_are_the_defaults(core: Harness) -> None:
    assert get(core) == Settings(name=NAME)
    malformed = core.error(
        "get_security_settings", S.GetSecuritySettingsRequest(name="projects/p/securitySettings")
    )
    assert (malformed.code, violations(malformed)) == (Code.INVALID_ARGUMENT, ["name"])


def test_update_stores_masks_and_stamps(core: Harness) -> None:
    policy = Policy(enforcement_scope=Policy.ALWAYS, allowed_origins=["https://example.com"])
    given = Settings(name=NAME, endpoint_control_policy=policy)
    given.create_time.FromSeconds(5)  # output-only: ignored
    first = update(core, given)
    assert first.endpoint_control_policy == policy
    assert first.etag
    assert first.create_time == first.update_time and first.create_time.seconds != 5
    assert get(core) == first
    # A mask naming another field leaves the policy as it is.
    emptied = Settings(name=NAME, endpoint_control_policy=Policy())
    cleared = update(core, emptied, "endpoint_control_policy.allowed_origins")
    assert list(cleared.endpoint_control_policy.allowed_origins) == []
    assert cleared.endpoint_control_policy.enforcement_scope == Policy.ALWAYS
    assert cleared.create_time == first.create_time and cleared.etag != first.etag
    stale = core.error(
        "update_security_settings",
        S.UpdateSecuritySettingsRequest(security_settings=Settings(name=NAME, etag=first.etag)),
    )
    assert stale.code == Code.ABORTED
    unknown = core.error(
        "update_security_settings",
        S.UpdateSecuritySettingsRequest(
            security_settings=Settings(name=NAME),
            update_mask=field_mask_pb2.FieldMask(paths=["nope"]),
        ),
    )
    assert (unknown.code, violations(unknown)) == (Code.INVALID_ARGUMENT, ["update_mask"])
    other = "projects/p/locations/m/securitySettings"
    assert get(core, other) == Settings(name=other)  # one per location


def test_generate_app_resource_needs_a_model(core: Harness) -> None:
    for request in (
        S.GenerateAppResourceRequest(parent=APP),
        S.GenerateAppResourceRequest(),
    ):
        error = core.error("generate_app_resource", request)
        assert (error.code, error.reason) == (Code.FAILED_PRECONDITION, "MODEL_NOT_CONFIGURED")
        assert "needs a generative model" in error.message
        assert "ces-eval has none configured" in error.message
