"""Trainer settings: plain frozen dataclasses that check their own invariants.

`PolicyConfig` says which model to load (a pinned Hugging Face revision, a local directory, or the
tiny model built here from `TinyModelConfig`), in which dtype and on which device. `LoraSettings`
holds the adapter. `TrainerConfig` holds the protocol: advantage estimator, epochs, group size,
sampling, tokens per turn, optimiser, loss normaliser, seeds and what is passed to the environment's
`reset`. The flows layer composes these into its Hydra schema; nothing here reads a DictConfig.

Values the pilot published: Qwen2.5-Coder-7B-Instruct, LoRA r16 alpha32, Dr. GRPO, 4 epochs, group
size 4, temperature 0.8, 2048 tokens per turn, 2 turns, seed 42. Values it did not publish are
choices, each marked `# choice:` with the reason next to it.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from kernelflow.config_dicts import check_nested
from kernelflow.train.decoding import GenerationSettings

SOURCES = ("hub", "local", "tiny", "sft")
DTYPES = ("float32", "bfloat16", "float16")
ESTIMATORS = ("dr_grpo", "trloo")
CREDITS = ("episode", "turn")
IMPORTANCE_SAMPLING = ("off", "token_truncate")
SCHEDULERS = ("constant", "linear", "cosine")
ATTENTION = ("sdpa", "eager", "flash_attention_2")
SHAPES = ("small", "full")

# Qwen/Qwen2.5-Coder-7B-Instruct at the commit that public pinned setups use (the hub's main as of
# 2025); a commit id, not a branch, so the weights cannot change under a run.
PILOT_MODEL = "Qwen/Qwen2.5-Coder-7B-Instruct"
PILOT_REVISION = "c03e6d358207e414f1eca0bb1891e29f1db0e242"

_SHA = re.compile(r"^[0-9a-f]{40}$")
_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def _fail(kind: str, problems: list[str]) -> None:
    if problems:
        raise ValueError(f"invalid {kind}: " + "; ".join(problems))


@dataclass(frozen=True)
class TinyModelConfig:
    """A small Qwen2 with random weights and a tokenizer trained on the project's own text.

    The defaults make a ~0.1M-parameter model for CPU tests. `vocab_size=None` sizes the embedding to
    the tokenizer; a larger value pads it (as Qwen itself does), e.g. 151936 for a Qwen2.5-0.5B shape.
    """

    hidden_size: int = 64
    intermediate_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    tokenizer_vocab: int = 1024
    vocab_size: int | None = None
    max_position_embeddings: int = 32768
    tie_word_embeddings: bool = True
    seed: int = 0
    # Where and in what dtype the random weights are drawn and saved. The CPU in fp32 suits the small
    # models; a 7B shape drawn there takes ~30 GB of RAM and minutes, on a GPU in bf16 seconds. The draw
    # depends on the device's generator, so these are part of the cache key (tiny.tiny_model_hash).
    build_device: str = "cpu"      # cpu | cuda | auto (cuda when visible)
    build_dtype: str = "float32"   # float32 | bfloat16 | float16

    def __post_init__(self) -> None:
        p = []
        if self.build_device not in ("cpu", "cuda", "auto"):
            p.append(f"build_device={self.build_device!r} (use cpu, cuda or auto)")
        if self.build_dtype not in ("float32", "bfloat16", "float16"):
            p.append(f"build_dtype={self.build_dtype!r} (use float32, bfloat16 or float16)")
        for name in ("hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads"):
            if getattr(self, name) < 1:
                p.append(f"{name}={getattr(self, name)} (must be >= 1)")
        if self.num_heads >= 1 and self.hidden_size % self.num_heads:
            p.append(f"hidden_size={self.hidden_size} is not divisible by num_heads={self.num_heads}")
        if self.num_kv_heads >= 1 and self.num_heads % self.num_kv_heads:
            p.append(f"num_heads={self.num_heads} is not divisible by num_kv_heads={self.num_kv_heads}")
        if self.tokenizer_vocab < 300:
            p.append(f"tokenizer_vocab={self.tokenizer_vocab} (need >= 300: 256 bytes + specials + merges)")
        if self.vocab_size is not None and self.vocab_size < self.tokenizer_vocab:
            p.append(f"vocab_size={self.vocab_size} < tokenizer_vocab={self.tokenizer_vocab} (set null or larger)")
        _fail("TinyModelConfig", p)


@dataclass(frozen=True)
class SFTSettings:
    """How source `sft` pre-trains the tiny model: the synthetic corpus (corpus.py) and TRL's SFT run (sft.py).

    The corpus answers each of `tasks` `examples_per_task` times; a share `mistake_rates[i]` of the
    answers to `tasks[i]` carries one realistic mistake, its kind drawn with `mistake_weights` over
    (no_mask, formula, grid, arange). The architecture is `PolicyConfig.tiny`'s; its tokenizer is
    trained on the project's text plus the corpus' answers.
    """

    tasks: tuple[str, ...] = ("19_ReLU", "20_LeakyReLU", "21_Sigmoid", "22_Tanh")
    examples_per_task: int = 64
    # choice: the harder two tasks are mostly answered wrongly, so the SFT policy starts imperfect and
    # its greedy answer is wrong there: the trainer has something to fix that greedy evaluation shows.
    mistake_rates: tuple[float, ...] = (0.3, 0.3, 0.6, 0.6)
    mistake_weights: tuple[float, ...] = (1.0, 4.0, 1.0, 1.0)  # no_mask, formula, grid, arange
    block_sizes: tuple[int, ...] = (256, 512, 1024, 2048)  # powers of two the correct answers draw from
    num_warps: tuple[int, ...] = (2, 4, 8)
    # How many equivalent formulas each task's answers draw from (corpus.py has 2 per task, and 2 wrong
    # ones): 1 leaves block size and warps as the only variation, which a small model learns in fewer steps.
    variety: int = 2
    # Two-turn examples per task, as a share of examples_per_task: a mistaken answer, the feedback's first
    # line, then a correct answer; without them the policy answers feedback with prose (no_code).
    second_turn_share: float = 0.25
    # True: the two-turn examples show a judged first answer and the evaluator's real, whole feedback
    # (kernelflow/train/feedback_samples.json) instead of its first line; False keeps the first line only.
    real_feedback: bool = False
    # With real_feedback, the share of two-turn examples whose first answer was correct (feedback `ok`,
    # then another correct kernel): without them the policy has never seen feedback after a success.
    second_turn_ok_share: float = 0.0
    corpus_seed: int = 0
    epochs: float = 4.0
    batch_size: int = 8
    learning_rate: float = 2e-3  # choice: a from-scratch model of a few million parameters takes a large rate
    warmup_ratio: float = 0.05
    max_length: int = 2048  # tokens per example (prompt + answer); longer ones would be cut, so it fails instead
    seed: int = 0  # the SFT run's data order

    def __post_init__(self) -> None:
        for name in ("tasks", "mistake_rates", "mistake_weights", "block_sizes", "num_warps"):
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        p = []
        if not self.tasks:
            p.append("tasks is empty (name the task ids the corpus answers)")
        if len(self.mistake_rates) != len(self.tasks):
            p.append(f"mistake_rates has {len(self.mistake_rates)} value(s) for {len(self.tasks)} task(s) (give one per task)")
        if any(not 0.0 <= r <= 1.0 for r in self.mistake_rates):
            p.append(f"mistake_rates={list(self.mistake_rates)} (each must be in [0, 1])")
        if len(self.mistake_weights) != 4 or any(w < 0 for w in self.mistake_weights) or not sum(self.mistake_weights) > 0:
            p.append(f"mistake_weights={list(self.mistake_weights)} (four weights >= 0, for no_mask, formula, grid, "
                     "arange, not all 0)")
        bad_blocks = [b for b in self.block_sizes if b < 16 or b & (b - 1)]
        if not self.block_sizes or bad_blocks:
            p.append(f"block_sizes={list(self.block_sizes)} (give powers of two >= 16; tl.arange needs them)")
        if not self.num_warps or any(w not in (1, 2, 4, 8, 16, 32) for w in self.num_warps):
            p.append(f"num_warps={list(self.num_warps)} (give values among 1, 2, 4, 8, 16, 32)")
        for name in ("examples_per_task", "batch_size", "max_length", "variety"):
            if getattr(self, name) < 1:
                p.append(f"{name}={getattr(self, name)} (must be >= 1)")
        if not 0.0 <= self.second_turn_share <= 1.0:
            p.append(f"second_turn_share={self.second_turn_share} (must be in [0, 1])")
        if not 0.0 <= self.second_turn_ok_share <= 1.0:
            p.append(f"second_turn_ok_share={self.second_turn_ok_share} (must be in [0, 1])")
        if self.second_turn_ok_share > 0 and not self.real_feedback:
            p.append(f"second_turn_ok_share={self.second_turn_ok_share} needs real_feedback=true (the first-line "
                     "feedback exists only for mistakes)")
        if not self.epochs > 0:
            p.append(f"epochs={self.epochs} (must be > 0)")
        if not self.learning_rate > 0:
            p.append(f"learning_rate={self.learning_rate} (must be > 0)")
        if not 0 <= self.warmup_ratio < 1:
            p.append(f"warmup_ratio={self.warmup_ratio} (must be in [0, 1))")
        _fail("SFTSettings", p)


@dataclass(frozen=True)
class PolicyConfig:
    """Which causal LM to load, and how.

    source: `hub` loads `model` (a hub id) at `revision` (a 40-hex commit, so it is pinned); `local`
    loads the directory `model`; `tiny` builds (or reuses from `cache_dir`) the model `tiny` describes
    (random weights) and then loads that directory through the same path as `local`; `sft` does the
    same with the `tiny` architecture pre-trained on the synthetic corpus as `sft` says (sft.py).
    """

    source: str = "hub"
    model: str = PILOT_MODEL
    revision: str | None = PILOT_REVISION
    dtype: str = "bfloat16"
    device: str = "auto"  # auto: cuda if available, else cpu
    attn_implementation: str = "sdpa"
    gradient_checkpointing: bool = True  # choice: 4 x ~5k-token sequences of a 7B fit with it; costs ~30% update time
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    sft: SFTSettings = field(default_factory=SFTSettings)  # used by source `sft` only
    cache_dir: str | None = None  # where tiny and sft models are built; None: ~/.cache/kernelflow/tiny

    def __post_init__(self) -> None:
        check_nested(self, tiny=TinyModelConfig, sft=SFTSettings)  # a mapping goes through config_from_dict
        p = []
        if self.source not in SOURCES:
            p.append(f"source={self.source!r} (choose one of {SOURCES})")
        if self.source in ("hub", "local") and not self.model:
            p.append(f"model is empty (give a hub id or a local directory for source={self.source!r})")
        if self.source == "hub" and not (isinstance(self.revision, str) and _SHA.match(self.revision)):
            p.append(
                f"revision={self.revision!r} for hub model {self.model!r} is not a 40-hex commit id "
                "(pin one: a branch or tag can move under a run)"
            )
        if self.dtype not in DTYPES:
            p.append(f"dtype={self.dtype!r} (choose one of {DTYPES})")
        if not _DEVICE.match(self.device):
            p.append(f"device={self.device!r} (choose auto, cpu, cuda or cuda:N)")
        if self.attn_implementation not in ATTENTION:
            p.append(f"attn_implementation={self.attn_implementation!r} (choose one of {ATTENTION})")
        _fail("PolicyConfig", p)


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
