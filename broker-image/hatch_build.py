"""Generate the gRPC/protobuf stubs from ``proto/`` at build time.

The ``.proto`` files are the one source of the wire protocol; the generated modules are build
artefacts (git-ignored) so they can never drift from the definitions. They are written into the
source tree so that editable installs (``uv sync``) and wheels both carry them: the messages
(``*_pb2``) into ``src/strom/protocol/v1``, the gRPC service stubs (``*_pb2_grpc``, which import
``grpc``) into ``src/strom/transport/v1``, so that ``strom.protocol`` knows no transport
(docs/architecture.md § 7; an import-linter contract without exceptions).

protoc names Python modules after the proto file path (``strom/v1/x.proto`` -> ``strom.v1.x_pb2``);
we keep the proto package ``strom.v1`` (docs/architecture.md § 3) and rewrite the generated
imports to the ``strom.protocol.v1`` package where the messages live.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

ROOT = Path(__file__).parent
PROTO_ROOT = ROOT / "proto"
OUT = ROOT / "src" / "strom" / "protocol" / "v1"
GRPC_OUT = ROOT / "src" / "strom" / "transport" / "v1"


def generate() -> list[Path]:
    """Run protoc on every .proto file; return the files written."""
    from grpc_tools import protoc  # build-time dependency only

    protos = sorted(PROTO_ROOT.rglob("*.proto"))
    if not protos:
        raise RuntimeError(f"no .proto files under {PROTO_ROOT}")
    import grpc_tools

    well_known = Path(grpc_tools.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory() as tmp:
        args = [
            "protoc",
            f"-I{PROTO_ROOT}",
            f"-I{well_known}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            f"--grpc_python_out={tmp}",
            *[str(p.relative_to(PROTO_ROOT)) for p in protos],
        ]
        if protoc.main(args) != 0:
            raise RuntimeError("protoc failed: " + " ".join(args))
        written = []
        for out in (OUT, GRPC_OUT):
            out.mkdir(parents=True, exist_ok=True)
            for old in out.glob("*_pb2*.py*"):
                old.unlink()
            init = out / "__init__.py"
            init.write_text('"""Generated from proto/strom/v1 at build time (hatch_build.py). '
                            'Do not edit."""\n')
            written.append(init)
        for src in sorted((Path(tmp) / "strom" / "v1").iterdir()):
            text = src.read_text()
            text = re.sub(r"^from strom\.v1 import", "from strom.protocol.v1 import", text,
                          flags=re.M)
            text = re.sub(r"^import strom\.v1\.", "import strom.protocol.v1.", text, flags=re.M)
            dst = (GRPC_OUT if src.name.endswith("_pb2_grpc.py") else OUT) / src.name
            dst.write_text(text)
            written.append(dst)
        shutil.rmtree(Path(tmp) / "strom", ignore_errors=True)
    return written


class CustomBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        generate()


if __name__ == "__main__":
    for path in generate():
        print(path)
