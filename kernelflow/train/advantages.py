"""Advantage estimators: pure functions from the environment's returns to one scalar per (episode, turn).

The returns come from the environment (per-turn G_t = sum_k gamma^(k-t) r_k and the episode return
r1 + gamma r2); nothing here recomputes them. Each estimator returns `Advantages`: `per_turn[i][t]` is
the advantage of every token the model generated in turn t of episode i, and `group_size_per_turn[t]`
is N_t, the number of episodes of the group that reached turn t (worth logging: it varies only when
episodes stop early).

- `dr_grpo` (the pilot's, Dr. GRPO): A_i = R_i - mean_j R_j over the group's episode returns, no std
  division; the same A_i on every model token of episode i, whichever turn (credit `episode`).
- `dr_grpo` with credit `turn` (`dr_grpo_turn`, Kevin's per-turn credit): A_i,t = G_i,t - mean_{j reached t}
  G_j,t, each turn baselined over the episodes of the group that reached it, no std division. The
  turn-2 tokens are then judged by r2 alone (G_2 = r2), not by r1 + 0.4 r2: a second turn that repairs
  a broken first answer is credited, one that breaks a correct answer is blamed. When only one episode
  reached turn t (N_t = 1) its advantage there is 0 (nothing to compare it with).
- `trloo` (Dr. Kernel's turn-level leave-one-out): A_i,t = G_i,t - mean_{j != i, j reached t} G_j,t;
  when episode i is the only one that reached turn t (N_t = 1), A_i,t = G_i,t. Equal to per-turn
  Dr. GRPO times N_t / (N_t - 1), so it differs in substance only when N_t varies.

Estimators are looked up by (name, credit) in `ESTIMATORS`; adding one is adding a function with the
same signature there. `trloo` is per-turn by construction, so both credits name it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Advantages:
    per_turn: tuple[tuple[float, ...], ...]  # [episode][turn]
    group_size_per_turn: tuple[int, ...]  # N_t

    def flat(self) -> list[float]:
        return [a for turns in self.per_turn for a in turns]


def group_sizes(n_turns: Sequence[int]) -> tuple[int, ...]:
    """N_t for t = 0 .. max turns - 1: how many episodes reached turn t."""
    longest = max(n_turns, default=0)
    return tuple(sum(1 for n in n_turns if n > t) for t in range(longest))


def _check(episode_returns: Sequence[float], turn_returns: Sequence[Sequence[float]]) -> None:
    if len(episode_returns) != len(turn_returns):
        raise ValueError(f"{len(episode_returns)} episode returns but {len(turn_returns)} turn-return lists")
    if not turn_returns:
        raise ValueError("empty group: no episodes to compute advantages for")
    for i, g in enumerate(turn_returns):
        if len(g) < 1:
            raise ValueError(f"episode {i} has no turns (every episode submits at least once)")


def dr_grpo(episode_returns: Sequence[float], turn_returns: Sequence[Sequence[float]]) -> Advantages:
    """A_i = R_i - mean(R), broadcast to every turn of episode i (turn_returns only gives turn counts)."""
    _check(episode_returns, turn_returns)
    mean = sum(episode_returns) / len(episode_returns)
    per_turn = tuple(tuple(float(r - mean) for _ in g) for r, g in zip(episode_returns, turn_returns, strict=True))
    return Advantages(per_turn, group_sizes([len(g) for g in turn_returns]))


def dr_grpo_turn(episode_returns: Sequence[float], turn_returns: Sequence[Sequence[float]]) -> Advantages:
    """A_i,t = G_i,t - mean of G_j,t over the episodes j that reached turn t (episode_returns only checked)."""
    _check(episode_returns, turn_returns)
    sizes = group_sizes([len(g) for g in turn_returns])
    means = [sum(g[t] for g in turn_returns if len(g) > t) / sizes[t] for t in range(len(sizes))]
    per_turn = tuple(tuple(float(value - means[t]) for t, value in enumerate(g)) for g in turn_returns)
    return Advantages(per_turn, sizes)


def trloo(episode_returns: Sequence[float], turn_returns: Sequence[Sequence[float]]) -> Advantages:
    """A_i,t = G_i,t - mean of G_j,t over the other episodes j that reached turn t (A = G when alone)."""
    _check(episode_returns, turn_returns)
    sizes = group_sizes([len(g) for g in turn_returns])
    totals = [sum(g[t] for g in turn_returns if len(g) > t) for t in range(len(sizes))]
    per_turn = []
    for g in turn_returns:
        row = []
        for t, value in enumerate(g):
            n = sizes[t]
            row.append(float(value) if n == 1 else float(value - (totals[t] - value) / (n - 1)))
        per_turn.append(tuple(row))
    return Advantages(tuple(per_turn), sizes)


Estimator = Callable[[Sequence[float], Sequence[Sequence[float]]], Advantages]
ESTIMATORS: dict[tuple[str, str], Estimator] = {
    ("dr_grpo", "episode"): dr_grpo,
    ("dr_grpo", "turn"): dr_grpo_turn,
    ("trloo", "episode"): trloo,
    ("trloo", "turn"): trloo,
}


def estimate(
    name: str, episode_returns: Sequence[float], turn_returns: Sequence[Sequence[float]], credit: str = "episode"
) -> Advantages:
    try:
        fn = ESTIMATORS[(name, credit)]
    except KeyError:
        choices = sorted({n for n, _ in ESTIMATORS})
        credits = sorted({c for _, c in ESTIMATORS})
        raise ValueError(
            f"unknown advantage estimator {name!r} with credit {credit!r}; choose one of {choices} "
            f"and a credit among {credits}"
        ) from None
    return fn(episode_returns, turn_returns)
