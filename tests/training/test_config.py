"""Config: YAML presets, dotted overrides, validation errors naming the key, the generated docs page."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest
import yaml

import stare
from training.config import CONFIG_DIR, TrainConfig, dump_yaml, from_dict, load_config
from training.config_parse import ConfigError, parse_override

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _config_doc():
    """scripts/config_doc.py (a development script, not an installed module)."""
    spec = importlib.util.spec_from_file_location("config_doc", ROOT / "scripts" / "config_doc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_overrides_reach_nested_fields_and_pick_presets():
    cfg = load_config("cpu-tiny", ["algo=dapo", "seed=3", "train.steps=50", "algo.clip_high=0.3",
                                   "algo.stare.w=1.5", "eval.tasks=[a, b]", "optim.betas=[0.8, 0.9]"])
    assert cfg.algo.name == "dapo" and cfg.algo.dynamic_sampling
    assert (cfg.seed, cfg.train.steps, cfg.algo.clip_high, cfg.algo.stare.w) == (3, 50, 0.3, 1.5)
    assert cfg.eval.tasks == ("a", "b") and cfg.optim.betas == (0.8, 0.9)
    assert cfg.algo.overlong_buffer == 0          # from the YAML, kept when the preset changes
    assert cfg.run_name == "dapo-seed3"


def test_each_algo_preset_loads_with_its_reference_values():
    for name, preset in stare.PRESETS.items():
        cfg = load_config(None, [f"algo={name}"])
        assert cfg.algo == preset


def test_numbers_strings_and_case():
    cfg = load_config(None, ["optim.lr=1e-3", "algo.stare.variant=c2", "log.progress=off"])
    assert cfg.optim.lr == 1e-3 and cfg.algo.stare.variant == "C2" and cfg.log.progress is False


@pytest.mark.parametrize("override, words", [
    ("train.stesp=3", ["unknown config key 'train.stesp'", "Did you mean 'train.steps'"]),
    ("rolout.group_size=4", ["unknown config key 'rolout'", "Did you mean 'rollout'"]),
    ("algo=stare-01", ["'stare-01' is not a known preset", "Did you mean 'stare-o1'", "grpo-ds"]),
    ("algo.loss_agg=mean", ["algo.loss_agg='mean'", "token-mean", "seq-mean-token-sum"]),
    ("algo.stare.scope=batch", ["algo.stare.scope='batch'", "micro_batch", "global_batch"]),
    ("optim.schedule=cos", ["optim.schedule='cos'", "'constant', 'cosine', 'linear'"]),
    ("train.steps=ten", ["train.steps must be an integer", "'ten'"]),
    ("rollout.group_size=1", ["rollout.group_size must be >= 2"]),
    ("algo.stare.top_ratio=1.5", ["top_ratio", "[0, 1]"]),
    ("train.target_entropy=high", ["train.target_entropy", "'auto'"]),
    ("train=3", ["train is a section"]),
    ("nokey", ["key=value"]),
])
def test_bad_configs_name_the_key_and_the_fix(override, words):
    with pytest.raises(ConfigError) as info:
        load_config(None, [override])
    for word in words:
        assert word in str(info.value)


def test_unknown_config_file_suggests_presets():
    with pytest.raises(ConfigError, match="Did you mean 'cpu-tiny'"):
        load_config("cpu-tyni")


def test_target_entropy_auto_is_routed_to_the_train_section():
    cfg = load_config(None, ["algo.stare.target_entropy=auto"])
    assert cfg.train.target_entropy == "auto"
    assert cfg.algo.stare.target_entropy == stare.get_preset("stare-o1").stare.target_entropy


def test_dump_round_trips():
    cfg = load_config("cpu-tiny", ["algo=stare-c2", "algo.stare.w=1.3", "seed=2"])
    assert from_dict(yaml.safe_load(dump_yaml(cfg))) == cfg


def test_every_shipped_yaml_loads():
    names = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
    assert "cpu-tiny" in names
    for name in names:
        assert isinstance(load_config(name), TrainConfig)


def test_parse_override_uses_yaml_values():
    assert parse_override("a.b=[1, 2]") == (["a", "b"], [1, 2])
    assert parse_override("x=null") == (["x"], None)


def test_accelerate_configs_load_with_accelerates_loader():
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.utils import DistributedType
    expected = {"cpu": DistributedType.NO, "ddp": DistributedType.MULTI_GPU, "fsdp": DistributedType.FSDP,
                "deepspeed-zero3": DistributedType.DEEPSPEED}
    for name, kind in expected.items():
        loaded = load_config_from_file(str(CONFIG_DIR / "accelerate" / f"{name}.yaml"))
        assert loaded.distributed_type == kind
    assert load_config_from_file(str(CONFIG_DIR / "accelerate" / "deepspeed-zero3.yaml")).deepspeed_config[
        "zero_stage"] == 3


def test_docs_config_md_is_current_and_documents_every_key():
    page = _config_doc().markdown()
    assert (ROOT / "docs" / "config.md").read_text() == page, \
        "docs/config.md is stale: run `python scripts/config_doc.py > docs/config.md`"
    for line in page.splitlines():
        if line.startswith("| `"):
            assert not line.rstrip().endswith("|  |"), f"undocumented key: {line}"
    for key in ("train.steps", "algo.stare.scope", "eval.top_p", "rollout.group_size", "log.save_every"):
        assert f"| `{key}` |" in page


def test_target_entropy_number_and_auto_resolve_into_the_algo(monkeypatch, tmp_path):
    import training.preset
    from training import runtime
    cfg = load_config(None, ["train.target_entropy=0.42"])
    assert runtime.resolve_algo(cfg, tmp_path).stare.target_entropy == 0.42
    calls = []
    def fake(model_dir, factor):
        calls.append((model_dir, factor))
        return 0.5 * factor
    monkeypatch.setattr(training.preset, "resolve_target_entropy", fake, raising=False)
    cfg = load_config(None, ["train.target_entropy=auto", "train.target_entropy_factor=0.7"])
    assert runtime.resolve_algo(cfg, tmp_path).stare.target_entropy == pytest.approx(0.35)
    assert calls == [(tmp_path, 0.7)]
    assert runtime.resolve_algo(load_config(None), tmp_path) == load_config(None).algo


def test_overlong_buffer_longer_than_the_budget_is_refused():
    from training import runtime
    with pytest.raises(ValueError, match="algo.overlong_buffer=4096 exceeds rollout.max_response_tokens=256"):
        runtime.check_config(load_config(None, ["algo=dapo"]))


@pytest.mark.parametrize("override, key", [
    ("rollout.group_size=1e9", "rollout.group_size"), ("rollout.group_size=1000000000", "rollout.group_size"),
    ("rollout.prompts_per_step=0", "rollout.prompts_per_step"), ("train.steps=-3", "train.steps"),
    ("optim.lr=0", "optim.lr"), ("optim.lr=-1e-6", "optim.lr"), ("optim.lr=5", "optim.lr"),
    ("rollout.max_new_tokens=100000000", "rollout.max_new_tokens"), ("eval.k=0", "eval.k"),
    ("rollout.max_workers=100000", "rollout.max_workers"), ("data.train_limit=-1", "data.train_limit"),
    ("log.keep_checkpoints=0", "log.keep_checkpoints"), ("log.save_every=-1", "log.save_every"),
    ("rollout.vllm.tensor_parallel_size=0", "rollout.vllm.tensor_parallel_size"),
    ("rollout.vllm.gpu_memory_utilization=1.5", "gpu_memory_utilization"),
    ("eval.top_p=0", "eval.top_p"), ("train.micro_batch_tokens=1000000000", "train.micro_batch_tokens"),
])
def test_absurd_values_are_refused_at_load_naming_the_field(override, key):
    with pytest.raises(ConfigError) as info:
        load_config(None, [override])
    assert key in str(info.value)


def test_the_vllm_keys_form_a_section_and_the_old_flat_keys_still_load_with_a_warning():
    new = load_config(None, ["rollout.vllm.max_model_len=512", "rollout.vllm.device_ids=[1]"])
    assert new.rollout.vllm.max_model_len == 512 and new.rollout.vllm.device_ids == (1,)
    with pytest.warns(FutureWarning, match=r"rollout\.vllm_max_model_len .*rollout\.vllm\.max_model_len"):
        old = load_config(None, ["rollout.vllm_max_model_len=512", "rollout.vllm_device_ids=[1]"])
    assert old == new
    with pytest.warns(FutureWarning, match="dynamic_sampling_metric"):
        assert load_config(None, ["algo.dynamic_sampling_metric=acc"]) == load_config(None)


def test_target_entropy_is_one_typed_field():
    assert load_config(None).train.target_entropy is None            # the algorithm preset's H_tgt
    assert load_config(None, ["train.target_entropy=0.42"]).train.target_entropy == 0.42
    assert load_config(None, ["train.target_entropy=auto"]).train.target_entropy == "auto"
    assert from_dict({"train": {"target_entropy": ""}}).train.target_entropy is None   # older run dumps
