"""The compiled llama.cpp libraries run on any x86-64 CPU with AVX2 (issue: SIGILL on AMX hosts).

The Makefile builds llama-cpp-python with ``GGML_NATIVE=OFF`` and an explicit AVX2 baseline.
A native build on a CPU that advertises AMX emits AMX tile instructions (``tileloadd``...), which
die with SIGILL where the hypervisor leaves AMX tile state off; likewise AVX-512 code on a CPU
without it. This test disassembles every shared library of the installed ``llama_cpp`` package
and fails on any AMX mnemonic or AVX-512 register (``zmm``, opmask ``k1``-``k7``), since our
build has no runtime dispatch that could guard them. The same holds for the baseline
``llama-server``. Its AVX-512 build (``llama-server-avx512``) is chosen at run time only on a CPU
whose flags list every extension it was compiled for; it may use AVX-512 but never AMX, and the
Makefile's compiler switches and the run-time check name the same extensions.
"""
from __future__ import annotations

import hashlib
import importlib.util
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.llm.server import LLAMA_SERVER_VARIANTS

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 instruction check")

#: AMX (Intel SDM vol. 2, "AMX" instructions).
AMX = (r"\b(ldtilecfg|sttilecfg|tileloadd|tileloaddt1|tilestored|tilerelease|tilezero|"
       r"tdpbssd|tdpbsud|tdpbusd|tdpbuud|tdpbf16ps|tdpfp16ps)\b")
#: AMX and the AVX-512-only register classes.
FORBIDDEN = re.compile(AMX + r"|%zmm\d+|\{%k[1-7]\}")


def forbidden_instructions(disassembly: str, limit: int = 5, pattern: re.Pattern = FORBIDDEN) -> list[str]:
    """Up to ``limit`` lines of ``objdump -d`` text that match ``pattern`` (default: AMX or
    AVX-512, see ``FORBIDDEN``)."""
    hits = []
    for line in disassembly.splitlines():
        if pattern.search(line):
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
    binary = Path(sys.executable).parent / "llama-server"
    if not binary.is_file():
        pytest.skip("llama-server is not installed in this environment")
    dis = _disassembly(binary)
    assert "ggml_vec_dot_q4_K_q8_K" in dis  # the CPU kernels the default teacher runs are in it
    hits = forbidden_instructions(dis)
    assert not hits, f"native CPU code in llama-server (rebuild, see Makefile): {hits}"


def _disassembly(binary: Path) -> str:
    return subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(binary)],
                          capture_output=True, text=True, check=True).stdout


@pytest.mark.skipif(shutil.which("objdump") is None, reason="needs binutils' objdump")
@pytest.mark.parametrize("name", [n for n, _ in LLAMA_SERVER_VARIANTS])
def test_llama_server_variant_uses_avx512_but_no_amx(name):
    """A variant binary really is the faster build (AVX-512 registers in its kernels) and has no
    AMX, which no run-time check here guards."""
    binary = Path(sys.executable).parent / f"llama-server-{name}"
    if not binary.is_file():
        pytest.skip(f"llama-server-{name} is not installed in this environment")
    dis = _disassembly(binary)
    assert "ggml_vec_dot_q4_K_q8_K" in dis
    assert forbidden_instructions(dis, pattern=re.compile(r"%zmm\d+")), "no AVX-512 code: the baseline build again?"
    hits = forbidden_instructions(dis, pattern=re.compile(AMX))
    assert not hits, f"AMX code in llama-server-{name}: {hits}"


#: The CPU flags (``/proc/cpuinfo`` names) each ggml CMake switch compiles for
#: (ggml/src/ggml-cpu/CMakeLists.txt: GGML_AVX512 adds -mavx512f -mavx512cd -mavx512vl
#: -mavx512dq -mavx512bw; the others one -m switch each).
CMAKE_FLAGS = {"GGML_SSE42": {"sse4_2"}, "GGML_AVX": {"avx"}, "GGML_AVX2": {"avx2"}, "GGML_FMA": {"fma"},
               "GGML_F16C": {"f16c"}, "GGML_BMI2": {"bmi2"}, "GGML_AVX_VNNI": {"avx_vnni"},
               "GGML_AVX512": {"avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"},
               "GGML_AVX512_VBMI": {"avx512vbmi"}, "GGML_AVX512_VNNI": {"avx512_vnni"},
               "GGML_AVX512_BF16": {"avx512_bf16"}, "GGML_AMX_TILE": {"amx_tile"},
               "GGML_AMX_INT8": {"amx_int8"}, "GGML_AMX_BF16": {"amx_bf16"}}


def _make_var(text: str, name: str) -> str:
    """The value of ``name := ...`` in the Makefile ``text``, continuation lines joined."""
    m = re.search(rf"^{re.escape(name)} := ((?:.*\\\n)*.*)$", text, re.M)
    assert m, f"{name} not in the Makefile"
    return m[1].replace("\\\n", " ")


def _compiled_for(switches: str, flags: set[str]) -> set[str]:
    """``flags`` after the ``-DGGML_X=ON|OFF`` switches in ``switches``, in order (the last wins, as in cmake)."""
    out = set(flags)
    for key, value in re.findall(r"-D(GGML_\w+)=(ON|OFF)", switches):
        if key in CMAKE_FLAGS:
            out = out | CMAKE_FLAGS[key] if value == "ON" else out - CMAKE_FLAGS[key]
    return out


def test_makefile_variants_match_the_run_time_check():
    """Each variant the Makefile builds needs exactly the CPU flags that
    ``pipeline.llm.server.LLAMA_SERVER_VARIANTS`` checks before running it, and the baseline's
    flags are a subset of every variant's."""
    text = (Path(__file__).resolve().parents[1] / "Makefile").read_text(encoding="utf-8")
    base = _compiled_for(_make_var(text, "LLAMA_CMAKE_ARGS"), set())
    assert base == {"sse4_2", "avx", "avx2", "fma", "f16c", "bmi2"}
    names = _make_var(text, "LLAMA_SERVER_VARIANTS").split()
    assert names == [n for n, _ in LLAMA_SERVER_VARIANTS]
    for name, needs in LLAMA_SERVER_VARIANTS:
        built = _compiled_for(_make_var(text, f"LLAMA_SERVER_VARIANT_ARGS_{name}"), base)
        assert built == needs, (name, sorted(built ^ needs))
        assert not any(f.startswith("amx") for f in built)
