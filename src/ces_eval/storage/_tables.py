"""How resources map to table rows, shared by the SQL backends.

Both backends keep the same tables (``evaluations``, ``evaluation_results``, ``operations``) with
the same columns; they differ in column types (:mod:`._dialect` holds the SQL text of each). This
module holds what does not differ: the filterable columns, the conversion of messages to rows and
back, and the upkeep of the derived fields' blob and metrics tally.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from ces_eval import filtering
from ces_eval.generated.google.cloud.ces.v1beta import common_pb2, evaluation_pb2
from ces_eval.storage import derived
from ces_eval.storage.errors import TooLarge

if TYPE_CHECKING:
    from collections.abc import Iterable

    from google.protobuf import timestamp_pb2
    from google.protobuf.descriptor import EnumDescriptor

    from ces_eval.storage.derived import Tally

__all__ = [
    "EVALUATION_COLUMNS",
    "EVALUATION_FILTER_FIELDS",
    "RESULT_COLUMNS",
    "RESULT_FILTER_FIELDS",
    "derived_blob",
    "evaluation_bytes",
    "evaluation_from_row",
    "evaluation_row",
    "expectations_of",
    "micros",
    "now_micros",
    "refuse_growth",
    "result_row",
    "tally_change",
    "tally_json",
    "tally_of",
    "updated_tally",
]

_Result = evaluation_pb2.EvaluationResult
_Evaluation = evaluation_pb2.Evaluation


def micros(timestamp: timestamp_pb2.Timestamp) -> int:
    return int(timestamp.seconds) * 1_000_000 + int(timestamp.nanos) // 1000


def now_micros() -> int:
    """This process's clock, in the unit of the time columns."""
    return time.time_ns() // 1000


def _enum_values(enum: EnumDescriptor) -> dict[str, int]:
    return {value.name: value.number for value in enum.values}


def _specs(
    table: str, specs: dict[str, tuple[str, filtering.FieldKind, dict[str, int]]]
) -> dict[str, filtering.FieldSpec]:
    """Filter fields by proto name and by JSON name, with columns qualified by ``table``."""
    out: dict[str, filtering.FieldSpec] = {}
    for name, (column, kind, values) in specs.items():
        spec = filtering.FieldSpec(column=f"{table}.{column}", kind=kind, enum_values=values)
        out[name] = spec
        head, *rest = name.split("_")
        out[head + "".join(part.title() for part in rest)] = spec
    return out


_K = filtering.FieldKind
EVALUATION_FILTER_FIELDS = _specs(
    "evaluations",
    {
        "name": ("name", _K.STRING, {}),
        "display_name": ("display_name", _K.STRING, {}),
        "description": ("description", _K.STRING, {}),
        "create_time": ("create_time", _K.TIMESTAMP, {}),
        "update_time": ("update_time", _K.TIMESTAMP, {}),
        "created_by": ("created_by", _K.STRING, {}),
        "last_updated_by": ("last_updated_by", _K.STRING, {}),
        "tags": ("tags", _K.STRING_LIST, {}),
        "evaluation_datasets": ("evaluation_datasets", _K.STRING_LIST, {}),
        "evaluation_expectations": ("evaluation_expectations", _K.STRING_LIST, {}),
    },
)
_RESULT_SPECS: dict[str, tuple[str, filtering.FieldKind, dict[str, int]]] = {
    "name": ("name", _K.STRING, {}),
    "evaluation": ("evaluation", _K.STRING, {}),
    "display_name": ("display_name", _K.STRING, {}),
    "create_time": ("create_time", _K.TIMESTAMP, {}),
    "evaluation_run": ("evaluation_run", _K.STRING, {}),
    "execution_state": (
        "execution_state",
        _K.ENUM,
        _enum_values(_Result.DESCRIPTOR.enum_types_by_name["ExecutionState"]),
    ),
    "evaluation_status": (
        "evaluation_status",
        _K.ENUM,
        _enum_values(_Result.DESCRIPTOR.enum_types_by_name["Outcome"]),
    ),
    "app_version": ("app_version", _K.STRING, {}),
    "initiated_by": ("initiated_by", _K.STRING, {}),
    "golden_run_method": (
        "golden_run_method",
        _K.ENUM,
        _enum_values(common_pb2.DESCRIPTOR.enum_types_by_name["GoldenRunMethod"]),
    ),
}
RESULT_FILTER_FIELDS = _specs("evaluation_results", _RESULT_SPECS)

# Column order of evaluation_row / result_row, for INSERT and UPDATE statements. The first two
# (evaluations) or three (results) are the identity, never updated.
EVALUATION_COLUMNS = (
    "name",
    "app",
    "display_name",
    "description",
    "create_time",
    "update_time",
    "created_by",
    "last_updated_by",
    "tags",
    "evaluation_datasets",
    "evaluation_expectations",
    "etag",
    "data",
)
RESULT_COLUMNS = (
    "name",
    "evaluation",
    "app",
    "display_name",
    "create_time",
    "update_time",
    "evaluation_run",
    "execution_state",
    "evaluation_status",
    "app_version",
    "initiated_by",
    "golden_run_method",
    "data",
)


def evaluation_row(evaluation: _Evaluation) -> tuple[object, ...]:
    """The values of EVALUATION_COLUMNS; string lists are JSON arrays."""
    base = _Evaluation()
    base.CopyFrom(evaluation)
    # Fields computed from results (stored apart, in ``derived``, or read on demand) and the
    # etag (a column of its own) are never part of the ``data`` blob.
    for field in derived.FIELDS:
        base.ClearField(field)
    base.ClearField("last_ten_results")
    base.ClearField("etag")
    return (
        evaluation.name,
        evaluation.name.rsplit("/evaluations/", 1)[0],
        evaluation.display_name,
        evaluation.description,
        micros(evaluation.create_time),
        micros(evaluation.update_time),
        evaluation.created_by,
        evaluation.last_updated_by,
        json.dumps(list(evaluation.tags)),
        json.dumps(list(evaluation.evaluation_datasets)),
        json.dumps(expectations_of(evaluation)),
        evaluation.etag,
        base.SerializeToString(deterministic=True),
    )


def expectations_of(evaluation: _Evaluation) -> list[str]:
    """The evaluation expectations ``evaluation`` names (its golden's or its scenario's)."""
    inputs = evaluation.WhichOneof("inputs")
    if inputs is None:
        return []
    return list(getattr(evaluation, inputs).evaluation_expectations)


def evaluation_from_row(data: bytes, derived: bytes, etag: str) -> _Evaluation:
    """The evaluation as served from its row (:func:`evaluation_bytes`, parsed)."""
    return _Evaluation.FromString(evaluation_bytes(data, derived, etag))


def evaluation_bytes(data: bytes, derived: bytes, etag: str) -> bytes:
    """The wire bytes of the evaluation served from its row, unparsed: serialized protobuf
    messages merge when concatenated, and the blobs and the etag hold disjoint fields."""
    tail = _Evaluation(etag=etag).SerializeToString() if etag else b""
    return b"".join((bytes(data), bytes(derived) if derived else b"", tail))


def refuse_growth(
    evaluation: str,
    stored: tuple[int, int, str],
    derived: bytes,
    etag: str,
    max_bytes: int | None,
) -> None:
    """Raise TooLarge when the evaluation whose row holds ``stored`` (the lengths of its data
    and derived blobs, its etag) would, served with the new ``derived`` blob and ``etag``, be
    larger than ``max_bytes`` and larger than it was. Its blobs hold disjoint fields, so its
    size as served is their lengths plus the etag's field: no blob is read or parsed."""
    if max_bytes is None:
        return
    data_length, derived_length, old_etag = stored
    before = data_length + derived_length + _Evaluation(etag=old_etag).ByteSize()
    after = data_length + len(derived) + _Evaluation(etag=etag).ByteSize()
    if after > max_bytes and after > before:
        raise TooLarge(evaluation, after)


def derived_blob(tally: Tally, runs: list[str], last_completed: bytes | None) -> bytes:
    """The ``derived`` column: the evaluation fields computed from its results — metrics
    rendered from the summed tallies, runs newest first, the newest completed result."""
    message = _Evaluation(aggregated_metrics=derived.render_tally(tally), evaluation_runs=runs)
    if last_completed is not None:
        message.last_completed_result.MergeFromString(last_completed)
    return message.SerializeToString(deterministic=True)


def tally_change(new: _Result | None, old: _Result | None) -> Tally:
    """How a write changes its evaluation's metrics tally: ``new`` stored, ``old`` gone."""
    change: Tally = {}
    if new is not None:
        derived.add_tally(change, derived.contribution(new))
    if old is not None:
        derived.add_tally(change, derived.contribution(old), sign=-1)
    return change


def tally_of(results: Iterable[bytes]) -> Tally:
    """The summed tally of serialized results (rows stored before incremental upkeep)."""
    total: Tally = {}
    for data in results:
        derived.add_tally(total, derived.contribution(_Result.FromString(bytes(data))))
    return total


def updated_tally(stored: str, change: Tally) -> Tally:
    """The tally after ``change``: the stored JSON plus the change."""
    tally: Tally = json.loads(stored)
    derived.add_tally(tally, change)
    return tally


def tally_json(tally: Tally) -> str:
    return json.dumps(tally, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def result_row(result: _Result) -> tuple[object, ...]:
    """The values of RESULT_COLUMNS; update_time is the moment of the write."""
    evaluation = result.name.rsplit("/results/", 1)[0]
    return (
        result.name,
        evaluation,
        evaluation.rsplit("/evaluations/", 1)[0],
        result.display_name,
        micros(result.create_time),
        now_micros(),
        result.evaluation_run,
        int(result.execution_state),
        int(result.evaluation_status),
        result.app_version,
        result.initiated_by,
        int(result.golden_run_method),
        result.SerializeToString(deterministic=True),
    )
