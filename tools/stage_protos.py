"""Stage third-party .proto files into an ignored build folder for buf and the Node.js test.

We never commit googleapis or protobuf sources. They come from the installed
``googleapis-common-protos`` (google/api, google/rpc, google/longrunning, google/type,
google/cloud/location) and
``grpcio-tools`` (google/protobuf well-known types) distributions.

googleapis-common-protos ships ``google/longrunning/operations.proto`` as ``operations_proto.proto``
while its descriptor still registers under the canonical name; it is staged under the canonical
import path so that ``import "google/longrunning/operations.proto"`` resolves.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import google.api
import grpc_tools

_RENAMES = {"google/longrunning/operations_proto.proto": "google/longrunning/operations.proto"}


def _google_root() -> Path:
    # google.api is a namespace-less regular package inside the "google" namespace.
    return Path(next(iter(google.api.__path__))).parent


def stage(destination: Path) -> int:
    if destination.exists():
        shutil.rmtree(destination)
    count = 0
    sources = [
        (_google_root(), ("api", "rpc", "longrunning", "type", "cloud/location")),
        (Path(next(iter(grpc_tools.__path__))) / "_proto" / "google", ("protobuf",)),
    ]
    for root, packages in sources:
        for package in packages:
            for source in sorted((root / package).rglob("*.proto")):
                relative = "google/" + source.relative_to(root).as_posix()
                target = destination / _RENAMES.get(relative, relative)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)
                count += 1
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("destination", type=Path)
    args = parser.parse_args(argv)
    count = stage(args.destination)
    print(f"staged {count} third-party .proto files into {args.destination}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
