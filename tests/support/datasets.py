"""Data sets written straight through the storage layer (fast: one transaction)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from tests.support import samples

if TYPE_CHECKING:
    from ces_eval.storage.base import Storage

__all__ = ["seed_large"]


def seed_large(storage: Storage, app: str, evaluations: int, results_each: int) -> list[str]:
    """``evaluations`` evaluations under ``app`` with ``results_each`` fully populated results
    each (seven runs, two app versions); returns the evaluation names. Opens and closes
    ``storage``."""
    bundle_evaluations = []
    bundle_results = []
    for e in range(evaluations):
        evaluation = evaluation_pb2.Evaluation(
            name=f"{app}/evaluations/e{e}", display_name=f"E{e}", etag=f"etag{e}"
        )
        evaluation.golden.turns.add().steps.add().user_input.text = "hello"
        evaluation.create_time.FromSeconds(1_700_000_000 + e)
        evaluation.update_time.FromSeconds(1_700_000_000 + e)
        bundle_evaluations.append(evaluation)
        for r in range(results_each):
            result = samples.populate(evaluation_pb2.EvaluationResult(), r % 3)
            result.name = f"{evaluation.name}/results/r{r}"
            result.display_name = f"R{r}"
            result.evaluation_run = f"{app}/evaluationRuns/run-{r % 7}"
            result.app_version = f"{app}/versions/v{r % 2}"
            bundle_results.append(result)

    async def write() -> None:
        await storage.open()
        try:
            await storage.import_bundle(bundle_evaluations, bundle_results)
        finally:
            await storage.close()

    asyncio.run(write())
    return [e.name for e in bundle_evaluations]
