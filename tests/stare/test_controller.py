"""Controller: strict gate, non-finite handling, adaptive clipping, state round trip (docs/stare.md)."""

import math

import pytest

from stare import Controller


def test_starts_with_gate_on_and_nan_entropy():
    ctl = Controller()
    assert ctl.gate_on is True and math.isnan(ctl.entropy) and (ctl.w, ctl.m) == (1.1, 0.9)


@pytest.mark.parametrize("entropy, gate", [(0.2999, True), (0.3, False), (0.31, False), (0.0, True)])
def test_gate_is_strictly_below_target(entropy, gate):
    ctl = Controller(target_entropy=0.3)
    ctl.update(entropy)
    assert ctl.gate_on is gate and ctl.entropy == entropy


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_entropy_changes_nothing(bad):
    ctl = Controller(adaptive=True, alpha=0.1)
    ctl.update(0.5)
    before = ctl.state_dict()
    with pytest.warns(RuntimeWarning):
        ctl.update(bad)
    assert ctl.state_dict() == before


def test_adaptive_schedule_clips_and_holds_at_target():
    ctl = Controller(target_entropy=0.3, w=1.45, m=0.55, adaptive=True, alpha=0.1, w_max=1.5, m_min=0.5)
    ctl.update(0.1)                                   # below target: W up, M down, both clipped
    assert (ctl.w, ctl.m) == (1.5, 0.5)
    ctl.update(0.3)                                   # sgn = 0: unchanged, gate off
    assert (ctl.w, ctl.m, ctl.gate_on) == (1.5, 0.5, False)
    ctl.update(0.9)                                   # above target: relax toward 1 even with gate off
    assert ctl.w == pytest.approx(1.4) and ctl.m == pytest.approx(0.6)


def test_starting_w_below_one_is_clipped_at_the_first_update():
    ctl = Controller(w=0.8, m=1.2, adaptive=True, alpha=0.01)
    ctl.update(0.9)
    assert (ctl.w, ctl.m) == (1.0, 1.0)


@pytest.mark.parametrize("adaptive, alpha", [(False, 0.1), (True, 0.0)])
def test_static_weights_never_move(adaptive, alpha):
    ctl = Controller(adaptive=adaptive, alpha=alpha)
    for h in (0.1, 0.5, 0.2):
        ctl.update(h)
    assert (ctl.w, ctl.m) == (1.1, 0.9)


def test_state_dict_round_trip_keeps_adaptive_weights():
    ctl = Controller(adaptive=True, alpha=0.05)
    for h in (0.1, 0.1, 0.2):
        ctl.update(h)
    resumed = Controller(adaptive=True, alpha=0.05)
    resumed.load_state_dict(ctl.state_dict())
    assert resumed.state_dict() == ctl.state_dict() and resumed.w == pytest.approx(1.25)
    with pytest.raises(KeyError, match="missing"):
        resumed.load_state_dict({"w": 1.0})


def test_invalid_clip_bounds_raise():
    with pytest.raises(ValueError, match="w_max"):
        Controller(w_max=0.9)
    with pytest.raises(ValueError, match="m_min"):
        Controller(m_min=1.5)
