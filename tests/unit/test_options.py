"""Options declared once (``ces_eval.options``): one dataclass field is a flag, a variable, a help
line with its default, a value check and a field of the configuration; a configuration goes
back to flags (a worker's command line) and hands a layer its part (the core's settings)."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import pytest

from ces_eval import options
from ces_eval.cli import parse
from ces_eval.config import ServerConfig
from ces_eval.core.aip.context import Settings
from ces_eval.options import bounded, comma_list, option, repeated, switch
from ces_eval.workers import _Group
from tests.support.tls import make_certificates


@dataclass(frozen=True)
class Small:
    """A table of its own: what one entry gives, apart from the server's options."""

    colour: str = option("blue", "the colour", choices=("blue", "red"))
    size: int = option(3, "how big", parse=bounded("a size", 1, 9), metavar="N")
    tags: tuple[str, ...] = repeated((), "labels; repeatable", parse=comma_list, metavar="TAG")
    loud: bool = switch("shout")
    home: Path | None = option(None, "where", metavar="DIR", into=Path)
    plain: int = 7  # not an option: no flag, no variable


def _parser(environ: dict[str, str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="small")
    options.add_options(parser, Small, environ)
    return parser


def _small(argv: list[str], environ: dict[str, str] | None = None) -> Small:
    parser = _parser(environ or {})
    return options.config(Small, options.resolve(parser, parser.parse_args(argv)))


def test_an_entry_is_a_flag_a_variable_a_help_line_and_a_field() -> None:
    text = " ".join(_parser({}).format_help().split())
    assert "--colour {blue,red} the colour [env CES_EVAL_COLOUR; default blue]" in text
    assert "--size N how big [env CES_EVAL_SIZE; default 3]" in text
    assert "--tags TAG labels; repeatable [env CES_EVAL_TAGS; default none]" in text
    assert "--loud shout [env CES_EVAL_LOUD; default off]" in text
    assert "--home DIR where [env CES_EVAL_HOME; default none]" in text
    assert "plain" not in text
    assert _small([]) == Small()
    given = ["--colour", "red", "--size", "9", "--tags", "a,b", "--tags", "c", "--loud"]
    assert _small([*given, "--home", "h"]) == Small("red", 9, ("a", "b", "c"), True, Path("h"))


def test_a_variable_sets_its_field_and_a_flag_beats_it() -> None:
    environ = {
        "CES_EVAL_SIZE": "5",
        "CES_EVAL_TAGS": "x, y",
        "CES_EVAL_LOUD": "yes",
        "CES_EVAL_HOME": "/srv",
        "CES_EVAL_PLAIN": "1",  # no option: ignored
    }
    assert _small([], environ) == Small(size=5, tags=("x", "y"), loud=True, home=Path("/srv"))
    assert _small(["--size", "2", "--tags", "z"], environ).size == 2
    assert _small(["--tags", "z"], environ).tags == ("z",)
    assert _small(["--size", "2"], {"CES_EVAL_SIZE": "bad"}).size == 2  # never read
    assert _small(["--home", ""]).home is None  # empty: no value


@pytest.mark.parametrize(
    ("argv", "environ", "said"),
    [
        (["--size", "0"], {}, "argument --size: '0' is not a size: expected a whole number"),
        ([], {"CES_EVAL_SIZE": "10"}, "CES_EVAL_SIZE: '10' is not a size: expected a whole"),
        ([], {"CES_EVAL_COLOUR": "green"}, "CES_EVAL_COLOUR: invalid choice: 'green'"),
        ([], {"CES_EVAL_LOUD": "maybe"}, "CES_EVAL_LOUD: 'maybe' is not a switch"),
    ],
)
def test_a_bad_value_is_the_parsers_error_naming_flag_or_variable(
    capsys: pytest.CaptureFixture[str], argv: list[str], environ: dict[str, str], said: str
) -> None:
    with pytest.raises(SystemExit) as raised:
        _small(argv, environ)
    assert raised.value.code == 2
    assert said in capsys.readouterr().err


def test_a_configuration_goes_back_to_the_flags_that_give_it() -> None:
    small = Small("red", 1, ("a", "b"), True, Path("/h"), plain=9)
    assert options.arguments(small) == [
        *("--colour", "red", "--size", "1", "--tags", "a,b", "--loud", "--home", "/h"),
    ]
    assert _small(options.arguments(small)) == dataclasses.replace(small, plain=7)
    assert options.arguments(Small(), without=("colour", "size")) == []  # no value: no flag


def test_a_worker_is_given_every_option_of_its_supervisor(tmp_path: Path) -> None:
    """Every option a worker serves with reaches it as a flag (the worker count and the lifeline
    apart), whatever variables it inherits: what it parses is its supervisor's configuration."""
    authorities = make_certificates(tmp_path).authority  # a file the option's check reads
    configured = ServerConfig(
        host="::1",
        grpc_port=41001,
        http_port=41002,
        database="sqlite:///elsewhere.db",
        export_dir=Path("exports-here"),
        locations=("us-central1", "europe-west1"),
        operation_lease=2.5,
        scheduler=False,
        require_apps=True,
        workers=3,
        auth_tokens=Path("tokens.yaml"),
        allow_unauthenticated=True,
        allow_host=("a.example",),
        agent_allow_hosts=("agents.example", "10.0.0.1"),
        agent_ca_file=authorities,
        agent_sessions=5,
        allow_origin=("https://partner.example",),
        max_concurrent_requests=7,
        max_connections=9,
        header_timeout=2.5,
        idle_timeout=3,
        body_timeout=0.5,
        log_level="debug",
        log_format="json",
        loop="asyncio",
        seed=Path("seed.json"),
        mcp_tools=("read",),
        mcp_schema="compact",
        lifeline=5,
    )
    changed = [f.name for f in dataclasses.fields(ServerConfig) if f.name not in {"workers"}]
    assert all(getattr(configured, name) != getattr(ServerConfig(), name) for name in changed)
    inherited = {"CES_EVAL_LOCATIONS": "asia-east1", "CES_EVAL_MCP_SCHEMA": "full"}
    args = parse(["serve", *_Group(configured, 3)._arguments(11)], inherited)
    assert args.worker_of == 11
    worker = options.config(ServerConfig, args)
    assert worker == dataclasses.replace(configured, workers=1, lifeline=None)


def test_the_core_receives_its_options_as_one_settings() -> None:
    configured = ServerConfig(
        export_dir=Path("e"),
        locations=("l1",),
        scheduler=False,
        agent_allow_hosts=("h",),
        agent_sessions=3,
        auth_tokens=Path("tokens.yaml"),
    )
    assert configured.core(own_ports=(1, 2)) == Settings(
        export_dir=Path("e"),
        locations=("l1",),
        scheduler=False,
        agent_allow_hosts=("h",),
        agent_sessions=3,
        export_per_project=True,
        own_ports=(1, 2),
    )
    # The core's defaults are the options' defaults.
    assert ServerConfig().core(own_ports=()) == Settings()


def test_a_setting_neither_an_option_nor_given_is_refused() -> None:
    with pytest.raises(TypeError, match=r"Settings\.own_ports: neither an option nor given"):
        options.project(Settings, ServerConfig(), export_per_project=False)
