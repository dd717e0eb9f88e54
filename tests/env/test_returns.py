"""Returns are computed once, here: G_t = sum_k gamma^(k-t) r_k, episode return G_1."""

import math

import pytest

from kernelflow.env.returns import episode_return, per_turn_returns


def test_two_turn_returns_match_the_pilot():
    assert per_turn_returns([1.0, 3.0], 0.4) == pytest.approx([1.0 + 0.4 * 3.0, 3.0])
    assert episode_return([1.0, 3.0], 0.4) == pytest.approx(2.2)
    assert episode_return([0.0, 0.3], 0.4) == pytest.approx(0.12)


def test_longer_episode_and_edge_gammas():
    rewards = [0.5, 0.0, 2.0, 1.0]
    g = per_turn_returns(rewards, 0.5)
    for t in range(len(rewards)):
        assert g[t] == pytest.approx(sum(0.5 ** (k - t) * rewards[k] for k in range(t, len(rewards))))
    assert per_turn_returns(rewards, 0.0) == rewards
    assert episode_return(rewards, 1.0) == pytest.approx(sum(rewards))
    assert per_turn_returns([], 0.4) == [] and episode_return([], 0.4) == 0.0


@pytest.mark.parametrize("gamma", [-0.1, 1.5, math.nan])
def test_bad_gamma_is_rejected(gamma):
    with pytest.raises(ValueError, match="gamma"):
        per_turn_returns([1.0], gamma)


def test_non_finite_reward_is_rejected():
    with pytest.raises(ValueError, match="finite"):
        episode_return([1.0, math.inf], 0.4)
