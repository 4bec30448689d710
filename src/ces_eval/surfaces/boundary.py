"""The boundary every call crosses, on every surface, written once (docs/architecture.md).

A surface decodes its wire format into :class:`Inputs` (the credentials, the caller's claimed
name, a deadline) and a callable that decodes the request and calls the core; it encodes what
:meth:`Boundary.serve` returns: the response, or a :class:`~ces_eval.errors.ServiceError`. In
between, in this order:

1. **admission** (:mod:`ces_eval.admission`): a call beyond the surface's in-flight limit is
   refused at once with RESOURCE_EXHAUSTED ``TOO_MANY_REQUESTS``; the slot is held until the
   call ends, however it ends;
2. **authentication** (:func:`ces_eval.access.authentication.identify`), before anything of the
   request is parsed;
3. **the deadline**: a call past its ``X-Server-Timeout`` is DEADLINE_EXCEEDED (gRPC deadlines
   are grpc.aio's own: the handler is cancelled);
4. **the last-resort catch**: any exception but a ServiceError is a bug, logged once with its
   traceback and answered INTERNAL, reason ``INTERNAL`` (docs/semantics.md), never its text;
5. **the request line** (:mod:`ces_eval.logs`): the caller's name and the canonical code
   (CANCELLED, or DEADLINE_EXCEEDED when the call's own deadline passed, for a call cancelled
   under it). HTTP requests bring their line in the ASGI scope (``HttpRequestLog`` writes it
   with the HTTP status); a boundary given a :class:`~ces_eval.logs.RequestLog` (gRPC) starts
   and writes the lines of its calls (:meth:`Boundary.start`, :meth:`Boundary.finish`).

MCP authenticates and admits per HTTP request but calls per tool, so its endpoint uses the steps
one by one (:meth:`Boundary.enter`, :meth:`Boundary.authenticate`, :meth:`Boundary.run`).
A streaming call (StreamRunSession, BidiRunSession) goes through the same steps once, in
:meth:`Boundary.stream`: its slot is held while the stream lasts, however it ends (its last
response, an error, the client's cancel or deadline, the server's drain); its request line is
written once it has ended.
Body limits come before the boundary, for the HTTP surfaces only
(:class:`~ces_eval.surfaces.http_app.BodyLimit`): a body still arriving holds no slot.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Final, TypeVar

from ces_eval.access import identify
from ces_eval.admission import deadline_exceeded, within
from ces_eval.errors import Code, ServiceError
from ces_eval.logs import RequestLog

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from ces_eval.access import Caller, Tokens
    from ces_eval.admission import Admission
    from ces_eval.logs import Call

__all__ = ["INTERNAL_MESSAGE", "Boundary", "Inputs", "internal_error"]

T = TypeVar("T")

_log = logging.getLogger(__name__)
INTERNAL_MESSAGE: Final = "Internal error; see the server log."


def internal_error() -> ServiceError:
    """What a client is told of a bug: INTERNAL, reason ``INTERNAL``, nothing of its cause."""
    return ServiceError(Code.INTERNAL, INTERNAL_MESSAGE, "INTERNAL")


@dataclass(slots=True)  # not frozen: a frozen dataclass costs twice as much to build, per call
class Inputs:
    """What a surface decoded of a call for the boundary: the ``Authorization`` value, the
    ``x-goog-user`` value, and the seconds the call may take (None: no bound of ours)."""

    authorization: str | None = None
    user: str | None = None
    deadline: float | None = None


class Boundary:
    """The boundary of one surface (``"grpc"``, ``"rest"``, ``"mcp"``): ``tokens`` the
    ``--auth-tokens`` table (None: an open server), ``admission`` its in-flight limit (None: no
    limit), ``log`` the request log of a surface whose calls bring no line of their own."""

    __slots__ = ("admission", "log", "surface", "tokens")

    def __init__(
        self,
        surface: str,
        *,
        tokens: Tokens | None = None,
        admission: Admission | None = None,
        log: RequestLog | None = None,
    ) -> None:
        self.surface = surface
        self.tokens = tokens
        self.admission = admission
        self.log = log

    def start(self, what: str) -> Call | None:
        """A request line for a call named ``what``; None without a request log."""
        return None if self.log is None else RequestLog.start(self.surface, what)

    def finish(self, line: Call | None) -> None:
        """Write the line :meth:`start` began (once the call has ended, however it ended)."""
        if line is not None and self.log is not None:
            if line.code is None:
                line.code = Code.OK
            self.log.finish(line)

    def enter(self) -> ServiceError | None:
        """Take an in-flight slot: None when taken (give it back with :meth:`leave`), else the
        refusal (nothing taken)."""
        admission = self.admission
        if admission is None or admission.enter():
            return None
        return admission.refused

    def leave(self) -> None:
        """Give back the slot :meth:`enter` took."""
        if self.admission is not None:
            self.admission.leave()

    def authenticate(
        self, line: Call | None, authorization: str | None, user: str | None
    ) -> Caller:
        """The caller, or UNAUTHENTICATED (with ``--auth-tokens``); the request line records
        its name."""
        caller = identify(self.tokens, authorization, user)
        if line is not None:
            line.caller = caller.user
        return caller

    def _failed(self, line: Call | None, what: str, raised: Exception) -> ServiceError:
        """The answer to ``raised``: itself when a ServiceError, else INTERNAL (logged here,
        once, naming ``what``: the last-resort catch); the request line records its code."""
        if isinstance(raised, ServiceError):
            failed = raised
        else:
            _log.error("unexpected error serving %s %s", self.surface, what, exc_info=raised)
            failed = internal_error()
        if line is not None:
            line.code = failed.code
        return failed

    async def run(
        self,
        line: Call | None,
        what: str,
        work: Callable[[], Awaitable[T]],
        expired: Callable[[], bool] | None = None,
    ) -> T | ServiceError:
        """The body of every call: ``work()``'s result, or the ServiceError it raised, or
        INTERNAL for any other exception (the last-resort catch); the request line records the
        code (CANCELLED when the call is cancelled, DEADLINE_EXCEEDED when ``expired()`` says
        its own deadline passed). :meth:`serve` runs each call of gRPC, REST and the web view
        through it; MCP's endpoint, which admits and authenticates per HTTP request, each
        tool call."""
        try:
            result = await work()
        except asyncio.CancelledError:
            if line is not None:
                late = expired is not None and expired()
                line.code = Code.DEADLINE_EXCEEDED if late else Code.CANCELLED
            raise
        except Exception as raised:  # noqa: BLE001 - the last-resort catch (_failed)
            return self._failed(line, what, raised)
        if line is not None:
            line.code = Code.OK
        return result

    async def serve(
        self,
        what: str,
        inputs: Callable[[], Inputs],
        work: Callable[[Caller], Awaitable[T]],
        *,
        line: Call | None = None,
        expired: Callable[[], bool] | None = None,
    ) -> T | ServiceError:
        """One call, through every step of the module: ``what`` names it (the method path, or
        ``VERB /path``); ``inputs`` decodes what the boundary needs (its ServiceError is the
        answer); ``work`` decodes the request and calls the core for the authenticated caller.
        ``line``: the call's request line, if it has one; ``expired``: whether the call's own
        deadline has passed, once it is cancelled."""
        if line is not None:  # an HTTP request's line, begun before its surface was known
            line.surface = self.surface
        refused = self.enter()
        if refused is not None:
            if line is not None:
                line.code = refused.code
            return refused
        try:
            return await self.run(line, what, partial(self._called, line, inputs, work), expired)
        finally:
            self.leave()

    def _called(
        self,
        line: Call | None,
        inputs: Callable[[], Inputs],
        work: Callable[[Caller], Awaitable[T]],
    ) -> Awaitable[T]:
        """``work`` for the caller ``inputs`` authenticate, within their deadline (run inside
        :meth:`run`, whose catch answers what this raises)."""
        given = inputs()
        caller = self.authenticate(line, given.authorization, given.user)
        call = work(caller)
        return call if given.deadline is None else within(given.deadline, call)

    async def stream(
        self,
        what: str,
        inputs: Callable[[], Inputs],
        work: Callable[[Caller], AsyncIterator[T]],
        *,
        line: Call | None = None,
        expired: Callable[[], bool] | None = None,
    ) -> AsyncIterator[T]:
        """A streaming call through every step of :meth:`serve`, once: its responses as
        ``work`` yields them. Raises the ServiceError that ends it (a refusal, the caller's,
        the deadline's, or INTERNAL for any other exception: the last-resort catch); the
        in-flight slot is given back however the stream ends, a cancel or a consumer that
        stops reading included. A deadline (``X-Server-Timeout``) bounds the whole stream."""
        if line is not None:
            line.surface = self.surface
        refused = self.enter()
        if refused is not None:
            if line is not None:
                line.code = refused.code
            raise refused
        try:
            given = inputs()
            caller = self.authenticate(line, given.authorization, given.user)
            responses = work(caller)
            if given.deadline is not None:
                responses = _within(given.deadline, responses)
            async for response in responses:
                yield response
        except (asyncio.CancelledError, GeneratorExit):
            if line is not None:
                late = expired is not None and expired()
                line.code = Code.DEADLINE_EXCEEDED if late else Code.CANCELLED
            raise
        except Exception as raised:  # noqa: BLE001 - the last-resort catch (_failed)
            raise self._failed(line, what, raised) from None
        else:
            if line is not None:
                line.code = Code.OK
        finally:
            self.leave()


async def _within(seconds: float, responses: AsyncIterator[T]) -> AsyncIterator[T]:
    """``responses`` until ``seconds`` have passed, then DEADLINE_EXCEEDED (the stream is
    then cancelled where it waits)."""
    loop = asyncio.get_running_loop()
    until = loop.time() + seconds
    while True:
        try:
            async with asyncio.timeout_at(until):
                response = await anext(responses)
        except StopAsyncIteration:
            return
        except TimeoutError:
            if loop.time() < until:
                raise  # the work's own
            raise deadline_exceeded(seconds) from None
        yield response
