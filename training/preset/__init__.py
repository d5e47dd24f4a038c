"""The CPU preset: a tiny Qwen2 model and a local tokenizer, warm-started on tool-use demonstrations.

`resolve_model_path("preset:cpu-tiny", cache_dir)` builds (once) and returns the model directory;
`resolve_target_entropy(model_dir, 0.7)` gives STARE's target from the measured warm-start entropy.
"""

from training.preset.model import build_tiny_model
from training.preset.settings import PRESETS, PresetSettings, get_preset
from training.preset.tokenizer import build_tokenizer
from training.preset.warmstart import read_warmstart, resolve_model_path, resolve_target_entropy

__all__ = [
    "PRESETS",
    "PresetSettings",
    "build_tiny_model",
    "build_tokenizer",
    "get_preset",
    "read_warmstart",
    "resolve_model_path",
    "resolve_target_entropy",
]
