"""The embedded default base model: SmolLM2-135M-Instruct as a Hugging Face folder.

The conversion and its cache live in :mod:`pipeline.llm.hfmodel` (the usefulness scorer loads the
same folder); this module re-exports them for training and adds the content hashes a training
manifest records.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from pipeline.llm.hfmodel import convert_gguf, ensure_base_model  # noqa: F401 (sft's callers import them from here)

from pipeline.llm.server import default_cache_dir  # noqa: F401 (sft's callers import it from here)

#: Files whose bytes define the weights / the tokenizer (for the manifest content hashes).
WEIGHT_SUFFIXES = (".safetensors", ".bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "chat_template.jinja", "tokenizer.model")


def _hash_files(paths: list[Path], root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(str(p.relative_to(root)).encode() + b"\0")
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def content_hashes(model_dir: str | Path) -> dict[str, str]:
    """``{"weights_sha256", "tokenizer_sha256"}`` of a model folder: sha256 over (relative name,
    bytes) of the weight files and of the tokenizer files, in name order.

    Raises ``FileNotFoundError`` when the folder has no weight file.
    """
    root = Path(model_dir)
    weights = [p for p in root.iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file()]
    if not weights:
        raise FileNotFoundError(f"no weight files ({', '.join(WEIGHT_SUFFIXES)}) in {root}")
    tok = [root / n for n in TOKENIZER_FILES if (root / n).is_file()]
    return {"weights_sha256": _hash_files(weights, root), "tokenizer_sha256": _hash_files(tok, root)}
