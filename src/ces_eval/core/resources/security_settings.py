"""A location's security settings (AgentService): a singleton of the location (AIP-156),
``projects/{project}/locations/{location}/securitySettings``, kept in a generic table.
GetSecuritySettings answers the stored settings, or the defaults (the name alone) where they
were never written; UpdateSecuritySettings sets them with an update mask and an etag (AIP-134,
AIP-154): :mod:`ces_eval.core.aip.singletons`. ces-eval calls no tool endpoint, so the
settings are kept and answered, not enforced (docs/semantics.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ces_eval.core.aip import singletons
from ces_eval.generated.google.cloud.ces.v1beta import agent_service_pb2, security_settings_pb2
from ces_eval.storage import tables

if TYPE_CHECKING:
    from ces_eval.access import Caller
    from ces_eval.core.aip.context import Context, Rpc

__all__ = ["RPCS", "SECURITY_SETTINGS"]

SecuritySettings = security_settings_pb2.SecuritySettings
SECURITY_SETTINGS = tables.declare(
    tables.Table("security_settings", SecuritySettings, unique_display_name=False)
)


async def get_security_settings(
    context: Context, request: agent_service_pb2.GetSecuritySettingsRequest, caller: Caller
) -> SecuritySettings:
    return await singletons.get(context, SECURITY_SETTINGS, request.name)


async def update_security_settings(
    context: Context, request: agent_service_pb2.UpdateSecuritySettingsRequest, caller: Caller
) -> SecuritySettings:
    return await singletons.update(context, SECURITY_SETTINGS, request, "security_settings")


RPCS: dict[str, Rpc] = {
    "GetSecuritySettings": get_security_settings,
    "UpdateSecuritySettings": update_security_settings,
}
