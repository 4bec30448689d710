"""Options declared once: a frozen dataclass whose fields carry their option.

Each field made by :func:`option`, :func:`switch` or :func:`repeated` is one command-line flag
(``--grpc-port`` for ``grpc_port``) and one environment variable (``CES_EVAL_GRPC_PORT``), with
its help, its default (the field's) and its value check (a function of the text, raising
``ValueError`` or ``argparse.ArgumentTypeError`` with the one line to show). From that one
declaration :func:`add_options` builds the argparse options, :func:`resolve` reads the variables
where no flag replaced them, :func:`config` builds the dataclass from what was parsed,
:func:`arguments` writes a configuration back as flags (a supervisor's workers get theirs so),
and :func:`project` hands a layer the part of it that layer declares (the core's settings).

A flag beats its variable, the variable beats the default; a bad value, from either, is the
parser's one-line error naming the flag or the variable. Standard library only: ``ces-eval``
imports this before it installs its start-up interrupt handlers (:mod:`ces_eval.cli`).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "ENV_PREFIX",
    "Option",
    "add_options",
    "arguments",
    "bounded",
    "comma_list",
    "config",
    "declared",
    "flag",
    "on_off",
    "option",
    "project",
    "repeated",
    "resolve",
    "switch",
    "timeout",
    "variable",
]

ENV_PREFIX = "CES_EVAL_"
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})
_KEY = "ces_eval.option"  # the fields' metadata key
Config = TypeVar("Config", bound="DataclassInstance")


@dataclasses.dataclass(frozen=True)
class Option:
    """How one dataclass field is an option (see the module's docstring)."""

    help: str
    # The text checked and converted (argparse's ``type``); None: the text as it is.
    parse: Callable[[str], Any] | None = None
    metavar: str | None = None
    choices: Sequence[str] | None = None
    # Each value a tuple (comma-separated); repeated flags add up, the first replacing the
    # variable's list.
    repeated: bool = False
    switch: bool = False  # a flag without a value; its variable takes 1/true/yes/on, 0/false/...
    # What becomes of a parsed, non-empty value in the dataclass (``Path``); an empty one of an
    # option without a default (``--auth-tokens ""``) is None.
    into: Callable[[Any], Any] | None = None


def option(
    default: object,
    help: str,
    *,
    parse: Callable[[str], Any] | None = None,
    metavar: str | None = None,
    choices: Sequence[str] | None = None,
    into: Callable[[Any], Any] | None = None,
) -> Any:  # noqa: ANN401 - a dataclass field, typed by its annotation
    """A field that is an option taking one value."""
    spec = Option(help, parse, metavar, choices, into=into)
    return dataclasses.field(default=default, metadata={_KEY: spec})


def switch(help: str) -> Any:  # noqa: ANN401 - as option()
    """A field that is an option without a value, off by default."""
    return dataclasses.field(default=False, metadata={_KEY: Option(help, switch=True)})


def repeated(
    default: tuple[str, ...],
    help: str,
    *,
    parse: Callable[[str], tuple[str, ...]],
    metavar: str,
) -> Any:  # noqa: ANN401 - as option()
    """A field that is a repeatable option whose values (each a comma-separated list) add up."""
    spec = Option(help, parse, metavar, repeated=True)
    return dataclasses.field(default=default, metadata={_KEY: spec})


def declared(cls: type) -> list[tuple[dataclasses.Field[Any], Option]]:
    """The fields of dataclass ``cls`` that are options, with their options, in order."""
    return [(f, f.metadata[_KEY]) for f in dataclasses.fields(cls) if _KEY in f.metadata]


def flag(name: str) -> str:
    """The flag of field ``name``: ``--grpc-port`` for ``grpc_port``."""
    return "--" + name.replace("_", "-")


def variable(name: str) -> str:
    """The environment variable of field ``name``: ``CES_EVAL_GRPC_PORT`` for ``grpc_port``."""
    return ENV_PREFIX + name.upper()


def comma_list(text: str) -> tuple[str, ...]:
    """The entries of a comma-separated list, stripped, empty ones left out."""
    return tuple(item.strip() for item in text.split(",") if item.strip())


def bounded(kind: str, low: int, high: int, note: str = "") -> Callable[[str], int]:
    """A whole number from ``low`` to ``high``; anything else is not ``kind``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {kind}: expected a whole number from {low} to {high}{note}"
            )
        return value

    return parse


def timeout(kind: type[float] | type[int]) -> Callable[[str], float]:
    """Seconds up to an hour: from 0.1 (``float``), or whole seconds from 1 (``int``)."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            value = -1
        if not 0 < value <= 3600:
            unit = "whole seconds" if kind is int else "seconds"
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a timeout: expected {unit} from {1 if kind is int else 0.1} "
                "to 3600"
            )
        return value

    return parse


def on_off(text: str) -> bool:
    """``on`` or ``off``: a setting with a value in both states (``--scheduler``)."""
    if text not in ("on", "off"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a switch: expected on or off")
    return text == "on"


def _switch(text: str) -> bool:
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise argparse.ArgumentTypeError(
        f"{text!r} is not a switch: expected 1/true/yes/on or 0/false/no/off"
    )


class _Repeated(argparse.Action):
    """A repeatable option whose values (each a tuple, from a comma-separated list) add up;
    its first flag replaces the variable's list (a flag beats its variable)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        current = getattr(namespace, self.dest, None)
        items = current if isinstance(current, list) else []
        items.extend(values if isinstance(values, tuple) else ())
        setattr(namespace, self.dest, items)


@dataclasses.dataclass(frozen=True)
class _FromEnvironment:
    """An option's value as its variable gave it, checked only if no flag replaced it."""

    name: str
    text: str
    spec: Option

    def value(self, parser: argparse.ArgumentParser) -> object:
        spec = self.spec
        convert = _switch if spec.switch else (spec.parse or str)
        try:
            value = convert(self.text)
        except (argparse.ArgumentTypeError, ValueError) as error:
            parser.error(f"{self.name}: {error}")
        if spec.choices is not None and value not in spec.choices:
            choices = ", ".join(map(repr, spec.choices))
            parser.error(f"{self.name}: invalid choice: {self.text!r} (choose from {choices})")
        return value


def add_options(
    parser: argparse.ArgumentParser,
    cls: type,
    environ: Mapping[str, str],
    shown: Mapping[str, str] | None = None,
) -> None:
    """Add the options of dataclass ``cls`` to ``parser``, each help naming its variable and
    default (or what ``shown`` says of it: a command choosing otherwise, as ``exec`` does); a
    variable set in ``environ`` becomes its option's default, checked by :func:`resolve` as the
    flag's value would be, unless a flag replaced it."""
    for field, spec in declared(cls):
        unset = field.default in (None, ())  # (): a repeatable option without entries
        default = "off" if spec.switch else ("none" if unset else field.default)
        default = (shown or {}).get(field.name, default)
        text = f"{spec.help} [env {variable(field.name)}; default {default}]"
        if spec.switch:
            action = parser.add_argument(flag(field.name), action="store_true", help=text)
        else:
            action = parser.add_argument(
                flag(field.name),
                action=_Repeated if spec.repeated else "store",
                choices=spec.choices,
                # What the flag would give: the text of a default ``into`` converts (a Path).
                default=field.default if spec.into is None else _text(field.default),
                metavar=spec.metavar,
                help=text,
            )
            action.type = spec.parse
        if variable(field.name) in environ:
            given = environ[variable(field.name)]
            action.default = _FromEnvironment(variable(field.name), given, spec)


def _text(value: object) -> object:
    return value if value is None else str(value)


def resolve(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """``args`` with the values that came from variables checked (one line and exit status 2
    for a bad one, through ``parser.error``)."""
    for key, value in vars(args).items():
        if isinstance(value, _FromEnvironment):
            setattr(args, key, value.value(parser))
    return args


def config(cls: type[Config], args: argparse.Namespace) -> Config:
    """The dataclass ``cls`` of the options parsed into ``args``."""
    values: dict[str, object] = {}
    for field, spec in declared(cls):
        value = getattr(args, field.name)
        if spec.repeated:
            value = tuple(value)
        elif spec.into is not None:
            value = spec.into(value) if value or field.default is not None else None
        values[field.name] = value
    return cls(**values)


def arguments(configured: object, *, without: Sequence[str] = ()) -> list[str]:
    """The flags that give a parser the options of ``configured`` (a dataclass of options),
    but those named in ``without``; an option without a value (None, an empty list, a switch
    off) is left out. A list is written comma-separated, a float as ``repr`` writes it (all its
    digits), and a setting of two states that is no switch as ``on`` or ``off`` (:func:`on_off`
    reads it)."""
    argv: list[str] = []
    for field, spec in declared(type(configured)):
        value = getattr(configured, field.name)
        if field.name in without or value is None or value == ():
            continue
        if spec.switch:
            argv += [flag(field.name)] if value else []
            continue
        if isinstance(value, tuple):
            text = ",".join(value)
        elif isinstance(value, bool):
            text = "on" if value else "off"
        else:
            text = repr(value) if isinstance(value, float) else str(value)
        argv += [flag(field.name), text]
    return argv


def project(cls: type[Config], source: object, **given: object) -> Config:
    """The dataclass ``cls`` (a layer's settings) filled from the same-named attributes of
    ``source`` (the options) and from ``given``, what is not an option; a field of ``cls``
    found in neither is a mistake (TypeError)."""
    values: dict[str, object] = {}
    for field in dataclasses.fields(cls):
        if field.name in given:
            values[field.name] = given[field.name]
        elif hasattr(source, field.name):
            values[field.name] = getattr(source, field.name)
        else:
            raise TypeError(f"{cls.__name__}.{field.name}: neither an option nor given")
    return cls(**values)
