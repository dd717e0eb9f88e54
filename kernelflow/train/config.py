"""Trainer settings: plain frozen dataclasses that check their own invariants.

`TrainerConfig` holds the protocol: advantage estimator, epochs, group size, sampling, tokens per
turn, optimiser, loss normaliser, seeds and what is passed to the environment's `reset`; it nests
the policy (`PolicyConfig`), the adapter (`LoraSettings`), the data-parallel layout
(`DataParallelSettings`) and the decoding path (`GenerationSettings`). `SampledEvalSettings` holds the
sampled evaluation, and `plan` counts what a run costs. The flows layer composes these into its
Hydra schema; nothing here reads a DictConfig.

Which model is loaded (`PolicyConfig`, with `TinyModelConfig` and `SFTSettings` for the models built
here) lives in policy_config.py, and how rollouts are decoded (`GenerationSettings`) in decoding.py;
both are re-exported here, so this module stays the one place to import the trainer's settings from.

Values the pilot published: Qwen2.5-Coder-7B-Instruct, LoRA r16 alpha32, Dr. GRPO, 4 epochs, group
size 4, temperature 0.8, 2048 tokens per turn, 2 turns, seed 42. Values it did not publish are
choices, each marked `# choice:` with the reason next to it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from kernelflow.config_dicts import check_nested
from kernelflow.train.decoding import GenerationSettings
from kernelflow.train.policy_config import (
    ATTENTION,
    DTYPES,
    PILOT_MODEL,
    PILOT_REVISION,
    SOURCES,
    PolicyConfig,
    SFTSettings,
    TinyModelConfig,
    _fail,
)

# The names this module defines and those it re-exports from policy_config.py and decoding.py, so that
# `from kernelflow.train.config import PolicyConfig` (and the rest) keeps working after the split.
__all__ = [
    "ATTENTION", "CREDITS", "DTYPES", "ESTIMATORS", "IMPORTANCE_SAMPLING", "PILOT_MODEL", "PILOT_REVISION", "SCHEDULERS",
    "SHAPES", "SOURCES", "DataParallelSettings", "GenerationSettings", "LoraSettings", "PolicyConfig", "SFTSettings",
    "SampledEvalSettings", "TinyModelConfig", "TrainerConfig", "plan",
]

ESTIMATORS = ("dr_grpo", "trloo")
CREDITS = ("episode", "turn")
IMPORTANCE_SAMPLING = ("off", "token_truncate")
SCHEDULERS = ("constant", "linear", "cosine")
SHAPES = ("small", "full")


@dataclass(frozen=True)
class LoraSettings:
    """The LoRA adapter (PEFT). r and alpha are the pilot's; the rest are choices."""

    r: int = 16
    alpha: int = 32
    # choice: 0, because the rollouts are sampled from the same module that is trained; dropout
    # would make the sampling and training distributions differ (notes/trl_multiturn.md section 4).
    dropout: float = 0.0
    # choice: every linear layer of the blocks; LoRA on the MLPs carries most of the benefit.
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

    def __post_init__(self) -> None:
        if isinstance(self.target_modules, list):
            object.__setattr__(self, "target_modules", tuple(self.target_modules))
        p = []
        if self.r < 1:
            p.append(f"r={self.r} (must be >= 1)")
        if self.alpha <= 0:
            p.append(f"alpha={self.alpha} (must be > 0)")
        if not 0.0 <= self.dropout < 1.0:
            p.append(f"dropout={self.dropout} (must be in [0, 1))")
        if not self.target_modules:
            p.append("target_modules is empty (name at least one module, e.g. q_proj)")
        _fail("LoraSettings", p)


@dataclass(frozen=True)
class DataParallelSettings:
    """Training over several processes, one per GPU (distributed.py): each group's rollouts are split evenly.

    `num_processes` 1 trains in the calling process (the default). N > 1 makes every training epoch a
    job of N processes (torchrun / accelerate launch); each rank generates and submits group_size / N
    of every group's rollouts, all ranks compute the group's advantages from the gathered returns, and
    DDP averages the gradients, so an update equals the single-process update on the same episodes.
    Where training runs, not what it computes: the run's config hash leaves it out.
    """

    num_processes: int = 1
    main_process_port: int | None = None  # the ranks' rendezvous port; None: a free port is picked

    def __post_init__(self) -> None:
        p = []
        if self.num_processes < 1:
            p.append(f"num_processes={self.num_processes} (must be >= 1; 1 trains in the calling process)")
        if self.main_process_port is not None and not 0 < self.main_process_port < 65536:
            p.append(f"main_process_port={self.main_process_port} (a TCP port in 1..65535, or null for a free one)")
        _fail("DataParallelSettings", p)


@dataclass(frozen=True)
class TrainerConfig:
    """The training protocol. One update per task group: G episodes of one task, then one step."""

    policy: PolicyConfig = field(default_factory=PolicyConfig)
    lora: LoraSettings = field(default_factory=LoraSettings)
    estimator: str = "dr_grpo"
    # Which return a turn's tokens are credited with under dr_grpo (advantages.py): `episode`, the pilot's
    # (every token gets R_i - mean R); `turn`, Kevin's (turn t's tokens get G_t - mean over the group at t).
    # trloo is per-turn by construction and is the same under both.
    credit: str = "episode"
    epochs: int = 4
    group_size: int = 4
    temperature: float = 0.8
    top_p: float = 1.0  # choice: no nucleus cut; temperature alone sets exploration
    max_new_tokens: int = 2048
    max_turns: int = 2
    # choice: 2e-5. LoRA's best learning rate is about 10x full fine-tuning's; RL full fine-tunes of
    # this kind use 1e-6 to 2e-6 (TRL's default, Kevin, Dr. Kernel), so 1e-5 to 2e-5 for LoRA; the
    # upper end because the pilot makes only 16 updates.
    learning_rate: float = 2e-5
    weight_decay: float = 0.0  # choice: no decay on a 16-step LoRA run
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-8
    lr_scheduler: str = "constant"  # choice: 16 updates leave no room for a schedule to matter
    warmup_updates: int = 0
    # choice: 1.0. Kevin's 0.05 was for full fine-tuning of a 32B; the norm is logged every update.
    max_grad_norm: float = 1.0
    kl_weight: float = 0.0
    # The correction for sampling from other numerics than the update's forward (merged bf16 weights, a
    # static-cache kernel; loss.py): `token_truncate` weights each token by min(pi_train / pi_sample, cap),
    # TRL's token_truncate mode with its default cap 3. off: the pilot's plain on-policy loss.
    importance_sampling: str = "off"
    importance_sampling_cap: float = 3.0
    loss_normalizer: int | None = None  # None: max_turns * max_new_tokens (the constant Dr. GRPO divides by)
    micro_batch_size: int = 1  # sequences per forward/backward in the update (gradients accumulate)
    # Task groups whose rollouts are generated together (one batch of rollout_groups x group_size rows per
    # turn), then updated one after another: group j is sampled j updates before it is trained (off-policy;
    # use importance_sampling=token_truncate). 1: the pilot's one group per generation.
    rollout_groups: int = 1
    seed: int = 42
    shuffle_tasks: bool = True  # task order within an epoch, drawn from (seed, epoch) only
    env_shape: str | None = None  # shape profile passed to the environment's reset; None: the server's
    env_seed: int = 0  # seed passed to reset (drives the evaluation inputs)
    env_seed_per_update: bool = False  # True: env_seed + update index, same for every episode of a group
    eval_attempts: int = 2
    eval_max_new_tokens: int | None = None  # None: max_new_tokens
    eval_stop_when_correct: bool = True  # greedy eval makes no second attempt after a correct first one
    eval_batch_size: int = 16  # tasks per evaluation batch (one generation batch, one session each)
    samples_per_update: int = 2  # kernels kept with their verdicts in each update's metrics
    sample_chars: int = 4000
    message_timeout_s: float = 900.0
    data_parallel: DataParallelSettings = field(default_factory=DataParallelSettings)
    generation: GenerationSettings = field(default_factory=GenerationSettings)

    def __post_init__(self) -> None:
        # a mapping goes through kernelflow.config_dicts.config_from_dict, not through this constructor
        check_nested(self, policy=PolicyConfig, lora=LoraSettings, data_parallel=DataParallelSettings,
                     generation=GenerationSettings)
        p = []
        if self.estimator not in ESTIMATORS:
            p.append(f"estimator={self.estimator!r} (choose one of {ESTIMATORS})")
        if self.importance_sampling not in IMPORTANCE_SAMPLING:
            p.append(f"importance_sampling={self.importance_sampling!r} (choose one of {IMPORTANCE_SAMPLING})")
        if not self.importance_sampling_cap >= 1.0:
            p.append(f"importance_sampling_cap={self.importance_sampling_cap} (must be >= 1: a ratio of 1 is on-policy)")
        if self.credit not in CREDITS:
            p.append(f"credit={self.credit!r} (choose one of {CREDITS}: episode is the pilot's, turn is Kevin's)")
        for name in ("epochs", "max_new_tokens", "max_turns", "micro_batch_size", "eval_attempts", "eval_batch_size",
                     "rollout_groups"):
            if getattr(self, name) < 1:
                p.append(f"{name}={getattr(self, name)} (must be >= 1)")
        if self.eval_attempts > self.max_turns:
            p.append(f"eval_attempts={self.eval_attempts} > max_turns={self.max_turns} (an episode cannot hold more "
                     "attempts than turns; lower eval_attempts or raise max_turns, in an experiment env.max_turns)")
        if self.group_size < 2:
            p.append(f"group_size={self.group_size} (need >= 2: the advantage compares rollouts of one task)")
        if not self.temperature > 0:
            p.append(f"temperature={self.temperature} (must be > 0; greedy decoding is for evaluation only)")
        if not 0 < self.top_p <= 1:
            p.append(f"top_p={self.top_p} (must be in (0, 1])")
        if not self.learning_rate > 0:
            p.append(f"learning_rate={self.learning_rate} (must be > 0)")
        if self.weight_decay < 0:
            p.append(f"weight_decay={self.weight_decay} (must be >= 0)")
        if not (0 <= self.adam_beta1 < 1 and 0 <= self.adam_beta2 < 1 and self.adam_eps > 0):
            p.append(f"adam betas ({self.adam_beta1}, {self.adam_beta2}) must be in [0, 1), eps > 0")
        if self.lr_scheduler not in SCHEDULERS:
            p.append(f"lr_scheduler={self.lr_scheduler!r} (choose one of {SCHEDULERS})")
        if self.warmup_updates < 0:
            p.append(f"warmup_updates={self.warmup_updates} (must be >= 0)")
        if not self.max_grad_norm > 0:
            p.append(f"max_grad_norm={self.max_grad_norm} (must be > 0)")
        if self.kl_weight < 0:
            p.append(f"kl_weight={self.kl_weight} (must be >= 0)")
        if self.loss_normalizer is not None and self.loss_normalizer < 1:
            p.append(f"loss_normalizer={self.loss_normalizer} (must be >= 1, or null for max_turns * max_new_tokens)")
        if self.env_shape not in (None, *SHAPES):
            p.append(f"env_shape={self.env_shape!r} (choose null, 'small' or 'full')")
        if self.eval_max_new_tokens is not None and self.eval_max_new_tokens < 1:
            p.append(f"eval_max_new_tokens={self.eval_max_new_tokens} (must be >= 1 or null)")
        if self.samples_per_update < 0 or self.sample_chars < 0:
            p.append("samples_per_update and sample_chars must be >= 0")
        if not self.message_timeout_s > 0:
            p.append(f"message_timeout_s={self.message_timeout_s} (must be > 0)")
        n = self.data_parallel.num_processes
        if n > 1 and self.rollout_groups > 1:
            p.append(f"rollout_groups={self.rollout_groups} with data_parallel.num_processes={n} (batching several "
                     "groups is single-process only; set rollout_groups=1)")
        if n > 1 and self.group_size % n:
            p.append(
                f"group_size={self.group_size} is not a multiple of data_parallel.num_processes={n} (each process "
                f"generates an equal share of every group; use group_size {n * max(1, -(-self.group_size // n))} "
                f"or num_processes dividing {self.group_size})"
            )
        _fail("TrainerConfig", p)

    @property
    def normalizer(self) -> int:
        """The constant each episode's token-sum loss is divided by."""
        return self.loss_normalizer or self.max_turns * self.max_new_tokens

    @property
    def eval_tokens(self) -> int:
        return self.eval_max_new_tokens or self.max_new_tokens

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class SampledEvalSettings:
    """Sampled evaluation: `samples` episodes per task at `temperature`; 0 samples turns it off."""

    samples: int = 0
    temperature: float = 0.8  # choice: the pilot's training temperature, so pass@k describes what training samples
    top_p: float = 1.0
    # Attempts per sampled episode; None: trainer.eval_attempts (the greedy evaluation's structure).
    # 1 makes every sample single-shot and halves the worst-case cost.
    attempts: int | None = None
    # The generation RNG's seed; None: trainer.seed, so the seeds of a multirun also draw different samples.
    seed: int | None = None

    def __post_init__(self) -> None:
        p = []
        if self.samples < 0:
            p.append(f"samples={self.samples} (must be >= 0; 0 turns sampled evaluation off)")
        if not self.temperature > 0:
            p.append(f"temperature={self.temperature} (must be > 0; the greedy evaluation already runs without sampling)")
        if not 0 < self.top_p <= 1:
            p.append(f"top_p={self.top_p} (must be in (0, 1])")
        if self.attempts is not None and self.attempts < 1:
            p.append(f"attempts={self.attempts} (must be >= 1, or null for trainer.eval_attempts)")
        if self.seed is not None and self.seed < 0:
            p.append(f"seed={self.seed} (must be >= 0, or null for trainer.seed)")
        if p:
            raise ValueError("invalid SampledEvalSettings: " + "; ".join(p))

    @property
    def enabled(self) -> bool:
        return self.samples > 0


def plan(config: TrainerConfig, n_train_tasks: int, n_eval_tasks: int = 0) -> dict:
    """What a run of `config` over `n_train_tasks` tasks costs, counted without loading a model.

    Submissions and tokens are upper bounds: an episode that stops early (a correct first turn, when
    the environment is so configured) submits fewer times. `n_eval_tasks` counts one greedy
    evaluation pass over that many tasks.
    """
    if n_train_tasks < 1:
        raise ValueError(f"n_train_tasks={n_train_tasks} (need at least one training task)")
    updates = config.epochs * n_train_tasks
    episodes = updates * config.group_size
    submissions = episodes * config.max_turns
    eval_submissions = n_eval_tasks * config.eval_attempts
    return {
        "epochs": config.epochs,
        "train_tasks": n_train_tasks,
        "group_size": config.group_size,
        "episodes": episodes,
        "submissions": submissions,
        "updates": updates,
        "updates_per_epoch": n_train_tasks,
        "max_new_tokens_per_turn": config.max_new_tokens,
        "generated_tokens_max": submissions * config.max_new_tokens,
        "loss_normalizer": config.normalizer,
        "eval_tasks": n_eval_tasks,
        "eval_submissions_max": eval_submissions,
        "eval_generated_tokens_max": eval_submissions * config.eval_tokens,
        "estimator": config.estimator,
        "seed": config.seed,
    }
