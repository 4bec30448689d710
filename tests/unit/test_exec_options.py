"""``ces-eval exec``'s command line (in process, through :func:`ces_eval.cli.parse`): serve's
options as serve takes them, the four exec chooses itself when neither a flag nor a variable
gives them, the command after ``--``; and the exit status of a command a signal ended."""

from __future__ import annotations

import pytest

from ces_eval.cli import parse
from ces_eval.testing.exec import exit_status

CHOSEN = ("grpc_port", "http_port", "database", "export_dir")


def test_exec_chooses_ports_and_database_when_nothing_names_them() -> None:
    args = parse(["exec", "--seed", "seed.json", "--", "pytest", "-x", "--", "y"], {})
    assert {name: getattr(args, name) for name in CHOSEN} == dict.fromkeys(CHOSEN)
    assert str(args.seed) == "seed.json"
    assert args.to_run == ["--", "pytest", "-x", "--", "y"]  # cli.py drops the first "--"


@pytest.mark.parametrize(
    ("argv", "environ", "name", "expected"),
    [
        (["--grpc-port", "50051"], {}, "grpc_port", 50051),
        ([], {"CES_EVAL_HTTP_PORT": "18080"}, "http_port", 18080),
        (["--http-port", "0"], {"CES_EVAL_HTTP_PORT": "18080"}, "http_port", 0),
        (["--database", "sqlite:///kept.db"], {}, "database", "sqlite:///kept.db"),
        ([], {"CES_EVAL_DATABASE": "sqlite:///env.db"}, "database", "sqlite:///env.db"),
        ([], {"CES_EVAL_EXPORT_DIR": "out"}, "export_dir", "out"),
    ],
)
def test_a_flag_or_its_variable_overrides_what_exec_chooses(
    argv: list[str], environ: dict[str, str], name: str, expected: object
) -> None:
    args = parse(["exec", *argv, "--", "true"], environ)
    assert getattr(args, name) == expected


def test_serve_options_are_checked_as_serve_checks_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as raised:
        parse(["exec", "--", "true"], {"CES_EVAL_AGENT_SESSIONS": "0"})
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("ces-eval exec: CES_EVAL_AGENT_SESSIONS: '0' is not a session count")


@pytest.mark.parametrize(
    ("returncode", "status"), [(0, 0), (3, 3), (255, 255), (-15, 143), (-9, 137), (-2, 130)]
)
def test_a_signal_is_128_plus_its_number_as_shells_say(returncode: int, status: int) -> None:
    assert exit_status(returncode) == status


def test_help_shows_what_exec_chooses_as_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        parse(["exec", "--help"], {})
    assert raised.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "usage: ces-eval exec [serve options] -- COMMAND [ARG...]" in text
    assert "[env CES_EVAL_GRPC_PORT; default 0, a free port]" in text
    assert "[env CES_EVAL_DATABASE; default a SQLite file in a temporary folder" in text
    assert "[env CES_EVAL_SEED; default none]" in text  # serve's own, as serve shows it
