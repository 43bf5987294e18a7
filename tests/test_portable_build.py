"""The compiled llama.cpp libraries run on any x86-64 CPU with AVX2 (issue: SIGILL on AMX hosts).

The Makefile builds llama-cpp-python with ``GGML_NATIVE=OFF`` and an explicit AVX2 baseline.
A native build on a CPU that advertises AMX emits AMX tile instructions (``tileloadd``...), which
die with SIGILL where the hypervisor leaves AMX tile state off; likewise AVX-512 code on a CPU
without it. This test disassembles every shared library of the installed ``llama_cpp`` package
and fails on any AMX mnemonic or AVX-512 register (``zmm``, opmask ``k1``-``k7``), since our
build has no runtime dispatch that could guard them.
"""
from __future__ import annotations

import hashlib
import importlib.util
import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 instruction check")

#: AMX (Intel SDM vol. 2, "AMX" instructions) and the AVX-512-only register classes.
FORBIDDEN = re.compile(
    r"\b(ldtilecfg|sttilecfg|tileloadd|tileloaddt1|tilestored|tilerelease|tilezero|"
    r"tdpbssd|tdpbsud|tdpbusd|tdpbuud|tdpbf16ps|tdpfp16ps)\b"
    r"|%zmm\d+|\{%k[1-7]\}")


def forbidden_instructions(disassembly: str, limit: int = 5) -> list[str]:
    """Up to ``limit`` lines of ``objdump -d`` text that use AMX or AVX-512 (see ``FORBIDDEN``)."""
    hits = []
    for line in disassembly.splitlines():
        if FORBIDDEN.search(line):
            hits.append(line.strip())
            if len(hits) >= limit:
                break
    return hits


def test_forbidden_pattern_catches_amx_and_avx512():
    sample = ("  10:\ttileloadd (%rsi,%rdx,1),%tmm0\n"
              "  20:\tvaddps %zmm1,%zmm2,%zmm3\n"
              "  30:\tvmovups %ymm0,(%rdi){%k1}\n"
              "  40:\tvfmadd231ps %ymm1,%ymm2,%ymm0\n")
    assert len(forbidden_instructions(sample)) == 3
    assert forbidden_instructions("  40:\tvfmadd231ps %ymm1,%ymm2,%ymm0\n") == []


def _llama_libraries() -> list[Path]:
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("llama_cpp is not installed: run `make install`")
    lib_dir = Path(next(iter(spec.submodule_search_locations))) / "lib"
    unique: dict[str, Path] = {}  # the wheel ships libX.so, .so.0, .so.0.N.M as copies
    for p in sorted(lib_dir.glob("*.so*")):
        if p.is_file() and not p.is_symlink():
            unique.setdefault(hashlib.sha256(p.read_bytes()).hexdigest(), p)
    return sorted(unique.values())


@pytest.mark.skipif(shutil.which("objdump") is None, reason="needs binutils' objdump")
def test_llama_cpp_libraries_have_no_amx_or_avx512():
    libs = _llama_libraries()
    assert any(p.name.startswith("libggml-cpu") for p in libs), [p.name for p in libs]
    offenders = {}
    for lib in libs:
        dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(lib)],
                             capture_output=True, text=True, check=True).stdout
        hits = forbidden_instructions(dis)
        if hits:
            offenders[lib.name] = hits
    assert not offenders, f"native CPU code in the llama.cpp build (rebuild, see Makefile): {offenders}"


@pytest.mark.skipif(shutil.which("objdump") is None, reason="needs binutils' objdump")
def test_llama_server_binary_has_no_amx_or_avx512():
    """``make install`` links llama-server statically with the same baseline; skipped where the
    build did not happen (the embedded endpoint then runs the Python server checked above)."""
    from pipeline.llm.server import llama_server_path
    binary = llama_server_path()
    if binary is None:
        pytest.skip("llama-server is not installed in this environment")
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(binary)],
                         capture_output=True, text=True, check=True).stdout
    assert "ggml_vec_dot_q4_K_q8_K" in dis  # the CPU kernels the default teacher runs are in it
    hits = forbidden_instructions(dis)
    assert not hits, f"native CPU code in llama-server (rebuild, see Makefile): {hits}"
