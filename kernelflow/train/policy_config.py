"""Which model the trainer starts from: `PolicyConfig` and the two settings it nests for models built here.

`PolicyConfig` says which causal LM to load (a pinned Hugging Face revision, a local directory, or a
model built here), in which dtype, on which device and with which attention kernel. `TinyModelConfig`
describes the small random Qwen2 that source `tiny` builds (tiny.py); `SFTSettings` how source `sft`
pre-trains that architecture on the synthetic corpus (corpus.py, sft.py). This module does not hold
the adapter or the training protocol (config.py: `LoraSettings`, `TrainerConfig`), nor how rollouts
are decoded (decoding.py). config.py re-exports every name here, so `kernelflow.train.config` stays
the one place to import the trainer's settings from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kernelflow.config_dicts import check_nested

SOURCES = ("hub", "local", "tiny", "sft")
DTYPES = ("float32", "bfloat16", "float16")
ATTENTION = ("sdpa", "eager", "flash_attention_2")

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
