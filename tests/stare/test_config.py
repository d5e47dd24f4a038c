"""Presets: reference values, validation errors naming the field, did-you-mean lookup, the CLI table."""

import dataclasses

import pytest
from typer.testing import CliRunner

from stare import PRESETS, AlgoConfig, StareConfig, get_preset


def test_presets_carry_the_reference_values():
    assert set(PRESETS) == {"grpo", "dapo", "grpo-ds", "stare-o1", "stare-c2", "dr-grpo", "gspo", "cispo",
                            "clip-cov", "kl-cov", "adaptive-entropy", "forking-tokens"}
    ds, o1, c2, dapo = PRESETS["grpo-ds"], PRESETS["stare-o1"], PRESETS["stare-c2"], PRESETS["dapo"]
    for cfg in (ds, o1, c2, dapo):
        assert (cfg.clip_low, cfg.clip_high, cfg.clip_c, cfg.kl_coef) == (0.2, 0.28, 10.0, 0)
        assert cfg.loss_agg == "token-mean"
        assert cfg.dynamic_sampling and cfg.max_gen_rounds == 10
    assert not ds.stare.enabled
    assert (ds.stare.top_ratio, ds.stare.w, ds.stare.m, ds.stare.target_entropy) == (0, 1, 1, 0)
    assert o1.stare.enabled
    assert (o1.stare.variant, o1.stare.top_ratio, o1.stare.w, o1.stare.m) == ("O1", 0.1, 1.1, 0.9)
    assert c2.stare.variant == "C2" and c2.stare.target_entropy == 0.3 and not c2.stare.adaptive
    assert (dapo.overlong_buffer, dapo.overlong_penalty, dapo.stare.enabled) == (4096, 1.0, False)
    assert ds.overlong_buffer == 0


def test_presets_are_frozen_and_replace_validates():
    cfg = PRESETS["stare-o1"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.clip_high = 0.3
    assert cfg.replace(clip_high=0.3).clip_high == 0.3 and cfg.clip_high == 0.28
    assert cfg.replace(stare=cfg.stare.replace(w=1.05)).stare.w == 1.05
    with pytest.raises(ValueError, match=r"AlgoConfig.clip_c must be > 1"):
        cfg.replace(clip_c=0.5)


@pytest.mark.parametrize("kwargs, match", [
    (dict(variant="O3"), r"StareConfig.variant must be 'O1' or 'C2'"),
    (dict(top_ratio=1.5), r"StareConfig.top_ratio must be in \[0, 1\]"),
    (dict(scope="rank"), r"StareConfig.scope must be one of \('micro_batch', 'global_batch'\)"),
    (dict(w=0.0), r"StareConfig.w must be > 0"),
    (dict(m_min=2.0), r"StareConfig.m_min"),
])
def test_stare_config_errors_name_field_and_allowed_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        StareConfig(**kwargs)


@pytest.mark.parametrize("kwargs, match", [
    (dict(loss_agg="mean"), r"AlgoConfig.loss_agg must be one of \('token-mean'"),
    (dict(clip_low=1.5), r"AlgoConfig.clip_low must be in \[0, 1\] \(1 = no lower bound\)"),
    (dict(loss_mode="ppo2"), r"AlgoConfig.loss_mode must be one of \('vanilla'"),
    (dict(clip_cov_ratio=0.0), r"AlgoConfig.clip_cov_ratio must be in \(0, 1\]"),
    (dict(clip_cov_lb=5.0), r"AlgoConfig.clip_cov_lb must be < clip_cov_ub"),
    (dict(top_entropy_ratio=1.2), r"AlgoConfig.top_entropy_ratio must be in \[0, 1\]"),
    (dict(entropy_coef_min=0.5, entropy_coef_max=0.1), r"AlgoConfig.entropy_coef_max must be >= "),
    (dict(loss_norm_length=-1), r"AlgoConfig.loss_norm_length must be >= 0"),
    (dict(kl_estimator="k2"), r"AlgoConfig.kl_estimator must be 'k1' or 'k3'"),
    (dict(overlong_buffer=-1), r"AlgoConfig.overlong_buffer"),
    (dict(entropy_coef=-0.1), r"AlgoConfig.entropy_coef"),
])
def test_algo_config_errors_name_field_and_allowed_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        AlgoConfig(**kwargs)


def test_lower_case_variant_is_normalised_and_positional_args_are_refused():
    assert StareConfig(variant="c2").variant == "C2"
    with pytest.raises(TypeError):
        StareConfig(True)


def test_get_preset_suggests_the_closest_name():
    assert get_preset("STARE_O1") is PRESETS["stare-o1"]
    with pytest.raises(ValueError, match="Did you mean 'stare-c2'"):
        get_preset("stare-c3")


def test_every_field_has_a_docstring():
    import ast
    import inspect

    import stare.config as module

    tree = ast.parse(inspect.getsource(module))
    wanted = ("StareConfig", "AlgoConfig")
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in wanted]
    assert len(classes) == 2
    for cls in classes:
        body = cls.body
        for i, node in enumerate(body):
            if isinstance(node, ast.AnnAssign):
                nxt = body[i + 1]
                assert isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant), node.target.id


def test_algo_list_command_prints_every_preset():
    from training.commands.algo import app

    result = CliRunner().invoke(app, ["list"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for name in PRESETS:
        assert name in result.output
    assert "top_ratio" in result.output and "0.28" in result.output
