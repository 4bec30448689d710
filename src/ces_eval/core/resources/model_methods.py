"""Methods that need a generative model ces-eval does not have (GenerateAppResource, which
writes an app's agents, tools and instructions with the LLM assistant of hosted CES): each
answers FAILED_PRECONDITION, reason ``MODEL_NOT_CONFIGURED``, whatever the request, on every
surface (docs/semantics.md, "Methods that need a model"). They are implemented (not
UNIMPLEMENTED: the method exists, what it needs is missing), and README's methods table marks
them so (:func:`ces_eval.core.service.needs_model`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ces_eval.errors import Code, ServiceError

if TYPE_CHECKING:
    from google.protobuf.message import Message

    from ces_eval.access import Caller
    from ces_eval.core.aip.context import Context, Rpc

__all__ = ["RPCS", "NeedsModel"]


@dataclass(frozen=True)
class NeedsModel:
    """The implementation of RPC ``rpc``, which needs a model to ``purpose``."""

    rpc: str
    purpose: str

    async def __call__(self, context: Context, request: Message, caller: Caller) -> Message:
        raise ServiceError(
            Code.FAILED_PRECONDITION,
            f"{self.rpc} needs a generative model to {self.purpose}, and ces-eval has none "
            "configured for it; write the resources with their Create and Update methods.",
            "MODEL_NOT_CONFIGURED",
            {"method": self.rpc},
        )


RPCS: dict[str, Rpc] = {
    "GenerateAppResource": NeedsModel(
        "GenerateAppResource", "generate an app's agents, tools and instructions"
    ),
}
