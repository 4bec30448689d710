"""What a run takes from its app (docs/semantics.md, "Apps"), read once when the run is prepared.

- Thresholds: the app's ``evaluation_metrics_thresholds`` are recorded in each result the run
  plays and judge it where the expectation, the turn and the evaluation leave a threshold unset
  (:func:`ces_eval.core.engine.rerun.rerun` resolves them field by field; the documented
  defaults come last).
- Personas: the app's ``evaluation_personas`` are the personas a scenario may be played under,
  the first being the default; an app without any has the one default persona
  (``{app}/evaluationPersonas/default``). A persona is named by its resource name or, in the
  app, by its ID. Any other is NOT_FOUND naming it.
- ``evaluation_settings`` give the request's defaults where it leaves them unset: the golden run
  method, the tool-call behaviour of goldens and of scenarios (recorded in each result's
  ``config``), and the caching settings (SKIP_IF_UNCHANGED). The rest goes to the players with
  each repetition (:class:`ces_eval.core.engine.outcomes.Play`): the metrics config (which
  metrics are computed, after the evaluation's and the expectations' overrides:
  :mod:`ces_eval.core.engine.metrics_config`), who starts a scenario's conversation, and the
  scenarios' execution mode (after their own).
- The version: a run records the version it asks for or, when it asks for none, the app's
  newest version, if it has any. With ``--require-apps`` the version asked for must exist
  (NOT_FOUND); without, a name of no stored version is recorded as given, as before apps
  were served.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ces_eval.core.aip.names import DEFAULT_PERSONA
from ces_eval.core.engine import metrics_config
from ces_eval.core.resources import apps, versions
from ces_eval.errors import FieldViolation
from ces_eval.generated.google.cloud.ces.v1beta import (
    app_version_pb2,
    common_pb2,
    evaluation_config_pb2,
    evaluation_pb2,
)
from ces_eval.storage.base import ListQuery, OrderBy, SortKey

if TYPE_CHECKING:
    from ces_eval.core.aip.context import Context

__all__ = ["AppDefaults", "of_app"]

_Persona = evaluation_config_pb2.EvaluationPersona
_Request = evaluation_pb2.RunEvaluationRequest
_NEWEST = OrderBy(SortKey.CREATE_TIME, descending=True)


def _persona_name(app: str, name: str) -> str:
    return name if "/" in name else f"{app}/evaluationPersonas/{name}"


@dataclass(frozen=True)
class AppDefaults:
    """One app's evaluation settings, as a run applies them (the module's docstring)."""

    app: str
    thresholds: evaluation_config_pb2.EvaluationMetricsThresholds | None
    personas: Mapping[str, _Persona]  # by resource name, the default first
    settings: evaluation_config_pb2.EvaluationSettings
    newest_version: app_version_pb2.AppVersion | None

    @property
    def metrics_config(self) -> evaluation_config_pb2.EvaluationMetricsConfig | None:
        """The app's metrics config (None: it sets none)."""
        return metrics_config.of_settings(self.settings)

    @property
    def default_persona(self) -> str:
        return next(iter(self.personas))

    def persona(self, name: str) -> _Persona:
        """The persona ``name`` (a resource name or an ID) as the app declares it."""
        found = self.personas.get(_persona_name(self.app, name))
        return found if found is not None else _Persona(name=name)

    def persona_violations(self, request: _Request) -> list[FieldViolation]:
        """A persona the app does not have (reason NOT_FOUND)."""
        known = ", ".join(self.personas)
        return [
            FieldViolation(
                f"persona_run_configs[{index}].persona",
                f"EvaluationPersona {config.persona} does not exist; {self.app} has {known}.",
                "NOT_FOUND",
            )
            for index, config in enumerate(request.persona_run_configs)
            if config.persona and _persona_name(self.app, config.persona) not in self.personas
        ]

    def applied(self, request: _Request) -> _Request:
        """``request`` with the app's defaults where it leaves them unset."""
        effective = _Request()
        effective.CopyFrom(request)
        settings = self.settings
        if not effective.golden_run_method:
            effective.golden_run_method = settings.golden_run_method
        if not effective.HasField("evaluation_run_caching_settings") and settings.HasField(
            "evaluation_run_caching_settings"
        ):
            effective.evaluation_run_caching_settings.CopyFrom(
                settings.evaluation_run_caching_settings
            )
        if not effective.app_version and self.newest_version is not None:
            effective.app_version = self.newest_version.name
        for config in effective.persona_run_configs:
            if config.persona:
                config.persona = _persona_name(self.app, config.persona)
        return effective

    def tool_call_behaviour(
        self, evaluation: evaluation_pb2.Evaluation
    ) -> common_pb2.EvaluationToolCallBehaviour.ValueType:
        """The app's tool-call behaviour for ``evaluation``'s kind (UNSPECIFIED: none set)."""
        if evaluation.WhichOneof("inputs") == "scenario":
            return self.settings.scenario_evaluation_tool_call_behaviour
        return self.settings.golden_evaluation_tool_call_behaviour


async def of_app(context: Context, app: str) -> AppDefaults:
    """The settings of ``app`` as stored now (those of an app with nothing set when it is not
    stored)."""
    stored = await context.storage.get_row(apps.TABLE, app)
    declared = list(stored.evaluation_personas) if stored is not None else []
    personas = {_persona_name(app, p.name): p for p in declared} or {
        f"{app}/evaluationPersonas/{DEFAULT_PERSONA}": _Persona(
            name=f"{app}/evaluationPersonas/{DEFAULT_PERSONA}"
        )
    }
    newest = await context.storage.list_rows(
        versions.TABLE, ListQuery(parent=app, order=_NEWEST, limit=1)
    )
    return AppDefaults(
        app=app,
        thresholds=stored.evaluation_metrics_thresholds
        if stored is not None and stored.HasField("evaluation_metrics_thresholds")
        else None,
        personas=personas,
        settings=stored.evaluation_settings
        if stored is not None
        else evaluation_config_pb2.EvaluationSettings(),
        newest_version=versions.TABLE.parse(newest[0][0]) if newest else None,
    )
