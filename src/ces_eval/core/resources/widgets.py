"""WidgetService (docs/sessions.md, "Chat tokens"; docs/security.md): GenerateChatToken issues a
token bound to one session and the deployment it names, good for an hour
(:mod:`ces_eval.access.chat_tokens`, signed under a key derived from the database's secret, so
every replica accepts it). A server with ``--auth-tokens`` accepts it for the session methods of
that session alone; an open server asks for no token at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from google.protobuf import timestamp_pb2

from ces_eval.access.chat_tokens import ChatTokens
from ces_eval.core.aip import names, standard
from ces_eval.core.resources import app_resources
from ces_eval.generated.google.cloud.ces.v1beta import widget_service_pb2

if TYPE_CHECKING:
    from ces_eval.access import Caller
    from ces_eval.core.aip.context import Context, Rpc

__all__ = ["RPCS", "chat_tokens"]


def chat_tokens(context: Context) -> ChatTokens:
    """The chat tokens of ``context``'s database (its page tokens' secret)."""
    return ChatTokens(context.page_tokens.secret)


async def generate_chat_token(
    context: Context, request: widget_service_pb2.GenerateChatTokenRequest, caller: Caller
) -> widget_service_pb2.GenerateChatTokenResponse:
    """GenerateChatToken: ``name`` a session, ``deployment`` a deployment of its app (both
    required; the deployment must exist)."""
    if not request.name:
        raise standard.invalid("name", "The session's name is required.")
    names.SESSION.parse(request.name, "name", owned=1)
    if not request.deployment:
        raise standard.invalid("deployment", "The deployment the session uses is required.")
    deployments = app_resources.DEPLOYMENTS
    deployments.pattern.parse(request.deployment, "deployment", owned=deployments.owned)
    if names.app_of(request.deployment) != names.app_of(request.name):
        raise standard.invalid("deployment", f"{request.deployment!r} is not in the session's app.")
    await standard.existing(context, deployments, request.deployment)
    issued = chat_tokens(context).issue(request.name, request.deployment)
    return widget_service_pb2.GenerateChatTokenResponse(
        chat_token=issued.token, expire_time=timestamp_pb2.Timestamp(seconds=issued.expires)
    )


RPCS: dict[str, Rpc] = {"GenerateChatToken": generate_chat_token}
