"""Generate the protocol's Python classes from the vendored `FunctionRpc.proto` (tools/host/proto/README.md):

    .venv/bin/python -m tools.host.generate_proto

grpcio-tools' protoc (pinned in requirements-dev.txt) compiles every `.proto` of tools/host/proto/ into `*_pb2.py` and
its typed stub `*_pb2.pyi` beside it; the generated modules' imports of each other are made relative, so the folder
is a package (`tools.host.proto`) rather than top-level modules named `shared` and `identity`, and the stubs leave out
the enum values whose names are Python keywords (`BindingInfo.Direction.in`, `RpcLog.Level.None`,
`RpcHttpCookie.SameSite.None`), which protoc writes as declarations no type checker can parse (the classes keep
them: `getattr(BindingInfo, "in")`). The output is committed; tests/tools/test_host_protocol.py fails when
generating again gives other bytes (a changed proto, or a protoc of another version)."""

import argparse
import keyword
import re
import tempfile
from importlib import resources
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent / "proto"
SOURCES = ("FunctionRpc.proto", "identity/ClaimsIdentityRpc.proto", "shared/NullableTypes.proto")
_OWN_PACKAGES = "|".join(sorted({Path(source).parent.name for source in SOURCES if "/" in source}))
_OWN_IMPORT = re.compile(rf"^from ({_OWN_PACKAGES}) import ", re.MULTILINE)


class GenerationFailed(RuntimeError):
    """protoc refused the sources (its messages are on stderr)."""


def generated_files() -> dict[str, bytes]:
    """What protoc makes of the vendored sources, by path relative to tools/host/proto/, imports made relative."""
    from grpc_tools import protoc  # the pinned grpcio-tools; only this command and its test need it

    well_known = resources.files("grpc_tools") / "_proto"  # google/protobuf/*.proto, shipped with grpcio-tools
    with tempfile.TemporaryDirectory(prefix="functions-rpc-") as out:
        arguments = ["protoc", f"-I{PROTO_DIR}", f"-I{well_known}", f"--python_out={out}", f"--pyi_out={out}"]
        if protoc.main([*arguments, *(str(PROTO_DIR / source) for source in SOURCES)]) != 0:
            raise GenerationFailed(f"protoc refused {', '.join(SOURCES)} in {PROTO_DIR}")
        files = {}
        for path in sorted(Path(out).rglob("*_pb2.py*")):
            code = _relative_imports(path.relative_to(out), path.read_bytes())
            files[path.relative_to(out).as_posix()] = _without_keywords(code) if path.suffix == ".pyi" else code
        return files


def _relative_imports(path: Path, code: bytes) -> bytes:
    """`from shared import NullableTypes_pb2` as an import within the package, from wherever `path` sits in it."""
    dots = "." * len(path.parts)  # FunctionRpc_pb2.py: "."; identity/ClaimsIdentityRpc_pb2.py: ".."
    return _OWN_IMPORT.sub(lambda match: f"from {dots}{match.group(1)} import ", code.decode()).encode()


_DECLARED_NAME = re.compile(r"^\s+(\w+): ")


def _without_keywords(stub: bytes) -> bytes:
    """A stub without the declarations of names that are Python keywords (not valid Python in a stub)."""
    lines = stub.decode().splitlines(keepends=True)
    kept = [line for line in lines if not ((m := _DECLARED_NAME.match(line)) and keyword.iskeyword(m.group(1)))]
    return "".join(kept).encode()


def write(files: dict[str, bytes], into: Path = PROTO_DIR) -> list[Path]:
    """Write `files` under `into`; the paths written."""
    written = []
    for relative, content in files.items():
        target = into / relative
        target.write_bytes(content)
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tools.host.generate_proto",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.parse_args(argv)
    for path in write(generated_files()):
        print(path.relative_to(PROTO_DIR.parents[2]))


if __name__ == "__main__":
    main()
