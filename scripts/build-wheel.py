#!/usr/bin/env python3
"""Writes the hptune wheel: the Python package of python/ and a built hptune binary.

    scripts/build-wheel.py --binary target/release/hptune [--out dist] [--platform TAG]

No second cargo build: the binary is the one `cargo build` made (CI's debug build for the
tests, `cargo build --release` for a wheel to publish). The wheel holds the package, the
binary as `hptune-<version>.data/scripts/hptune` (pip installs it into the environment's
bin/ folder, executable), and the dist-info (METADATA, WHEEL, RECORD with each file's
sha256). Its tag is py3-none-<platform>: on Linux `manylinux_2_<N>_<arch>`, N the newest
glibc symbol version the binary uses, when it links only libraries every manylinux system
has, else `linux_<arch>`, which pip installs only on machines like this one. Prints the
wheel's path. Needs Python 3.11 (tomllib).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import platform
import re
import struct
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "python"
# The libraries a manylinux wheel may link against (PEP 600 and auditwheel's policy) that a
# Rust binary can need.
MANYLINUX_LIBRARIES = {
    "libc.so.6", "libm.so.6", "libgcc_s.so.1", "libpthread.so.0", "libdl.so.2",
    "librt.so.1", "libutil.so.1", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1",
}
ELF_MACHINES = {62: "x86_64", 183: "aarch64"}
# A zip entry's mode: a regular file, rw-r--r-- or rwxr-xr-x.
FILE_MODE, EXECUTABLE_MODE = 0o100644, 0o100755


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", required=True, type=Path, help="the built hptune binary")
    parser.add_argument("--out", type=Path, default=REPO / "dist", help="the folder the wheel goes to")
    parser.add_argument("--platform", help="the platform tag (default: the binary's, as above)")
    args = parser.parse_args()

    project = tomllib.loads((PACKAGE / "pyproject.toml").read_text())["project"]
    name, version = project["name"], project["version"]
    binary_version = run_version(args.binary)
    if binary_version != version:
        sys.exit(f"build-wheel: {args.binary} is hptune {binary_version}, python/pyproject.toml says {version}")
    tag = f"py3-none-{args.platform or platform_tag(args.binary)}"
    args.out.mkdir(parents=True, exist_ok=True)
    wheel = args.out / f"{name}-{version}-{tag}.whl"
    dist_info = f"{name}-{version}.dist-info"

    files: list[tuple[str, bytes, int]] = []
    source = PACKAGE / "src" / name
    for path in sorted(source.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            files.append((f"{name}/{path.relative_to(source).as_posix()}", path.read_bytes(), FILE_MODE))
    files.append((f"{name}-{version}.data/scripts/hptune", args.binary.read_bytes(), EXECUTABLE_MODE))
    files.append((f"{dist_info}/METADATA", metadata(project).encode(), FILE_MODE))
    wheel_file = f"Wheel-Version: 1.0\nGenerator: hptune build-wheel.py\nRoot-Is-Purelib: false\nTag: {tag}\n"
    files.append((f"{dist_info}/WHEEL", wheel_file.encode(), FILE_MODE))
    record = "".join(f"{path},sha256={digest(data)},{len(data)}\n" for path, data, _ in files)
    files.append((f"{dist_info}/RECORD", (record + f"{dist_info}/RECORD,,\n").encode(), FILE_MODE))

    partial = wheel.with_suffix(".partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data, mode in files:
            entry = zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0))
            entry.external_attr = mode << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(entry, data)
    partial.replace(wheel)
    print(wheel)


def run_version(binary: Path) -> str:
    """The version `BINARY --version` prints (`hptune 0.1.0`)."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as err:
        sys.exit(f"build-wheel: cannot run {binary} --version: {err}")
    return str(out.split()[-1])


def metadata(project: dict[str, Any]) -> str:
    """The METADATA of the wheel (core metadata 2.1), from python/pyproject.toml."""
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {project['version']}",
        f"Summary: {project['description']}",
        f"License: {project['license']['text']}",
        f"Requires-Python: {project['requires-python']}",
        *(f"Classifier: {c}" for c in project.get("classifiers", [])),
        "Description-Content-Type: text/markdown",
    ]
    readme = (PACKAGE / str(project["readme"])).read_text()
    return "\n".join(lines) + "\n\n" + readme


def digest(data: bytes) -> str:
    """A RECORD's hash: urlsafe base64 of the sha256, without padding."""
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def platform_tag(binary: Path) -> str:
    """The platform tag of the binary (module docstring)."""
    data = binary.read_bytes()
    if not data.startswith(b"\x7fELF"):
        return re.sub(r"[-.]", "_", sysconfig.get_platform())
    machine = ELF_MACHINES.get(struct.unpack_from("<H", data, 18)[0], platform.machine())
    needed = elf_needed(data)
    glibc = [int(v) for v in re.findall(rb"GLIBC_2\.(\d+)", data)]
    if glibc and set(needed) <= MANYLINUX_LIBRARIES:
        return f"manylinux_2_{max(glibc)}_{machine}"
    outside = sorted(set(needed) - MANYLINUX_LIBRARIES)
    print(f"build-wheel: {binary} links {outside or 'no glibc'}: tagged linux_{machine}", file=sys.stderr)
    return f"linux_{machine}"


def elf_needed(data: bytes) -> list[str]:
    """The DT_NEEDED libraries of a 64-bit little-endian ELF file."""
    if data[4] != 2 or data[5] != 1:
        sys.exit("build-wheel: only 64-bit little-endian ELF binaries are known")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    needed = []
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind != 6:  # SHT_DYNAMIC
            continue
        strings = sections[link][4]
        for at in range(offset, offset + size, entsize):
            tag, value = struct.unpack_from("<qQ", data, at)
            if tag == 0:
                break
            if tag == 1:  # DT_NEEDED
                start = strings + value
                needed.append(data[start:data.index(b"\0", start)].decode())
    return needed


if __name__ == "__main__":
    main()
