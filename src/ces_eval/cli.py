"""The ``ces-eval`` command."""

from __future__ import annotations

import argparse
import sys

from ces_eval import __version__, schema

__all__ = ["main"]


def _describe(_: argparse.Namespace) -> int:
    """Print every method with its HTTP binding, as read from the descriptors."""
    for binding in schema.http_bindings():
        body = f"  body={binding.body}" if binding.body else ""
        print(f"{binding.verb:6} {binding.template}  {binding.method.full_name}{body}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ces-eval",
        description="Local server for Google's CES EvaluationService (google.cloud.ces.v1beta).",
    )
    parser.add_argument("--version", action="version", version=f"ces-eval {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    describe = commands.add_parser("describe", help="list the methods and their HTTP bindings")
    describe.set_defaults(run=_describe)
    args = parser.parse_args(argv)
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
