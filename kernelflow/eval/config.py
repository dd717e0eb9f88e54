"""Evaluator and reward settings: plain typed dataclasses that check their own invariants.

`EvalConfig` says how a submission is judged (backend, shape profile, seeds, timing, limits);
`RewardConfig` holds the reward constants. `config_hash()` fingerprints both, so a flow can refuse
a remote environment server whose judging differs from its own.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from dataclasses import asdict, dataclass, field

from kernelflow.config_dicts import check_nested
from kernelflow.eval.sandbox.policy import LEVELS as ISOLATION_LEVELS

BACKENDS = ("auto", "cuda", "interpret")
TOLERANCE_MODES = ("task", "kernelbench")
GPU_LOCK_MODES = ("exclusive", "shared_checks")  # the choices of EvalConfig.gpu_lock (session/plan.py)
CALIBRATION_SOURCES = ("stored", "measured")  # the choices of EvalConfig.calibration (clock/roofline.py)
AUTO = "auto"  # EvalConfig.prewarm_workers: sized when the Evaluator starts, from the device (auto_prewarm_workers)

# The one home of the speed defaults of every judge that serves verdicts: `kernelflow serve` and the
# server's JSON config (kernelflow/env/config.py) and the Hydra conf (flows/config.py mirrors EvalConfig
# with these defaults; conf/eval/*.yaml do not repeat them); `kernelflow eval` reads ONE_SHOT_DEFAULTS
# below. Only what differs from the EvalConfig field defaults is here; `max_workers` and `gpu_lock` are
# the field defaults (not sized per device: see docs/eval_speed.md, issue #19).
# The library default of `prewarm_workers` stays 0 on purpose: the test suite and benchmarks build
# hundreds of `EvalConfig()`/Evaluators that judge one or two submissions each, and a warm pool in each
# would spawn (and waste) interpreters on CI's two cores. A judge that serves many verdicts reads these.
SERVE_DEFAULTS: dict[str, object] = {"prewarm_workers": AUTO}
# `kernelflow eval` judges one submission per process, so a pool can only add workers that import torch
# beside the one that judges and are then killed unused: on 2 cores a ReLU verdict took 8.5-10.3 s with 0
# and 14.1-14.7 s with "auto" (2026-12-01, docs/eval_speed.md). Its own `--prewarm-workers` overrides.
ONE_SHOT_DEFAULTS: dict[str, object] = {**SERVE_DEFAULTS, "prewarm_workers": 0}

# What one idle pre-warmed worker holds (auto_prewarm_workers). Host: ~300 MB RSS of an interpreter with
# torch and triton imported (measured on the CPU, docs/eval_speed.md); on CUDA its context (~0.5 GB of
# device memory) plus the L2-flush buffer. At most this share of the free memory goes to idle workers.
WORKER_HOST_MB = 300
WORKER_CUDA_CONTEXT_MB = 512
POOL_MEMORY_SHARE = 0.25
# Idle workers per concurrent verdict (auto_prewarm_workers): each verdict uses up one worker, and its
# replacement takes longer to warm (4-10 s on an H200 under load) than a verdict takes (~2.5 s).
POOL_PER_VERDICT = 4


@dataclass(frozen=True)
class RewardConfig:
    """The pilot's reward: 0 if incorrect, else correct_bonus + speed_weight * min(t_min / t_kernel, 1)."""

    correct_bonus: float = 0.3
    speed_weight: float = 2.7

    def __post_init__(self) -> None:
        if self.correct_bonus < 0 or self.speed_weight < 0:
            raise ValueError(
                f"reward constants must be >= 0 (correct_bonus={self.correct_bonus}, speed_weight={self.speed_weight})"
            )


@dataclass(frozen=True)
class EvalConfig:
    """How one submission is judged.

    Seeds: the correctness calls use `seeds` consecutive seeds from `base_seed` (an episode's seed
    moves `base_seed`); the odd shape and the repeat (determinism) call follow; then `timed_runs`
    further calls, each on fresh inputs and each checked. Every call is timed and checked the same
    way, so the candidate cannot tell checking from timing; the reported median is over the last
    `timed_runs` calls, so the earlier calls are the warm-up (compilation and autotuning).

    The correctness calls are compared with float64 on every element. A timed call is compared on
    `timed_check_rows` rows drawn at random after it returned (where the task's rows are independent;
    0 or more rows than the output has: every row), which the submission cannot know in advance, so a
    kernel that skips a fraction f of the work in its timed calls escapes 20 of them with probability
    (1 - f)^(20 x rows): for 64 rows, 1e-11 at f = 2%, 7% at f = 0.2% (issue #19: the full float64
    comparison of every timed call was most of a full-shape verdict's GPU work).
    """

    backend: str = "auto"
    shape: str = "small"
    seeds: int = 3
    base_seed: int = 0
    distribution: str | None = None  # None: the task's own
    tolerance_mode: str = "task"
    check_odd_shape: bool = True
    check_determinism: bool = True
    static_checks: bool = True  # False only to test the runtime defences behind them
    timed_runs: int = 20
    timed_check_rows: int = 64  # rows of each timed call compared with float64 (see the docstring); 0: all
    timeout_s: float = 180.0
    memory_limit_mb: int = 8192  # address-space cap for interpret workers (CUDA needs a huge VA space)
    output_limit_mb: int = 16  # cap on a worker's stdout+stderr file (RLIMIT_FSIZE)
    max_workers: int = 2
    # CUDA: share of the device's memory that concurrent verdicts may use together; more wait (session/device_memory.py)
    device_memory_fraction: float = 0.85
    device_index: int = 0
    l2_flush_mb: int = 256
    impossible_factor: float = 0.9  # a time under factor * bytes / datasheet bandwidth is impossible
    feedback_max_chars: int = 2000
    cache_dir: str | None = None  # calibration and lock files; None: ~/.cache/kernelflow
    verdict_cache_size: int = 4096  # verdicts kept for identical resubmissions (LRU); 0 disables (cache.py)
    input_cache_mb: int = 256  # inputs + float64 references kept across verdicts; 0 disables (cache.py)
    # Idle pre-warmed workers kept per evaluator (device), session/prewarm.py; 0: spawn one per verdict; "auto": sized
    # when the Evaluator starts (auto_prewarm_workers). 0 here, "auto" where verdicts are served (SERVE_DEFAULTS).
    prewarm_workers: int | str = 0
    # "shared_checks": only the timed calls hold the GPU exclusively; compilation and correctness calls
    # run beside other verdicts' (so no submission's slow host work keeps the GPU from the others).
    # "exclusive": every call of a verdict under one exclusive hold (the pre-v2 behaviour).
    gpu_lock: str = "shared_checks"
    # Each CUDA call's own wall-clock limit (session/plan.py), so no submission holds the GPU lock for
    # long: the first call compiles (shared hold), a timed call holds the GPU alone, every other call
    # gets `call_limit_s`. All also end at `timeout_s`, the only limit under the interpreter.
    first_call_limit_s: float = 20.0
    call_limit_s: float = 10.0
    timed_call_limit_s: float = 5.0
    # Also time torch.compile of the reference (cached per task and shape, like eager) so verdicts carry
    # speedup_vs_compile. Off by default: compiling every task's reference costs tens of seconds once.
    compile_baseline: bool = False
    # OS isolation of every worker (sandbox/policy.py): "auto" (the strongest this host and backend allow) or
    # an explicit level of ISOLATION_LEVELS, refused where one of its mechanisms is missing.
    isolation: str = "auto"
    # The environment server refuses to start below this level; None: what this host gives the
    # interpreter, capped at the backend's ceiling (isolation.default_minimum). Set "full" (interpret)
    # or "network" (cuda) on a production host so that a host missing a mechanism cannot serve.
    min_isolation: str | None = None
    # Roofline numbers (clock/roofline.py): "stored" takes a known device's reference calibration from
    # device_calibrations.json (the same t_min in every process and on every host of that device);
    # "measured" uses this host's own measurement.
    calibration: str = "stored"
    reward: RewardConfig = field(default_factory=RewardConfig)

    def __post_init__(self) -> None:
        check_nested(self, reward=RewardConfig)  # a mapping goes through kernelflow.config_dicts.config_from_dict
        problems = []
        if self.backend not in BACKENDS:
            problems.append(f"backend={self.backend!r} (choose one of {BACKENDS})")
        if self.shape not in ("small", "full"):
            problems.append(f"shape={self.shape!r} (choose 'small' or 'full')")
        if self.tolerance_mode not in TOLERANCE_MODES:
            problems.append(f"tolerance_mode={self.tolerance_mode!r} (choose one of {TOLERANCE_MODES})")
        if self.distribution not in (None, "signed_wide", "kernelbench"):
            problems.append(f"distribution={self.distribution!r} (choose null, 'signed_wide' or 'kernelbench')")
        if self.seeds < 1:
            problems.append(f"seeds={self.seeds} (need at least 1)")
        if self.timed_runs < 1:
            problems.append(f"timed_runs={self.timed_runs} (need at least 1)")
        if isinstance(self.timed_check_rows, bool) or not isinstance(self.timed_check_rows, int) or self.timed_check_rows < 0:
            problems.append(f"timed_check_rows={self.timed_check_rows!r} (need an int >= 0; 0 checks every row)")
        for name in ("timeout_s", "first_call_limit_s", "call_limit_s", "timed_call_limit_s"):
            if getattr(self, name) <= 0:
                problems.append(f"{name}={getattr(self, name)} (must be > 0 seconds)")
        if self.max_workers < 1:
            problems.append(f"max_workers={self.max_workers} (need at least 1)")
        if not 0 < self.device_memory_fraction <= 1:
            problems.append(f"device_memory_fraction={self.device_memory_fraction} (must be in (0, 1])")
        if not 0 < self.impossible_factor <= 1:
            problems.append(f"impossible_factor={self.impossible_factor} (must be in (0, 1])")
        for name in ("verdict_cache_size", "input_cache_mb", "prewarm_workers"):
            value = getattr(self, name)
            if name == "prewarm_workers" and value == AUTO:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                problems.append(f"{name}={value!r} (need an int >= 0; 0 disables it"
                                f"{'; or ' + repr(AUTO) if name == 'prewarm_workers' else ''})")
        if self.calibration not in CALIBRATION_SOURCES:
            problems.append(f"calibration={self.calibration!r} (choose one of {CALIBRATION_SOURCES})")
        if self.gpu_lock not in GPU_LOCK_MODES:
            problems.append(f"gpu_lock={self.gpu_lock!r} (choose one of {GPU_LOCK_MODES})")
        if self.isolation not in ("auto", *ISOLATION_LEVELS):
            problems.append(f"isolation={self.isolation!r} (choose 'auto' or one of {ISOLATION_LEVELS})")
        if self.min_isolation not in (None, *ISOLATION_LEVELS):
            problems.append(f"min_isolation={self.min_isolation!r} (choose null or one of {ISOLATION_LEVELS})")
        if self.memory_limit_mb < 256:
            problems.append(f"memory_limit_mb={self.memory_limit_mb} (need at least 256)")
        if problems:
            raise ValueError("invalid EvalConfig: " + "; ".join(problems))

    @classmethod
    def served(cls, **fields) -> EvalConfig:
        """The config of a judge that serves verdicts: the field defaults, SERVE_DEFAULTS over them, `fields` last."""
        return cls(**{**SERVE_DEFAULTS, **fields})

    @classmethod
    def one_shot(cls, **fields) -> EvalConfig:
        """The config of a judge of one submission (`kernelflow eval`): ONE_SHOT_DEFAULTS, `fields` last."""
        return cls(**{**ONE_SHOT_DEFAULTS, **fields})

    def seed_list(self) -> list[int]:
        return [self.base_seed + i for i in range(self.seeds)]

    def judging_dict(self) -> dict:
        """The settings that change a verdict (not pool sizes, caches or paths): what `config_hash` covers."""
        d = asdict(self)
        for k in ("max_workers", "cache_dir", "base_seed", "device_index", "verdict_cache_size", "input_cache_mb",
                  "prewarm_workers", "gpu_lock", "min_isolation", "device_memory_fraction"):
            d.pop(k)
        return d


def auto_prewarm_workers(*, backend: str, max_workers: int, cores: int, host_available_mb: float,
                         device_free_mb: float | None = None, l2_flush_mb: int = 256) -> int:
    """How many idle pre-warmed workers `prewarm_workers="auto"` keeps, from the device's memory and cores.

    At most POOL_PER_VERDICT x `max_workers`: every verdict uses up a worker (one submission per
    process) and its replacement starts at once, but warming it takes longer than a verdict, so a pool of
    only `max_workers` runs dry under steady load. Measured on the H200 (2026-12-01, docs/eval_speed.md
    "Session 10"): at 2 concurrent verdicts a pool of 4 left verdicts waiting for fresh workers (p95
    9.2 s), a pool of 8 did not (p95 3.3 s). At most `cores` (warming more interpreters than cores at
    once only makes each slower), and the idle workers may hold at most POOL_MEMORY_SHARE of the host's
    available memory (WORKER_HOST_MB each) and, on CUDA, of the device's free memory (a context plus the
    L2-flush buffer each). 0 (no pool) when not even one fits.
    """
    n = min(POOL_PER_VERDICT * int(max_workers), int(cores), int(POOL_MEMORY_SHARE * host_available_mb // WORKER_HOST_MB))
    if backend == "cuda":
        if device_free_mb is None:
            raise ValueError("auto_prewarm_workers on cuda needs device_free_mb (torch.cuda.mem_get_info)")
        per_worker = WORKER_CUDA_CONTEXT_MB + l2_flush_mb
        n = min(n, int(POOL_MEMORY_SHARE * device_free_mb // per_worker))
    return max(0, n)


INPUT_SALT_ENV = "KERNELFLOW_INPUT_SALT"


def input_salt() -> int:
    """This judge process's secret input salt: drawn at random, or fixed by KERNELFLOW_INPUT_SALT (tests,
    or reproducing a verdict's exact inputs; set it only in the judge's environment, which workers never
    see: their environment is scrubbed and /proc of the judge is closed to them)."""
    fixed = os.environ.get(INPUT_SALT_ENV)
    if fixed is not None:
        try:
            return int(fixed) & 0x7FFF_FFFF
        except ValueError:
            raise ValueError(f"{INPUT_SALT_ENV}={fixed!r} is not an integer; unset it or give e.g. 0") from None
    return secrets.randbits(31)


# Salted seeds stay below 2**62: generate_inputs adds a few million per extra input and must stay in int64.
SALTED_SEED_BITS = 62


def salted_seed(seed: int, salt: int) -> int:
    """A call's input seed: the declared seed with the judge's salt mixed in (the same seed, salt -> the same
    inputs; another salt -> unrelated inputs). Salt 0 leaves the seed as declared.

    A keyed hash (BLAKE2b, the salt as its key) of the seed, so every bit of the seed that a generator
    keeps depends on every bit of the salt. It was `seed ^ (salt << 24)`: PyTorch's CPU generator
    (mt19937) keeps only the low 32 bits of its seed, so 23 of the salt's 31 bits were dropped there and
    the interpreter's inputs took only 256 values per declared seed (issue #32 item 3); CUDA's Philox
    keeps all 64."""
    if int(salt) == 0:
        return int(seed)
    digest = hashlib.blake2b(int(seed).to_bytes(16, "little", signed=True), digest_size=8,
                             key=int(salt).to_bytes(16, "little", signed=True), person=b"kf-input-seed").digest()
    return int.from_bytes(digest, "little") & ((1 << SALTED_SEED_BITS) - 1)


def config_hash(config: EvalConfig, evaluator_version: str) -> str:
    """sha256 of the judging settings, the reward constants and the evaluator version."""
    payload = json.dumps({"eval": config.judging_dict(), "version": evaluator_version}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()
