"""Both estimators on fixed groups, computed by hand."""

import pytest

from kernelflow.train.advantages import dr_grpo, estimate, group_sizes, trloo


def approx(rows):
    return [pytest.approx(list(r)) for r in rows]


def test_dr_grpo_is_return_minus_group_mean_on_every_turn():
    # episode returns r1 + 0.4 r2 as the env reports them; per-turn returns only give turn counts
    R = [1.0, 0.0, 2.0, 1.0]  # mean 1.0
    G = [[1.0, 0.0], [0.0, 0.0], [2.0, 1.0], [1.0, 0.5]]
    a = dr_grpo(R, G)
    assert [list(r) for r in a.per_turn] == approx([[0.0, 0.0], [-1.0, -1.0], [1.0, 1.0], [0.0, 0.0]])
    assert a.group_size_per_turn == (4, 4)


def test_dr_grpo_has_no_std_scaling():
    a = dr_grpo([10.0, 0.0], [[10.0], [0.0]])
    assert [list(r) for r in a.per_turn] == [[5.0], [-5.0]]  # a std-normalised GRPO would give +-1


def test_trloo_with_every_episode_reaching_every_turn():
    G = [[1.0, 2.0], [3.0, 0.0], [2.0, 1.0]]
    a = trloo([g[0] for g in G], G)
    # turn 1: 1 - (3+2)/2 = -1.5 ; 3 - (1+2)/2 = 1.5 ; 2 - (1+3)/2 = 0
    # turn 2: 2 - (0+1)/2 = 1.5 ; 0 - (2+1)/2 = -1.5 ; 1 - (2+0)/2 = 0
    assert [list(r) for r in a.per_turn] == approx([[-1.5, 1.5], [1.5, -1.5], [0.0, 0.0]])
    assert a.group_size_per_turn == (3, 3)


def test_trloo_equals_per_turn_dr_grpo_scaled_by_n_over_n_minus_1():
    G = [[0.3, 0.0], [2.4, 2.9], [0.0, 0.3], [0.0, 0.0]]
    a = trloo([g[0] for g in G], G)
    n = 4
    for t in range(2):
        mean = sum(g[t] for g in G) / n
        for i in range(n):
            assert a.per_turn[i][t] == pytest.approx(n / (n - 1) * (G[i][t] - mean))


def test_trloo_with_early_stop_makes_group_size_vary():
    # episodes 0 and 2 stopped after a correct first turn; N_1 = 4, N_2 = 2
    G = [[2.7], [0.4, 1.0], [3.0], [0.0, 0.0]]
    a = trloo([g[0] for g in G], G)
    assert a.group_size_per_turn == (4, 2)
    # turn 1 baselines: leave-one-out over all 4 first-turn returns (sum 6.1)
    t1 = [2.7 - (6.1 - 2.7) / 3, 0.4 - (6.1 - 0.4) / 3, 3.0 - (6.1 - 3.0) / 3, 0.0 - 6.1 / 3]
    # turn 2: only episodes 1 and 3 reached it: each is compared with the other
    t2 = {1: 1.0 - 0.0, 3: 0.0 - 1.0}
    assert [len(r) for r in a.per_turn] == [1, 2, 1, 2]
    for i in range(4):
        assert a.per_turn[i][0] == pytest.approx(t1[i])
    assert a.per_turn[1][1] == pytest.approx(t2[1]) and a.per_turn[3][1] == pytest.approx(t2[3])


def test_trloo_alone_at_a_turn_gets_its_return():
    G = [[0.0, 1.2], [3.0], [0.3]]
    a = trloo([g[0] for g in G], G)
    assert a.group_size_per_turn == (3, 1)
    assert a.per_turn[0][1] == pytest.approx(1.2)  # N_2 = 1: A = G


def test_dr_grpo_with_early_stop_uses_episode_returns_for_all_turns():
    R = [2.7, 0.8, 3.0, 0.0]  # mean 1.625
    G = [[2.7], [0.4, 1.0], [3.0], [0.0, 0.0]]
    a = dr_grpo(R, G)
    assert [list(r) for r in a.per_turn] == approx([[1.075], [-0.825, -0.825], [1.375], [-1.625, -1.625]])
    assert a.group_size_per_turn == (4, 2)


def test_estimate_dispatches_by_name_and_rejects_unknown():
    assert estimate("trloo", [1.0, 0.0], [[1.0], [0.0]]).per_turn == ((1.0,), (-1.0,))
    with pytest.raises(ValueError, match="unknown advantage estimator 'ppo'"):
        estimate("ppo", [1.0], [[1.0]])


def test_group_sizes_and_bad_input():
    assert group_sizes([2, 1, 2, 0]) == (3, 2)
    with pytest.raises(ValueError, match="2 episode returns but 1"):
        dr_grpo([1.0, 2.0], [[1.0]])
    with pytest.raises(ValueError, match="no turns"):
        trloo([1.0], [[]])


# The example (stop_on_correct=false, gamma 0.4): (r1, r2) = (0, 3), (3, 0), (0, 0), (0, 0).
# Episode 0's second turn repaired a broken kernel; episode 1's broke a correct one.
REPAIR_EXAMPLE = [(0.0, 3.0), (3.0, 0.0), (0.0, 0.0), (0.0, 0.0)]


def _returns(rewards, gamma=0.4):
    """G_t as the environment sends them (a test double of kernelflow/env's formula)."""
    return [[sum(gamma ** (k - t) * r[k] for k in range(t, len(r))) for t in range(len(r))] for r in rewards]


def test_episode_credit_rewards_the_breaking_second_turn_more_than_the_repair():
    """The pilot's default, as the issue measured it: 0.15, 1.95, -1.05, -1.05 on both turns."""
    G = _returns(REPAIR_EXAMPLE)
    a = estimate("dr_grpo", [g[0] for g in G], G)
    assert [list(r) for r in a.per_turn] == approx([[0.15, 0.15], [1.95, 1.95], [-1.05, -1.05], [-1.05, -1.05]])


def test_turn_credit_gives_the_repairing_second_turn_the_larger_advantage():
    G = _returns(REPAIR_EXAMPLE)  # G_1 = 1.2, 3, 0, 0 ; G_2 = 3, 0, 0, 0
    a = estimate("dr_grpo", [g[0] for g in G], G, credit="turn")
    # turn 1: G_1 - 1.05 ; turn 2: G_2 - 0.75
    assert [list(r) for r in a.per_turn] == approx([[0.15, 2.25], [1.95, -0.75], [-1.05, -0.75], [-1.05, -0.75]])
    repair, broke = a.per_turn[0][1], a.per_turn[1][1]
    assert repair > broke and repair == max(a.flat())
    # per-turn Dr. GRPO is TRLOO without the N_t / (N_t - 1) factor (here 4/3)
    t = estimate("trloo", [g[0] for g in G], G, credit="turn")
    assert [list(r) for r in t.per_turn] == approx([[4 / 3 * x for x in r] for r in a.per_turn])


def test_turn_credit_baselines_each_turn_over_the_episodes_that_reached_it():
    G = [[2.7], [0.4, 1.0], [3.0], [0.0, 0.0]]  # episodes 0 and 2 stopped after turn 1; N = (4, 2)
    a = estimate("dr_grpo", [g[0] for g in G], G, credit="turn")
    t1 = [g[0] - 6.1 / 4 for g in G]
    assert [r[0] for r in a.per_turn] == pytest.approx(t1)
    assert a.per_turn[1][1] == pytest.approx(0.5) and a.per_turn[3][1] == pytest.approx(-0.5)
    alone = estimate("dr_grpo", [0.0, 3.0], [[0.0, 1.2], [3.0]], credit="turn")
    assert alone.per_turn[0][1] == 0.0  # N_2 = 1: nothing to compare with
    with pytest.raises(ValueError, match="credit 'step'"):
        estimate("dr_grpo", [1.0], [[1.0]], credit="step")
