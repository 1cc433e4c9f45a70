"""Build llama-cpp-python (the embedded engine) portably and install it into a venv; stdlib only.

Why not `pip install llama-cpp-python`: pip compiles it with llama.cpp's default
`GGML_NATIVE=ON` (`-march=native`), and keys its wheel cache by the source package only, so a
wheel compiled on one CPU is silently reused on another, whatever CMAKE_ARGS say. A native
build of 0.3.36 made on a CPU with AMX segfaulted at the first multi-token prompt.

So this script:

- picks portable flags for the CPU family (x86-64 with AVX2/FMA/F16C/BMI2: that set, native
  off; other x86-64: SSE only; ARM64 and the rest: native off, the compiler's baseline), or
  takes `LLAMA_CMAKE_ARGS` as given (then they are yours: e.g. `-DGGML_NATIVE=ON`);
- builds the wheel with pip's cache off into a directory keyed by the version, the flags, the
  machine, the Python tag and the compiler (`~/.cache/bias-discovery/llama-cpp-wheels/`, or
  `$BIAS_DISCOVERY_BUILD_CACHE`), so a changed flag set rebuilds and an unchanged one reuses;
- installs it into the venv (`--force-reinstall --no-deps`) unless the venv's stamp file
  (`VENV/llama-cpp-build.json`) already names the same build; the stamp is what
  `bias_discovery.llm.smoke` compares the running library's CPU features against.

    python scripts/build_llama_cpp.py --venv .venv --version 0.3.36 [--rebuild]
    python scripts/build_llama_cpp.py --venv .venv --latest      # the newest release (drift tier)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STAMP = "llama-cpp-build.json"
X86_PORTABLE = [
    "-DGGML_NATIVE=OFF",
    "-DGGML_AVX=ON",
    "-DGGML_AVX2=ON",
    "-DGGML_FMA=ON",
    "-DGGML_F16C=ON",
    "-DGGML_BMI2=ON",
]
"""x86-64-v3 (Haswell, 2013, and every AMD Zen): what every AVX2 CPU runs; no AVX-512 and no AMX
code paths, whose runtime support differs between CPUs and kernels."""
X86_BASELINE = [
    "-DGGML_NATIVE=OFF",
    "-DGGML_AVX=OFF",
    "-DGGML_AVX2=OFF",
    "-DGGML_FMA=OFF",
    "-DGGML_F16C=OFF",
    "-DGGML_BMI2=OFF",
]
COMMON = ["-DLLAVA_BUILD=OFF"]
"""The multimodal library (mtmd) is not used by bias-discovery and is loaded lazily by
llama-cpp-python; skipping it shortens the build."""


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def portable_cmake_args() -> tuple[list[str], str]:
    """The flags for this CPU family, and why."""
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64"):
        if {"avx2", "fma", "f16c", "bmi2"} <= cpu_flags():
            return X86_PORTABLE + COMMON, "x86-64 with AVX2: the portable AVX2 set, native off"
        return X86_BASELINE + COMMON, "x86-64 without AVX2: SSE only, native off"
    return ["-DGGML_NATIVE=OFF"] + COMMON, f"{machine}: native off (the compiler's baseline for {machine})"


def compiler_version() -> str:
    for cc in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            out = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout
            return out.splitlines()[0] if out else cc
    return "unknown"


def python_tag(python: Path) -> str:
    code = "import sys, sysconfig; print(f'cp{sys.version_info[0]}{sys.version_info[1]}-' + sysconfig.get_platform())"
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def build_key(version: str, cmake_args: list[str], tag: str, compiler: str) -> str:
    text = json.dumps(
        {
            "version": version,
            "cmake_args": cmake_args,
            "machine": platform.machine(),
            "python": tag,
            "compiler": compiler,
        },
        sort_keys=True,
    )
    return f"{version}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def pip(python: Path, *args: str, env: dict[str, str] | None = None) -> None:
    subprocess.run([str(python), "-m", "pip", *args], check=True, env=env)


def download_sdist(python: Path, spec: str, into: Path) -> Path:
    pip(python, "download", "-q", "--no-deps", "--no-binary", ":all:", "--no-cache-dir", spec, "-d", str(into))
    (sdist,) = into.glob("llama_cpp_python-*.tar.gz")
    return sdist


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, required=True)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--version", help="the llama-cpp-python release (the lock's)")
    which.add_argument("--latest", action="store_true", help="the newest release on the index")
    parser.add_argument("--rebuild", action="store_true", help="build again even if a wheel with this key exists")
    args = parser.parse_args()

    python = args.venv / "bin" / "python"
    given = os.environ.get("LLAMA_CMAKE_ARGS")
    if given is not None:
        cmake_args, why = given.split(), "LLAMA_CMAKE_ARGS as given"
    else:
        cmake_args, why = portable_cmake_args()
    tag, compiler = python_tag(python), compiler_version()
    cache = (
        Path(os.environ.get("BIAS_DISCOVERY_BUILD_CACHE", Path.home() / ".cache" / "bias-discovery"))
        / "llama-cpp-wheels"
    )

    with tempfile.TemporaryDirectory(prefix="llama-cpp-sdist-") as tmp:
        sdist: Path | None = None
        if args.latest:
            sdist = download_sdist(python, "llama-cpp-python", Path(tmp))
            version = re.match(r"llama_cpp_python-(.+)\.tar\.gz", sdist.name).group(1)  # type: ignore[union-attr]
        else:
            version = args.version
        key = build_key(version, cmake_args, tag, compiler)
        info = {
            "version": version,
            "cmake_args": cmake_args,
            "why": why,
            "machine": platform.machine(),
            "python": tag,
            "compiler": compiler,
            "key": key,
        }
        stamp_path = args.venv / STAMP
        try:
            installed = json.loads(stamp_path.read_text()).get("key")
        except (OSError, ValueError):
            installed = None
        out = cache / key
        wheels = sorted(out.glob("llama_cpp_python-*.whl"))
        if installed == key and wheels and not args.rebuild:
            print(f"llama-cpp-python {version}: installed build {key} ({' '.join(cmake_args)})", file=sys.stderr)
            return 0
        if not wheels or args.rebuild:
            if sdist is None:
                sdist = download_sdist(python, f"llama-cpp-python=={version}", Path(tmp))
            shutil.rmtree(out, ignore_errors=True)
            building = out.with_name(out.name + ".building")
            shutil.rmtree(building, ignore_errors=True)
            building.mkdir(parents=True)
            jobs = str(os.cpu_count() or 1)
            print(
                f"llama-cpp-python {version}: building ({why})\n  CMAKE_ARGS={' '.join(cmake_args)}\n"
                f"  {jobs} parallel jobs; about 4 minutes on 2 cores; key {key}",
                file=sys.stderr,
            )
            env = {
                **os.environ,
                "CMAKE_ARGS": " ".join(cmake_args),
                "CMAKE_BUILD_PARALLEL_LEVEL": jobs,
                "PIP_NO_CACHE_DIR": "1",
            }
            started = time.monotonic()
            pip(python, "wheel", "-q", "--no-deps", "--no-cache-dir", str(sdist), "-w", str(building), env=env)
            info["build_seconds"] = round(time.monotonic() - started, 1)
            info["built_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            (building / "build.json").write_text(json.dumps(info, indent=2) + "\n")
            building.rename(out)  # only a finished build gets the key's name
            wheels = sorted(out.glob("llama_cpp_python-*.whl"))
            print(f"llama-cpp-python {version}: built in {info['build_seconds']:.0f} s into {out}", file=sys.stderr)
        else:
            print(f"llama-cpp-python {version}: reusing the wheel built with these flags ({out})", file=sys.stderr)
        built = json.loads((out / "build.json").read_text())
        pip(python, "install", "-q", "--no-deps", "--force-reinstall", "--no-cache-dir", str(wheels[-1]))
        stamp_path.write_text(json.dumps(built, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
