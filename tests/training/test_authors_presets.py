"""The authors' presets resolve to the settings of STARE_SPEC §3 (the table below is copied from it).

Loading a preset must not touch the model path (placeholders such as /models/Qwen2.5-Math-7B do
not exist here): only `train` resolves `model.path`.
"""

from __future__ import annotations

import pytest

from training.config import CONFIG_DIR, load_config
from training.runtime import check_config

# STARE_SPEC §3.1, the rows shared by the STARE and GRPO_ds scripts ("same" column).
SHARED = {
    "rollout.group_size": 8,                      # group size n
    "rollout.prompts_per_step": 64,               # train_batch_size (prompts) -> 512 responses
    "rollout.prompts_per_round": 192,             # gen_batch_size = 3 × 64
    "train.mini_batches": 1,                      # ppo_mini_batch_size 64: on-policy
    "train.epochs": 1,                            # ppo_epochs 1
    "algo.clip_low": 0.2,
    "algo.clip_high": 0.28,
    "algo.clip_c": 10.0,                          # dual clip
    "algo.loss_agg": "token-mean",
    "algo.kl_coef": 0.0,                          # no KL, no reference model
    "algo.entropy_coef": 0.0,
    "algo.norm_adv_by_std": True,                 # grpo, norm_adv_by_std_in_grpo
    "algo.dynamic_sampling": True,                # filter_groups
    "algo.max_gen_rounds": 10,                    # max_num_gen_batches
    "algo.stare.variant": "O1",
    "algo.stare.adaptive": False,
    "algo.stare.alpha": 0.01,
    "algo.stare.w_max": 1.5,
    "algo.stare.m_min": 0.5,
    "rollout.max_response_tokens": 3072,          # max_response_length
    "rollout.max_prompt_tokens": 1024,            # max_prompt_length
    "rollout.prompt_truncation": "left",          # truncation
    "rollout.vllm.max_model_len": 1024 + 3072,    # max_prompt_length + max_response_length
    "optim.lr": 1e-6,
    "optim.schedule": "constant",
    "optim.warmup_steps": 0,
    "optim.weight_decay": 0.01,
    "optim.betas": (0.9, 0.999),
    "optim.grad_clip": 1.0,
    "rollout.temperature": 1.0,
    "rollout.top_p": 1.0,
    "rollout.top_k": -1,
    "rollout.engine": "vllm",                     # vLLM rollouts
    "rollout.vllm.dtype": "float16",              # fp16 rollout, not bf16
    "eval.k": 32,                                 # avg@32
    "eval.temperature": 1.0,
    "eval.top_p": 0.7,
    "eval.every": 10,                             # test_freq
    "eval.at_start": False,                       # val_before_train False
    "log.save_every": 10,                         # save_freq
    "train.micro_batch_tokens": 8192,             # ppo_max_token_len_per_gpu
    "model.gradient_checkpointing": True,
    "train.cpu": False,
    "data.env_kwargs": {"grader": "authors"},     # math-verify OR mathruler (compute_score_answer)
}
# The six ★ rows that differ (plus experiment name).
STARE = {"algo.name": "stare-o1", "algo.stare.enabled": True, "algo.stare.top_ratio": 0.1,
         "algo.stare.w": 1.1, "algo.stare.m": 0.9, "algo.stare.target_entropy": 0.3,
         "algo.overlong_buffer": 0, "algo.stare.scope": "micro_batch"}
GRPO_DS = {"algo.name": "grpo-ds", "algo.stare.enabled": False, "algo.stare.top_ratio": 0.0,
           "algo.stare.w": 1.0, "algo.stare.m": 1.0, "algo.stare.target_entropy": 0.0,
           "algo.overlong_buffer": 0}
SHORT_COT = {"data.env": "stare/MathCoT-v0", "rollout.max_turns": 1, "rollout.max_new_tokens": 3072}

PRESETS = {
    "qwen2.5-math-7b-stare": {**SHARED, **STARE, **SHORT_COT, "log.name": "STARE-O1-Qwen2.5-Math-7B"},
    "qwen2.5-math-7b-grpo-ds": {**SHARED, **GRPO_DS, **SHORT_COT, "log.name": "GRPO-ds-Qwen2.5-Math-7B"},
    # DAPO at the same budget: its own overlong shaping (1/5 of the 3072-token budget), STARE off.
    "qwen2.5-math-7b-dapo": {**SHARED, **SHORT_COT, "algo.name": "dapo", "algo.stare.enabled": False,
                             "algo.overlong_buffer": 614, "algo.overlong_penalty": 1.0},
    "qwen2.5-7b-tool-stare": {**SHARED, **STARE, "data.env": "stare/PythonTool-v0",
                              "rollout.max_turns": 8, "rollout.max_tool_tokens": 256},
    # The paper's tool run: the same RL settings from Qwen2.5-7B Base after the ReTool cold-start SFT.
    "qwen2.5-7b-base-tool-stare": {**SHARED, **STARE, "data.env": "stare/PythonTool-v0",
                                   "rollout.max_turns": 8, "rollout.max_tool_tokens": 256,
                                   "log.name": "STARE-O1-Qwen2.5-7B-Base-SFT-tool"},
}
PLACEHOLDERS = {name: "/models/Qwen2.5-" for name in PRESETS} | {
    "qwen2.5-7b-base-tool-stare": "/runs/retool-sft-qwen2.5-7b/model"}  # the `stare sft` output
VARIANTS = {  # the header line that says which model variant each preset is
    "qwen2.5-math-7b-stare": "# Variant: Qwen2.5-Math-7B (Base), no SFT",
    "qwen2.5-math-7b-grpo-ds": "# Variant: Qwen2.5-Math-7B (Base), no SFT",
    "qwen2.5-math-7b-dapo": "# Variant: Qwen2.5-Math-7B (Base), no SFT",
    "qwen2.5-7b-tool-stare": "# Variant: Qwen2.5-7B-Instruct, no SFT: NOT the paper's tool run",
    "qwen2.5-7b-base-tool-stare": "# Variant: Qwen2.5-7B (Base) + cold-start SFT on ReTool data",
    "smollm2-135m-tool": "# Variant: SmolLM2-135M-Instruct, no SFT",
}


def resolved(cfg, dotted: str):
    value = cfg
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def mismatches(cfg, table: dict) -> dict:
    """{key: (resolved, spec)} for every key whose resolved value differs from the table's."""
    def same(got, want) -> bool:
        if isinstance(want, float):
            return got == pytest.approx(want, rel=1e-12)
        return got == want and type(got) is type(want)
    return {key: (resolved(cfg, key), want) for key, want in table.items()
            if not same(resolved(cfg, key), want)}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_has_the_spec_values(name):
    cfg = load_config(name)
    check_config(cfg)
    assert not mismatches(cfg, PRESETS[name]), f"{name}: (resolved, spec) = {mismatches(cfg, PRESETS[name])}"


def test_the_check_sees_a_changed_value():
    cfg = load_config("qwen2.5-math-7b-stare", ["optim.lr=2e-6", "eval.top_p=1.0", "rollout.group_size=16"])
    assert set(mismatches(cfg, PRESETS["qwen2.5-math-7b-stare"])) == {"optim.lr", "eval.top_p",
                                                                     "rollout.group_size"}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_model_path_is_a_placeholder_the_user_overrides(name, tmp_path):
    cfg = load_config(name, [f"model.path={tmp_path}"])          # no loading at config time
    assert cfg.model.path == str(tmp_path)
    assert load_config(name).model.path.startswith(PLACEHOLDERS[name])


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_7b_and_tool_preset_says_which_variant_it_is(name):
    header = [line for line in (CONFIG_DIR / f"{name}.yaml").read_text().splitlines()
              if line.startswith("# Variant:")]
    assert len(header) == 1 and header[0].startswith(VARIANTS[name]), header


def test_the_base_sft_tool_preset_differs_from_the_instruct_one_only_in_the_start():
    import dataclasses
    base, instruct = load_config("qwen2.5-7b-base-tool-stare"), load_config("qwen2.5-7b-tool-stare")
    assert dataclasses.replace(base, model=instruct.model, log=instruct.log) == instruct
    assert dataclasses.replace(base.model, path=instruct.model.path) == instruct.model
    assert base.model.path.endswith("/model")       # `stare sft --out DIR` writes DIR/model


def test_the_two_scripts_differ_only_in_the_stare_block():
    stare, grpo = load_config("qwen2.5-math-7b-stare"), load_config("qwen2.5-math-7b-grpo-ds")
    import dataclasses
    for section in ("model", "data", "rollout", "optim", "train", "eval"):
        assert getattr(stare, section) == getattr(grpo, section), section
    assert dataclasses.replace(stare.algo, name="x", stare=grpo.algo.stare) == dataclasses.replace(
        grpo.algo, name="x")


def test_the_fp16_fsdp_accelerate_config_loads():
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.utils import DistributedType
    loaded = load_config_from_file(str(CONFIG_DIR / "accelerate" / "fsdp-fp16.yaml"))
    assert loaded.distributed_type == DistributedType.FSDP and loaded.mixed_precision == "fp16"
    assert loaded.fsdp_config["fsdp_transformer_layer_cls_to_wrap"] == "Qwen2DecoderLayer"
