"""``ces-eval serve`` options: flags, their ``CES_EVAL_*`` variables, defaults and one-line
errors (in process, through :func:`ces_eval.cli.parse`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ces_eval.cli import parse
from ces_eval.server import ServerConfig

# Every ServerConfig field is a serve option; the workers count and the hidden worker link are
# options without a field.
OPTIONS = [f.name for f in dataclasses.fields(ServerConfig)] + ["workers"]


def _flag(option: str) -> str:
    return "--" + option.replace("_", "-")


def _variable(option: str) -> str:
    return "CES_EVAL_" + option.upper()


def _refusal(capsys: pytest.CaptureFixture[str], argv: list[str], environ: dict[str, str]) -> str:
    with pytest.raises(SystemExit) as raised:
        parse(argv, environ)
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line, no usage block
    assert "Traceback" not in err
    return err


def test_help_names_every_variable_and_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        parse(["serve", "--help"], {})
    assert raised.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    defaults = ServerConfig()
    for option in OPTIONS:
        assert _flag(option) in text
        assert f"env {_variable(option)};" in text
    assert f"default {defaults.grpc_port}]" in text
    assert f"default {defaults.database}]" in text
    assert "default info]" in text
    assert "default off]" in text  # a switch


@pytest.mark.parametrize(
    ("option", "text", "expected"),
    [
        ("grpc_port", "0", 0),
        ("http_port", "18080", 18080),
        ("host", "::1", "::1"),
        ("database", "sqlite:///:memory:", "sqlite:///:memory:"),
        ("database", "postgresql://u@db:5432/x", "postgresql://u@db:5432/x"),
        ("export_dir", "exports-here", "exports-here"),
        ("locations", "us-central1, europe-west1", ("us-central1", "europe-west1")),
        ("operation_lease", "2.5", 2.5),
        ("workers", "3", 3),
        ("auth_tokens", "tokens.yaml", "tokens.yaml"),
        ("allow_unauthenticated", "yes", True),
        ("allow_unauthenticated", "0", False),
        ("max_concurrent_requests", "7", 7),
        ("max_connections", "9", 9),
        ("header_timeout", "2.5", 2.5),
        ("idle_timeout", "3", 3),
        ("body_timeout", "0.5", 0.5),
        ("log_level", "debug", "debug"),
        ("log_format", "json", "json"),
    ],
)
def test_a_variable_sets_its_option(option: str, text: str, expected: object) -> None:
    assert getattr(parse(["serve"], {_variable(option): text}), option) == expected


def test_a_flag_beats_its_variable() -> None:
    environ = {
        "CES_EVAL_GRPC_PORT": "1234",
        "CES_EVAL_LOG_FORMAT": "json",
        "CES_EVAL_DATABASE": "sqlite:///from-env.db",
    }
    args = parse(["serve", "--grpc-port", "0", "--log-format", "text"], environ)
    assert args.grpc_port == 0
    assert args.log_format == "text"
    assert args.database == "sqlite:///from-env.db"  # no flag: the variable
    # A flag replaces a bad variable without an error: the variable is never read.
    assert parse(["serve", "--http-port", "0"], {"CES_EVAL_HTTP_PORT": "bad"}).http_port == 0


def test_locations_repeat_and_split() -> None:
    args = parse(["serve", "--locations", "a,b", "--locations", "c"], {})
    assert tuple(args.locations) == ("a", "b", "c")


def test_without_either_the_defaults_hold() -> None:
    args = parse(["serve"], {})
    defaults = ServerConfig()
    for option in OPTIONS:
        if option == "workers":
            assert args.workers == 1
        elif option == "export_dir":
            assert Path(args.export_dir) == defaults.export_dir
        else:
            assert getattr(args, option) == getattr(defaults, option), option


@pytest.mark.parametrize(
    ("option", "text", "reason"),
    [
        ("grpc_port", "abc", "is not a port"),
        ("http_port", "70000", "is not a port"),
        ("database", "./data/x.db", "for a SQLite file write sqlite:///./data/x.db"),
        ("database", "mysql://h/db", "is not a database URL"),
        ("operation_lease", "0", "is not a lease"),
        ("workers", "0", "is not a worker count"),
        ("locations", "us/central", "'us/central' is not a location ID"),
        ("max_concurrent_requests", "-1", "is not a request limit"),
        ("max_connections", "0", "is not a connection limit"),
        ("header_timeout", "0", "is not a timeout"),
        ("idle_timeout", "1.5", "is not a timeout: expected whole seconds"),
        ("body_timeout", "x", "is not a timeout"),
        ("log_level", "loud", "invalid choice: 'loud'"),
        ("log_format", "xml", "invalid choice: 'xml'"),
    ],
)
def test_a_bad_value_is_one_line_the_same_from_flag_or_variable(
    capsys: pytest.CaptureFixture[str], option: str, text: str, reason: str
) -> None:
    from_flag = _refusal(capsys, ["serve", f"{_flag(option)}={text}"], {})
    from_variable = _refusal(capsys, ["serve"], {_variable(option): text})
    assert f"argument {_flag(option)}: " in from_flag
    assert f"{_variable(option)}: " in from_variable
    assert reason in from_flag
    assert reason in from_variable
    # The same explanation follows the name, whichever carried the value.
    assert from_flag.split(": ", 2)[2] == from_variable.split(": ", 2)[2]


def test_a_bad_switch_value_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    err = _refusal(capsys, ["serve"], {"CES_EVAL_ALLOW_UNAUTHENTICATED": "maybe"})
    assert "CES_EVAL_ALLOW_UNAUTHENTICATED: 'maybe' is not a switch" in err


def test_every_server_config_field_is_an_option() -> None:
    """A new ServerConfig field without a flag (and so without a variable) fails here."""
    assert set(OPTIONS) <= set(vars(parse(["serve"], {})))
