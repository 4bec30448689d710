"""A background write load for crash and shutdown tests: threads creating evaluations over gRPC
until stopped, recording every acknowledged name."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import grpc
from google.longrunning import operations_pb2

from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.generated.google.cloud.ces.v1beta import (
    evaluation_service_pb2_grpc as service_grpc,
)

__all__ = ["FRESH_CONNECTION", "CreateLoad", "golden_evaluation", "list_names", "start_export"]

# Channel options giving each writer a connection of its own (several server processes).
FRESH_CONNECTION = (("grpc.use_local_subchannel_pool", 1),)


def golden_evaluation(display_name: str) -> evaluation_pb2.Evaluation:
    message = evaluation_pb2.Evaluation(display_name=display_name)
    message.golden.turns.add().steps.add().user_input.text = "hello"
    return message


def list_names(
    stub: service_grpc.EvaluationServiceStub, parent: str, page_size: int = 7
) -> list[str]:
    """Every evaluation under ``parent`` by name, page by page (tokens may cross servers)."""
    listed: list[str] = []
    token = ""
    while True:
        page = stub.ListEvaluations(
            service_pb2.ListEvaluationsRequest(
                parent=parent, page_size=page_size, page_token=token, order_by="name"
            ),
            timeout=10,
        )
        listed += [e.name for e in page.evaluations]
        token = page.next_page_token
        if not token:
            return listed


def start_export(
    target: str, parent: str, names: Sequence[str], options: Sequence[tuple[str, int]] = ()
) -> operations_pb2.Operation:
    """Start ExportEvaluations of ``names`` (evaluations and results) to ``gs://bucket/big``;
    the operation as first answered (not done yet, for data sets large enough)."""
    with grpc.insecure_channel(target, options=list(options)) as channel:
        operation: operations_pb2.Operation = service_grpc.EvaluationServiceStub(
            channel
        ).ExportEvaluations(
            service_pb2.ExportEvaluationsRequest(
                parent=parent,
                names=names,
                include_evaluations=True,
                include_evaluation_results=True,
                export_options=service_pb2.ExportOptions(gcs_uri="gs://bucket/big"),
            ),
            timeout=30,
        )
    return operation


class CreateLoad:
    """One thread per entry of ``targets`` creating evaluations under ``parent``. A writer whose
    target stops answering ends quietly when ``tolerate`` holds for that target (a server being
    stopped or killed); otherwise the error is kept and :meth:`stop` raises it."""

    def __init__(
        self,
        targets: Sequence[str],
        parent: str,
        tolerate: Sequence[str] = (),
        options: Sequence[tuple[str, int]] = (),
    ) -> None:
        self.acknowledged: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._errors: list[grpc.RpcError] = []
        self._threads = [
            threading.Thread(
                target=self._write,
                args=(target, parent, f"w{index}-", target in tolerate, list(options)),
            )
            for index, target in enumerate(targets)
        ]
        for thread in self._threads:
            thread.start()

    def _write(
        self,
        target: str,
        parent: str,
        prefix: str,
        tolerated: bool,
        options: list[tuple[str, int]],
    ) -> None:
        with grpc.insecure_channel(target, options=options) as channel:
            stub = service_grpc.EvaluationServiceStub(channel)
            index = 0
            while not self._stop.is_set():
                try:
                    created = stub.CreateEvaluation(
                        service_pb2.CreateEvaluationRequest(
                            parent=parent, evaluation=golden_evaluation(f"{prefix}{index}")
                        ),
                        timeout=10,
                    )
                except grpc.RpcError as error:
                    if not tolerated:
                        self._errors.append(error)
                    return  # the server stopped answering; unacknowledged writes may be lost
                with self._lock:
                    self.acknowledged.append(created.name)
                index += 1

    def wait_for(self, count: int, timeout: float = 60) -> None:
        """Block until ``count`` writes were acknowledged."""
        deadline = time.monotonic() + timeout
        while len(self.acknowledged) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(self.acknowledged)} of {count} writes acknowledged")
            time.sleep(0.02)

    def stop(self) -> list[str]:
        """Stop the writers; the acknowledged names."""
        self._stop.set()
        for thread in self._threads:
            thread.join(30)
        if self._errors:
            raise self._errors[0]
        return list(self.acknowledged)
