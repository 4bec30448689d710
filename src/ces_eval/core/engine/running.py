"""RunEvaluation: the run engine (docs/semantics.md, "Evaluation runs").

RunEvaluation checks its request (:func:`request_violations`, then :func:`verify` against what
is stored), stores a new EvaluationRun, QUEUED, and starts an operation (RunEvaluationResponse,
RunEvaluationOperationMetadata) whose work plays the run:

* The plan: each evaluation (those listed, or the dataset's, in their order) runs
  ``run_count`` times, by default once for a golden and five times for a scenario; a scenario
  run with ``persona_run_configs`` runs ``task_count`` times (``run_count`` when 0) for each
  persona instead, and without them under the default persona. With SKIP_IF_UNCHANGED caching,
  an evaluation whose last completed result is newer than its last change is not played: that
  result is reused once (copied into this run). ``progress.total_count`` is the plan's size.
* The run stays QUEUED while it waits for an operation slot and while an unreleased QUEUED
  hold of an outcome rule matches one of its evaluations; then it is RUNNING.
* Each repetition is played against the app's own agent when it has one and no outcome rule
  decides the repetition (:mod:`ces_eval.core.engine.agents`, docs/agents.md), else by
  :func:`ces_eval.core.engine.outcomes.play` under the outcome rule that decides it, after the
  longest delay of the matching rules, and not while an unreleased RUNNING hold matches its
  evaluation. Against the agent, several repetitions play at once (docs/agents.md,
  "Concurrency": the endpoint's ``max_concurrent_sessions``, fewer while the agent pushes
  back, and the server's ``--agent-sessions`` across runs), in a fixed pool of workers each
  taking the plan's next repetition; a delay or a hold waits in its worker only. Without an
  agent the plan is played in order, one repetition after another.
  Results are stored in batches as they land (in the order they end), each with the run's
  progress, summaries and result list in one transaction (Storage.record_run): progress
  never counts a result that is not stored, and each evaluation's derived fields follow.
* The run's byte budget (:data:`limits.MAX_RUN_BYTES`: its results and conversations as
  stored): a plan whose repetitions cannot fit, each at least what its result repeats of its
  evaluation, is refused at the request (:func:`plan_violations` for schedules); while
  playing, a result (with its conversation) that would pass the budget is not stored: what
  was played before it is, and the run ends ERROR saying so (an agent's answers may make
  results larger than their evaluations).
* The run ends COMPLETED, with its latency report when asked. Cancelled (CancelOperation):
  every session in flight is stopped at once (its calls aborted), every repetition not
  stored yet is stored CANCELLED and the run is CANCELLED. Stopped with
  the server: the run ends ERROR and its operation UNAVAILABLE; a server that died mid-run
  leaves both to the next start (or another replica), which ends them in the same way. A
  failure of the work itself (an evaluation deleted meanwhile, a result too large to store)
  ends the run ERROR with the reason in ``error_info``.

The checks are shared with the schedules that store a RunEvaluationRequest
(:mod:`ces_eval.core.engine.scheduled_runs`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from ces_eval.contract import limits
from ces_eval.core.aip import names, standard, validation
from ces_eval.core.aip.names import DEFAULT_PERSONA, location_of
from ces_eval.core.aip.retry import Changed, rewrite
from ces_eval.core.aip.stamps import new_etag, now
from ces_eval.core.engine import agents, app_settings, outcomes, recording, sessions
from ces_eval.core.resources import agent_endpoints, outcome_rules, versions
from ces_eval.core.resources.datasets import DATASETS
from ces_eval.core.resources.evaluations import EVALUATIONS
from ces_eval.errors import Code, FieldViolation, ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import (
    common_pb2,
    evaluation_config_pb2,
    evaluation_pb2,
)
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.storage import tables
from ces_eval.storage.base import EtagMismatch, Missing, Replace, TooLarge

if TYPE_CHECKING:
    from collections.abc import Coroutine, Sequence

    from google.longrunning import operations_pb2
    from google.protobuf import timestamp_pb2

    from ces_eval.access import Caller
    from ces_eval.core.aip.context import Context, Rpc
    from ces_eval.generated.google.cloud.ces.v1beta.conversation_pb2 import Conversation

__all__ = [
    "RPCS",
    "Prepared",
    "plan_violations",
    "prepare",
    "refused_run",
    "request_violations",
    "verify",
]

Run = evaluation_pb2.EvaluationRun
_Result = evaluation_pb2.EvaluationResult
_Evaluation = evaluation_pb2.Evaluation
_Rule = outcome_rules.Rule
_ErrorInfo = evaluation_config_pb2.EvaluationErrorInfo
_Caching = common_pb2.EvaluationRunCachingSettings
_SCHEDULED_TYPE = names.of(evaluation_pb2.ScheduledEvaluationRun).type
_GOLDEN_RUNS, _SCENARIO_RUNS = 1, 5  # the client's documented defaults of run_count
# Results are stored in batches: at most this many per transaction, and at least every
# _FLUSH_EVERY seconds, so a poller sees progress that is never older than that.
_BATCH = 500
_FLUSH_EVERY = 0.25
_BATCH_BYTES = 16 * 1024 * 1024  # and once a batch holds this many bytes
_HOLD_POLL = 0.1  # seconds between two looks at a hold
_VERB = "run"
_SHUT_DOWN = "The server shut down before this run finished; run the evaluations again."


def request_violations(
    request: evaluation_pb2.RunEvaluationRequest, path: str, app: str
) -> list[FieldViolation]:
    """What RunEvaluation refuses in ``request`` (at ``path``, "" for the request itself)
    without reading storage: names outside ``app``, not exactly one of ``evaluations`` and
    ``evaluation_dataset``, a repeated evaluation, a ``run_count`` below 1, a negative
    ``task_count``."""
    found = validation.reference_violations(request, path, app)
    if request.evaluations and request.evaluation_dataset:
        found.append(
            FieldViolation(
                validation.under(path, "evaluation_dataset"),
                "Give either evaluations or evaluation_dataset, not both.",
                "CONFLICT",
            )
        )
    elif not request.evaluations and not request.evaluation_dataset:
        found.append(
            FieldViolation(
                validation.under(path, "evaluations"),
                "Give evaluations or an evaluation_dataset.",
                "REQUIRED",
            )
        )
    first_at: dict[str, int] = {}
    for index, name in enumerate(request.evaluations):
        if name in first_at:
            found.append(
                FieldViolation(
                    validation.under(path, f"evaluations[{index}]"),
                    f"Already listed at evaluations[{first_at[name]}].",
                    "DUPLICATE",
                )
            )
        first_at.setdefault(name, index)
    if request.HasField("run_count") and request.run_count < 1:
        found.append(
            FieldViolation(
                validation.under(path, "run_count"),
                f"Must be at least 1 when set; got {request.run_count}.",
                "OUT_OF_RANGE",
            )
        )
    for index, persona in enumerate(request.persona_run_configs):
        if persona.task_count < 0:
            found.append(
                FieldViolation(
                    validation.under(path, f"persona_run_configs[{index}].task_count"),
                    f"Must not be negative; got {persona.task_count}.",
                    "OUT_OF_RANGE",
                )
            )
    return found


async def verify(
    context: Context, request: evaluation_pb2.RunEvaluationRequest, path: str, app: str
) -> list[FieldViolation]:
    """The evaluations (or the dataset) ``request`` runs exist now (reason NOT_FOUND for each
    that does not; their form and app were checked by :func:`request_violations`)."""
    found = await standard.references(
        context,
        EVALUATIONS,
        request.evaluations,
        validation.under(path, "evaluations"),
        app,
    )
    if request.evaluation_dataset:
        found += await standard.references(
            context,
            DATASETS,
            [request.evaluation_dataset],
            validation.under(path, "evaluation_dataset"),
            app,
            repeated=False,
        )
    return found


def _not_found(violations: Sequence[FieldViolation]) -> ServiceError:
    """NOT_FOUND naming every missing resource of the request (the first in ResourceInfo)."""
    missing = [v.description.rsplit(" does not exist", 1)[0] for v in violations]
    first = missing[0].split(" ", 1)
    resource = names.by_type(f"ces.googleapis.com/{first[0]}")
    return ServiceError(
        Code.NOT_FOUND,
        "; ".join(f"{v.field}: {v.description}" for v in violations),
        "RESOURCE_NOT_FOUND",
        {"resource": first[-1], "resources": ",".join(m.split(" ", 1)[-1] for m in missing)},
        violations=violations,
        resource=(resource.type if resource else first[0], first[-1]),
    )


@dataclass(frozen=True)
class _Task:
    """One repetition of the plan: which evaluation, which of its ``count`` repetitions, under
    which persona (scenarios), or the result it reuses (SKIP_IF_UNCHANGED)."""

    evaluation: _Evaluation
    repetition: int
    count: int
    persona: str = ""
    reuse: _Result | None = None


def _is_scenario(evaluation: _Evaluation) -> bool:
    return evaluation.WhichOneof("inputs") == "scenario"


def _unchanged_since(evaluation: _Evaluation) -> _Result | None:
    """The evaluation's last completed result when nobody changed the evaluation after it."""
    if not evaluation.HasField("last_completed_result"):
        return None
    last = evaluation.last_completed_result
    changed = evaluation.update_time.ToNanoseconds()
    return last if last.create_time.ToNanoseconds() >= changed else None


def _plan(
    request: evaluation_pb2.RunEvaluationRequest,
    evaluations: Sequence[_Evaluation],
    default_persona: str,
    *,
    reuse: bool = True,
) -> list[_Task]:
    """Every repetition the run plays, in order (see the module), a scenario without persona
    configurations under ``default_persona``; with ``reuse`` False, as if no last result could
    be reused (a schedule's plan: its evaluations may change before it fires)."""
    caching = request.evaluation_run_caching_settings.run_caching_mode
    tasks: list[_Task] = []
    for evaluation in evaluations:
        reusing = reuse and caching == _Caching.SKIP_IF_UNCHANGED
        reused = _unchanged_since(evaluation) if reusing else None
        if reused is not None:
            tasks.append(_Task(evaluation, 0, 1, reuse=reused))
            continue
        scenario = _is_scenario(evaluation)
        default = _SCENARIO_RUNS if scenario else _GOLDEN_RUNS
        runs = request.run_count if request.HasField("run_count") else default
        if not scenario:
            tasks += [_Task(evaluation, index, runs) for index in range(runs)]
            continue
        personas = [
            (config.persona or default_persona, config.task_count or runs)
            for config in request.persona_run_configs
        ] or [(default_persona, runs)]
        count = sum(times for _, times in personas)
        repetition = 0
        for persona, times in personas:
            for _ in range(times):
                tasks.append(_Task(evaluation, repetition, count, persona))
                repetition += 1
    return tasks


def _plan_field(request: evaluation_pb2.RunEvaluationRequest) -> str:
    """The request's field that sets the size of its plan, where a plan too large is refused."""
    if request.HasField("run_count"):
        return "run_count"
    return "evaluation_dataset" if request.evaluation_dataset else "evaluations"


def _repeated_size(evaluation: _Evaluation) -> int:
    """Bytes each repetition of ``evaluation`` stores at least: what its result and its
    conversation repeat of it (a golden's steps; a scenario's task, rubrics and scenario
    expectations), counted once. Its other fields (descriptions, traces, variables) are not
    repeated, and a rule or an agent can only add to it."""
    if _is_scenario(evaluation):
        scenario = evaluation.scenario
        texts = [scenario.task, *scenario.rubrics]
        return sum(len(text.encode()) for text in texts) + sum(
            expected.ByteSize() for expected in scenario.scenario_expectations
        )
    return sum(step.ByteSize() for turn in evaluation.golden.turns for step in turn.steps)


def _size_violations(
    request: evaluation_pb2.RunEvaluationRequest, tasks: Sequence[_Task], path: str
) -> list[FieldViolation]:
    """``tasks`` (the plan of ``request``) hold more results than a run may (TOO_MANY), or
    cannot fit the run's byte budget (TOO_LARGE): each repetition stores at least
    :func:`_repeated_size` of its evaluation, a reused result its own size. At ``path``'s
    field that sets the plan's size."""
    at = validation.under(path, _plan_field(request))
    if len(tasks) > limits.MAX_RUN_RESULTS:
        return [
            FieldViolation(
                at,
                f"The run would produce {len(tasks)} results; at most "
                f"{limits.MAX_RUN_RESULTS} are allowed.",
                "TOO_MANY",
            )
        ]
    sizes: dict[str, int] = {}
    estimate = 0
    for task in tasks:
        if task.reuse is not None:
            estimate += task.reuse.ByteSize()
            continue
        name = task.evaluation.name
        if name not in sizes:
            sizes[name] = _repeated_size(task.evaluation)
        estimate += sizes[name]
    if estimate <= limits.MAX_RUN_BYTES:
        return []
    return [
        FieldViolation(
            at,
            f"The run's {len(tasks)} results would store at least {estimate} bytes (each "
            f"repeats its evaluation's turns or scenario); a run stores at most "
            f"{limits.MAX_RUN_BYTES} bytes. "
            f"Run fewer repetitions, or smaller evaluations.",
            "TOO_LARGE",
        )
    ]


async def plan_violations(
    context: Context, request: evaluation_pb2.RunEvaluationRequest, path: str, app: str
) -> list[FieldViolation]:
    """What RunEvaluation would refuse of ``request``'s plan with the evaluations as stored
    now (TOO_MANY, TOO_LARGE: :func:`_size_violations`), as for a schedule: no result reused.
    The evaluations' existence is :func:`verify`'s to report; missing ones count for nothing
    here, as does a dataset that lists none yet."""
    listed = list(request.evaluations)
    if request.evaluation_dataset:
        dataset = await context.storage.get_row(tables.DATASETS, request.evaluation_dataset)
        listed = list(dataset.evaluations) if dataset is not None else []
    evaluations = [
        evaluation
        for name in listed
        if (evaluation := await context.storage.get_evaluation(name)) is not None
    ]
    persona = f"{app}/evaluationPersonas/{DEFAULT_PERSONA}"  # any: only the count matters
    return _size_violations(request, _plan(request, evaluations, persona, reuse=False), path)


def _evaluation_type(evaluations: Sequence[_Evaluation]) -> Run.EvaluationType.ValueType:
    kinds = {_is_scenario(evaluation) for evaluation in evaluations}
    if kinds == {True}:
        return Run.SCENARIO
    return Run.GOLDEN if kinds == {False} else Run.MIXED


def _error(error_type: _ErrorInfo.ErrorType.ValueType, message: str) -> _ErrorInfo:
    return _ErrorInfo(error_type=error_type, error_message=message)


@dataclass
class _Latencies:
    """The latencies the run measured, for its latency report: per tool, and the sessions."""

    tools: dict[str, tuple[str, list[int]]] = field(default_factory=dict)
    sessions: int = 0

    def add(self, result: _Result) -> None:
        if result.execution_state != _Result.COMPLETED:
            return
        self.sessions += 1
        kind = result.WhichOneof("result")
        entries = (
            [
                entry
                for turn in result.golden_result.turn_replay_results
                for entry in turn.tool_call_latencies
            ]
            if kind == "golden_result"
            else list(result.scenario_result.tool_call_latencies)
        )
        for entry in entries:
            if entry.tool and entry.HasField("execution_latency"):
                _, measured = self.tools.setdefault(entry.tool, (entry.display_name, []))
                measured.append(entry.execution_latency.ToNanoseconds())

    def report(self) -> evaluation_pb2.LatencyReport:
        """Percentiles by nearest rank over every measured call, tools sorted by name."""
        report = evaluation_pb2.LatencyReport(session_count=self.sessions)
        for tool in sorted(self.tools):
            display, measured = self.tools[tool]
            metrics = report.tool_latencies.add(tool=tool, tool_display_name=display)
            metrics.latency_metrics.call_count = len(measured)
            ordered = sorted(measured)
            for target, percent in (
                (metrics.latency_metrics.p50_latency, 50),
                (metrics.latency_metrics.p90_latency, 90),
                (metrics.latency_metrics.p99_latency, 99),
            ):
                target.FromNanoseconds(ordered[max(0, -(-percent * len(ordered) // 100) - 1)])
        return report


class _Engine:
    """One run's work: plays its plan and keeps the stored run in step (see the module)."""

    def __init__(
        self,
        context: Context,
        run: Run,
        tasks: Sequence[_Task],
        request: evaluation_pb2.RunEvaluationRequest,
        defaults: app_settings.AppDefaults,
    ) -> None:
        self._context = context
        self._defaults = defaults
        self._run = run
        self._tasks = tasks
        self._request = request
        self._app = tables.parent_of(run.name)
        self._run_id = run.name.rsplit("/", 1)[-1]
        self._stored = 0  # tasks whose results are stored
        # Which: with sessions played at once, the stored tasks are not the plan's first ones.
        self._stored_tasks = bytearray(len(tasks))
        self._pending: list[_Result] = []
        self._pending_tasks: list[int] = []  # the plan's indexes of the pending results
        self._conversations: list[Conversation] = []
        self._kept_bytes = 0  # of the results and conversations stored or pending (the budget)
        self._pending_bytes = 0
        self._flushing = asyncio.Lock()  # one batch written at a time (see _flush)
        self._flushed = time.monotonic()
        self._rules: list[_Rule] = []
        self._latencies = _Latencies()
        self._player = outcomes.Player()
        self._agent: agents.Agent | None = None  # the app's own agent (docs/agents.md)
        self._pace: sessions.RunPace | None = None  # and how many sessions play at once

    async def queued(self) -> None:
        """Return once no QUEUED hold matches the run's evaluations (the operation's
        ``ready``: a held run takes no operation slot). The runner awaits it, and then its
        wait for a slot, through :meth:`guarded`: the run stays QUEUED meanwhile."""
        evaluations = list({task.evaluation.name: task.evaluation for task in self._tasks}.values())
        while True:
            self._rules = await outcome_rules.of_app(self._context, self._app)
            if outcome_rules.holding(self._rules, evaluations, _Rule.QUEUED) is None:
                return
            await asyncio.sleep(_HOLD_POLL)

    async def play(self) -> service_pb2.RunEvaluationResponse:
        """The operation's work: RUNNING, every task played and stored, COMPLETED."""
        await self.guarded(self._played())
        return service_pb2.RunEvaluationResponse(evaluation_run=self._run.name)

    async def _played(self) -> None:
        self._run.state = Run.RUNNING
        await self._settled(self._replace(self._run))
        endpoint = await agent_endpoints.of_app(self._context, self._app)
        recorder = None
        if endpoint is not None:
            recorder = recording.of_run(self._context, self._run.name, endpoint)
            settings = self._context.settings
            server = sessions.server_slots(self._context.agents, settings.agent_sessions)
            self._pace = sessions.RunPace(endpoint.max_concurrent_sessions, server)
            self._agent = agents.Agent(
                endpoint,
                settings.agent_allow_hosts,
                self._context.agents,
                pace=self._pace,
                recorder=recorder,
            )
        try:
            await self._tasks_played()
        finally:
            if self._agent is not None:
                await self._agent.close()
            if recorder is not None:
                await recorder.close()
        self._run.state = Run.COMPLETED
        if self._request.generate_latency_report:
            self._run.latency_report.CopyFrom(self._latencies.report())
        await self._settled(self._completed())

    async def _tasks_played(self) -> None:
        """Play the plan: one task after another without an agent (scripted outcomes cost no
        more than their play), else in a fixed pool of workers, as many as sessions may play
        at once, each taking the plan's next task (docs/agents.md, "Concurrency")."""
        if self._pace is None:
            for index, task in enumerate(self._tasks):
                await self._task_played(index, task)
        else:
            await self._concurrently(min(self._pace.limit, len(self._tasks)))
        await self._flush()

    async def _concurrently(self, workers: int) -> None:
        """Play the plan in ``workers`` workers, and store what landed at least every
        :data:`_FLUSH_EVERY` seconds meanwhile, even while every worker waits for its agent."""
        plan = iter(enumerate(self._tasks))
        finished = asyncio.Event()

        async def worker() -> None:
            for index, task in plan:
                await self._task_played(index, task)

        async def played() -> None:
            try:
                await _together([worker() for _ in range(workers)])
            finally:
                finished.set()

        async def ticking() -> None:
            while not finished.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(_FLUSH_EVERY):
                        await finished.wait()
                if not finished.is_set() and time.monotonic() - self._flushed >= _FLUSH_EVERY:
                    await self._flush()

        await _together([played(), ticking()])

    async def _task_played(self, index: int, task: _Task) -> None:
        """Play ``task``, the plan's ``index``-th, and keep its result for the next batch
        (stored at once when the batch is full or old)."""
        if not self._pending:  # a batch begins: the rules as they are now
            self._rules = await outcome_rules.of_app(self._context, self._app)
        await self._before(task)
        result, conversation = await self._result(task)
        size = result.ByteSize() + (0 if conversation is None else conversation.ByteSize())
        if self._kept_bytes + size > limits.MAX_RUN_BYTES:
            await self._flush()  # what fits is kept
            over = self._over_budget(task)
            raise ServiceError.invalid_argument(over.description, [over])
        self._pending.append(result)
        self._pending_tasks.append(index)
        if conversation is not None:
            self._conversations.append(conversation)
        self._pending_bytes += size
        self._kept_bytes += size
        if (
            len(self._pending) >= _BATCH
            or self._pending_bytes >= _BATCH_BYTES
            or time.monotonic() - self._flushed >= _FLUSH_EVERY
        ):
            await self._flush()

    def _over_budget(self, task: _Task) -> FieldViolation:
        """Why the run stops before ``task``: its results would pass the budget."""
        return FieldViolation(
            _plan_field(self._request),
            f"The run's results and conversations would pass its budget of "
            f"{limits.MAX_RUN_BYTES} bytes at repetition {task.repetition + 1} of "
            f"{task.evaluation.name}; {self._stored} of {len(self._tasks)} results were stored. "
            f"Run fewer repetitions, or smaller evaluations.",
            "TOO_LARGE",
        )

    async def _completed(self) -> None:
        """Store the run COMPLETED and, in the same transaction, its scheduled evaluation run
        naming it its ``last_completed_run`` (a new etag), so that no reader sees the one
        without the other; the run alone when it has no schedule, or the schedule is gone."""
        name = self._run.scheduled_evaluation_run
        storage = self._context.storage

        async def round_() -> bool:
            """Whether the run was stored with its schedule (False: the schedule is gone)."""
            schedule = await storage.get_row(tables.SCHEDULED_RUNS, name)
            if schedule is None:
                return False
            expected = schedule.etag
            schedule.last_completed_run = self._run.name
            schedule.etag = new_etag()
            try:
                await storage.write_rows(
                    [
                        Replace(tables.RUNS, self._run, ""),
                        Replace(tables.SCHEDULED_RUNS, schedule, expected),
                    ]
                )
            except EtagMismatch as changed:
                if changed.name != name:
                    raise
                raise Changed from changed  # the schedule changed meanwhile: read it again
            except Missing as missing:
                if missing.name != name:
                    raise  # the run itself is gone (see guarded)
                return False  # the schedule was deleted meanwhile
            return True

        given_up = partial(ServiceError.aborted_etag, _SCHEDULED_TYPE, name)
        if not name or not await rewrite(round_, given_up):
            await self._replace(self._run)

    async def guarded(self, step: Coroutine[Any, Any, None]) -> None:
        """Await ``step`` of the run; the run ends as its failure says (see the module). The
        operation's guard: whatever the run waits for before it plays (a hold, a slot) is
        awaited through it too, so a run cancelled or stopped there ends as it would while
        playing (CANCELLED, or ERROR at a shutdown)."""
        try:
            await step
        except asyncio.CancelledError:
            if self._context.runner.stopping:
                await self._settled(self._end_in_error(_SHUT_DOWN))
            else:
                await self._settled(self._cancel())
            raise
        except Missing as missing:
            gone = f"{missing.name} was deleted while the run played it."
            await self._end_in_error(gone)
            if missing.name == self._run.name:
                raise ServiceError.not_found(names.of(Run).type, missing.name) from missing
            raise ServiceError(
                Code.FAILED_PRECONDITION, gone, "RESOURCE_DELETED", {"resource": missing.name}
            ) from missing
        except TooLarge as large:
            violation = limits.too_large("evaluation_run", large.size, large.name)
            await self._end_in_error(violation.description)
            validation.raise_if_invalid([violation], "run")
        except ServiceError as error:
            await self._end_in_error(error.message)
            raise
        except Exception:
            await self._end_in_error("Internal error; see the server log.")
            raise

    async def _before(self, task: _Task) -> None:
        """Wait out the rules' delay and any RUNNING hold of ``task``'s evaluation, storing
        what was played so far first (a poller sees it while the run waits)."""
        if task.reuse is not None:
            return
        wait = outcome_rules.delay(self._rules, task.evaluation, task.repetition)
        if wait > 0:
            await self._flush()
            await asyncio.sleep(wait)
        while outcome_rules.holding(self._rules, [task.evaluation], _Rule.RUNNING) is not None:
            await self._flush()
            await asyncio.sleep(_HOLD_POLL)
            self._rules = await outcome_rules.of_app(self._context, self._app)

    async def _result(self, task: _Task) -> tuple[_Result, Conversation | None]:
        """The result of ``task``, played (or reused), with the run's fields, and the
        conversation it recorded (none for a reused result): by the app's agent when it has
        one and no outcome rule decides the repetition, else scripted."""
        evaluation = task.evaluation
        conversation = None
        if task.reuse is not None:
            result = _Result()
            result.CopyFrom(task.reuse)
            result.name = f"{evaluation.name}/results/{names.new_id()}"
            result.create_time.CopyFrom(now())
        else:
            rule = outcome_rules.deciding(self._rules, evaluation, task.repetition)
            if self._agent is not None and self._pace is not None and rule is None:
                # Timed from when the session has its slot.
                async with self._pace.session():
                    given = self._given(task, rule)
                    played = await self._agent.play(given, self._request.golden_run_method)
            else:
                played = self._player.play(self._given(task, rule))
            result = played.result
            conversation = played.conversation
        self._stamp(result, task)
        self._latencies.add(result)
        return result, conversation

    def _given(self, task: _Task, rule: _Rule | None) -> outcomes.Play:
        """What a player is given to play ``task`` under ``rule`` (None: the agent), now."""
        evaluation = task.evaluation
        return outcomes.Play(
            evaluation=evaluation,
            repetition=task.repetition,
            rule=rule,
            result_name=f"{evaluation.name}/results/{names.new_id()}",
            conversation_name=f"{self._app}/conversations/{names.new_id()}",
            started=now(),
            persona=self._defaults.persona(task.persona) if task.persona else None,
            thresholds=self._defaults.thresholds,
            settings=self._defaults.settings,
        )

    def _stamp(self, result: _Result, task: _Task) -> None:
        run = self._run
        result.display_name = (
            f"{task.evaluation.display_name} Result - {result.create_time.ToJsonString()} "
            f"(run {self._run_id}, {task.repetition + 1} of {task.count})"
        )
        result.evaluation_run = run.name
        result.initiated_by = run.initiated_by
        result.app_version = run.app_version
        result.golden_run_method = run.golden_run_method
        if run.HasField("config"):
            result.config.CopyFrom(run.config)
        else:
            result.ClearField("config")
        if not result.config.tool_call_behaviour:
            behaviour = self._defaults.tool_call_behaviour(task.evaluation)
            if behaviour:
                result.config.tool_call_behaviour = behaviour

    def _counted(self, results: Sequence[_Result]) -> Run:
        """The run with ``results`` added to its progress, summaries and result list."""
        run = Run()
        run.CopyFrom(self._run)
        progress = run.progress
        for result in results:
            run.evaluation_results.append(result.name)
            summary = run.evaluation_run_summaries[result.name.rsplit("/results/", 1)[0]]
            state = result.execution_state
            if state == _Result.COMPLETED:
                progress.completed_count += 1
                if result.evaluation_status == _Result.PASS:
                    progress.passed_count += 1
                    summary.passed_count += 1
                elif result.evaluation_status == _Result.FAIL:
                    progress.failed_count += 1
                    summary.failed_count += 1
            elif state == _Result.ERROR:
                progress.error_count += 1
                summary.error_count += 1
            elif state == _Result.CANCELLED:
                progress.cancelled_count += 1
        return run

    async def _flush(self) -> None:
        """Store the results played since the last flush with the run counting them; the
        engine counts them stored once the write succeeded, which it always waits for (see
        :meth:`_settled`). One flush at a time: each counts its batch into the run the last
        one stored; sessions playing meanwhile keep their results for the next batch.
        (Without an agent, playing the next batch during the write gains nothing: the GIL
        serializes the two, and the bench's server has one core.)"""
        async with self._flushing:
            if not self._pending:
                return
            batch, indexes, conversations = self._pending, self._pending_tasks, self._conversations
            self._pending, self._pending_tasks, self._conversations = [], [], []
            self._pending_bytes = 0
            run = self._counted(batch)

            async def write() -> None:
                await self._context.storage.record_run(
                    run,
                    batch,
                    conversations,
                    new_etag(),
                    max_evaluation_bytes=limits.MAX_RESOURCE_BYTES,
                )
                self._run = run
                self._stored += len(batch)
                for index in indexes:
                    self._stored_tasks[index] = 1

            await self._settled(write())
            self._flushed = time.monotonic()

    async def _cancel(self) -> None:
        """Store every repetition not stored yet as CANCELLED, and the run CANCELLED (every
        session was stopped first: the run's work is awaited to its end before this)."""
        self._pending, self._pending_tasks, self._conversations = [], [], []
        self._pending_bytes = 0
        cancelled = []
        left = [index for index, stored in enumerate(self._stored_tasks) if not stored]
        for index in left:
            task = self._tasks[index]
            result = _Result(
                name=f"{task.evaluation.name}/results/{names.new_id()}",
                create_time=now(),
                execution_state=_Result.CANCELLED,
            )
            getattr(
                result, "scenario_result" if _is_scenario(task.evaluation) else "golden_result"
            ).SetInParent()
            if task.persona:
                result.persona.name = task.persona
            self._stamp(result, task)
            cancelled.append(result)
        for start in range(0, len(cancelled), _BATCH):
            self._pending = cancelled[start : start + _BATCH]
            self._pending_tasks = left[start : start + _BATCH]
            await self._flush()
        self._run.state = Run.CANCELLED
        await self._replace(self._run)

    async def _end_in_error(self, message: str) -> None:
        """Record the run ERROR with ``message`` (best effort: it may be gone)."""
        self._run.state = Run.ERROR
        self._run.error_info.CopyFrom(_error(_ErrorInfo.RUNTIME_FAILURE, message))
        with contextlib.suppress(Missing):
            await self._settled(self._replace(self._run))

    async def _replace(self, run: Run) -> None:
        await self._context.storage.replace_row(tables.RUNS, run, "")

    @staticmethod
    async def _settled(write: Coroutine[Any, Any, None]) -> None:
        """Await ``write`` to its end even when cancelled meanwhile (the cancellation is
        raised once it ended): what a write stored must be known."""
        task = asyncio.ensure_future(write)
        try:
            await asyncio.shield(task)
        finally:
            if not task.done():
                await asyncio.wait([task])


async def _together(works: Sequence[Coroutine[Any, Any, None]]) -> None:
    """Await ``works`` at once, each in a task of its own. The first that fails, or a
    cancellation of this, cancels the others, whose ends are awaited (what they store is
    known: :meth:`_Engine._settled`); then the failure, or the cancellation, is raised."""
    tasks = [asyncio.ensure_future(work) for work in works]
    if not tasks:
        return
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)
        # Retrieved whatever ends this (asyncio logs a failure nobody retrieved).
        failures = [task.exception() for task in tasks if not task.cancelled()]
    for failure in failures:
        if failure is not None:
            raise failure


async def _evaluations_of(
    context: Context, request: evaluation_pb2.RunEvaluationRequest
) -> list[_Evaluation]:
    """The evaluations the request runs, as stored now, in its order."""
    listed = list(request.evaluations)
    if request.evaluation_dataset:
        dataset = await standard.existing(context, DATASETS, request.evaluation_dataset)
        listed = list(dataset.evaluations)
        if not listed:
            validation.raise_if_invalid(
                [
                    FieldViolation(
                        "evaluation_dataset",
                        f"{request.evaluation_dataset} lists no evaluations.",
                        "EMPTY",
                    )
                ],
                "run request",
            )
    found = []
    for index, name in enumerate(listed):
        evaluation = await context.storage.get_evaluation(name)
        if evaluation is None:
            raise _not_found(
                [FieldViolation(f"evaluations[{index}]", f"Evaluation {name} does not exist.")]
            )
        found.append(evaluation)
    return found


def _new_run(
    request: evaluation_pb2.RunEvaluationRequest, user: str, created: timestamp_pb2.Timestamp
) -> Run:
    """The run ``request`` creates, before its plan: what the request and the caller say."""
    app = request.app
    run = Run(
        name=f"{app}/evaluationRuns/{names.new_id()}",
        display_name=request.display_name
        or f"Evaluation run {created.ToDatetime().strftime('%Y-%m-%d %H:%M:%S')} UTC",
        create_time=created,
        initiated_by=user,
        app_version=request.app_version,
        evaluations=request.evaluations,
        evaluation_dataset=request.evaluation_dataset,
        persona_run_configs=request.persona_run_configs,
        scheduled_evaluation_run=request.scheduled_evaluation_run,
        golden_run_method=request.golden_run_method or common_pb2.STABLE,
    )
    for message_field in ("config", "optimization_config"):
        if request.HasField(message_field):
            getattr(run, message_field).CopyFrom(getattr(request, message_field))
    if request.HasField("run_count"):
        run.run_count = request.run_count
    return run


@dataclass(frozen=True)
class Prepared:
    """A checked RunEvaluation: its run (QUEUED, not stored yet, ``operation`` named), the
    engine that plays it, and its operation's metadata."""

    run: Run
    engine: _Engine
    metadata: service_pb2.RunEvaluationOperationMetadata

    @property
    def location(self) -> str:
        return location_of(self.run.name)

    def start(self, context: Context, operation: operations_pb2.Operation) -> None:
        """Play the run in ``operation``, stored by the caller with this process as owner."""
        engine = self.engine
        context.runner.adopt(operation, self.metadata, engine.play, engine.queued, engine.guarded)


async def prepare(
    context: Context, request: evaluation_pb2.RunEvaluationRequest, user: str
) -> Prepared:
    """Check ``request`` (see the module) and make its run, initiated by ``user``; raises
    ServiceError as RunEvaluation answers it. Nothing is stored."""
    app = request.app
    names.APP.parse(app, "app", owned=0)
    validation.raise_if_invalid(request_violations(request, "", app), "run request")
    defaults = await app_settings.of_app(context, app)
    missing = await verify(context, request, "", app) + defaults.persona_violations(request)
    version = None
    if request.app_version:
        version = await context.storage.get_row(versions.TABLE, request.app_version)
        # Recorded as given unless apps are required (a version then exists as hosted).
        if version is None and context.settings.require_apps:
            description = f"AppVersion {request.app_version} does not exist."
            missing.append(FieldViolation("app_version", description, "NOT_FOUND"))
    if missing:
        raise _not_found(missing)
    request = defaults.applied(request)
    evaluations = await _evaluations_of(context, request)
    tasks = _plan(request, evaluations, defaults.default_persona)
    validation.raise_if_invalid(_size_violations(request, tasks, ""), "run request")
    run = _new_run(request, user, now())
    version = version or defaults.newest_version
    if version is not None:
        run.app_version_display_name = version.display_name
    run.operation = context.runner.new_name(location_of(app))
    run.evaluation_type = _evaluation_type(evaluations)
    run.state = Run.QUEUED
    run.progress.total_count = len(tasks)
    if not request.HasField("run_count") and run.evaluation_type != Run.MIXED:
        run.run_count = _SCENARIO_RUNS if run.evaluation_type == Run.SCENARIO else _GOLDEN_RUNS
    metadata = service_pb2.RunEvaluationOperationMetadata(
        evaluations=[evaluation.name for evaluation in evaluations],
        evaluation_run=run.name,
        verb=_VERB,
    )
    return Prepared(run, _Engine(context, run, tasks, request, defaults), metadata)


def refused_run(
    request: evaluation_pb2.RunEvaluationRequest, user: str, error: ServiceError
) -> Run:
    """The run of a request that no longer runs (a schedule's, whose evaluation was deleted
    since): ended ERROR at once, ``error_info`` saying why."""
    run = _new_run(request, user, now())
    run.state = Run.ERROR
    run.error_info.CopyFrom(_error(_ErrorInfo.RUNTIME_FAILURE, error.message))
    return run


async def run_evaluation(
    context: Context, request: evaluation_pb2.RunEvaluationRequest, caller: Caller
) -> operations_pb2.Operation:
    """Check the request, store its run (QUEUED) and play it in an operation (the module)."""
    prepared = await prepare(context, request, caller.user)
    run = prepared.run
    await context.storage.insert_row(tables.RUNS, run)
    try:
        return await context.runner.start(
            prepared.location,
            "RunEvaluation",
            prepared.metadata,
            prepared.engine.play,
            name=run.operation,
            ready=prepared.engine.queued,
            guard=prepared.engine.guarded,
        )
    except BaseException:
        # No operation plays the run: it must not stay QUEUED.
        with contextlib.suppress(Exception):
            run.state = Run.ERROR
            run.error_info.CopyFrom(
                _error(_ErrorInfo.RUNTIME_FAILURE, "The run's operation could not be started.")
            )
            await context.storage.replace_row(tables.RUNS, run, "")
        raise


RPCS: dict[str, Rpc] = {"RunEvaluation": run_evaluation}
