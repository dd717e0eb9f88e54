"""A tiny local stand-in for the policy: a small Qwen2 with random weights and a locally trained tokenizer.

Tests, the smoke experiment and the benchmarks need a causal LM without a model hub. `build_tiny_model`
writes one with `save_pretrained`, so `policy.load_policy` loads it through the same
`AutoModelForCausalLM.from_pretrained(path)` / `AutoTokenizer.from_pretrained(path)` calls as a hub model.

The tokenizer is a byte-level BPE trained on the project's own text (every task prompt, the worked
example, feedback-shaped messages, Triton code) with Qwen2's NFC normaliser and pre-tokenizer regex.
That matters: for a directory whose config says `model_type: qwen2`, transformers 5 rebuilds the
tokenizer as `Qwen2Tokenizer` from vocab and merges with Qwen2's own pre-tokenizer, ignoring the saved
one (notes/stack_check.md section 3); training with the same pieces makes both give the same ids.
Specials and template follow Qwen2.5-Instruct: ChatML, eos `<|im_end|>`, pad `<|endoftext|>`, left padding.

Everything is a function of `TinyModelConfig` and the corpus, so the result is cached under a hash of
both (plus this builder's version) and rebuilt only when one changes. This module does not load the
model for training (policy.py does) and knows nothing of LoRA.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from filelock import FileLock

from kernelflow.cache_dir import cache_root
from kernelflow.tasks import TASKS, build_messages, feedback_message
from kernelflow.train.config import TinyModelConfig

BUILDER_VERSION = "1"
ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIALS = (ENDOFTEXT, IM_START, IM_END)

CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# Feedback-shaped lines, so the tokenizer has merges for what the model reads on turn 2.
_FEEDBACK_LINES = (
    "status: ok. correct on 3 seeds; runtime 3.184 ms; roofline fraction 0.96; reward 2.89.",
    "status: incorrect. max abs error 1.5e+00 at index (3, 1036) on the odd shape (3, 1037).",
    "status: compile_error. triton.compiler.errors.CompilationError: arange's range must be a power of 2",
    "status: static_rejected. forward calls torch.relu; do the math inside a @triton.jit kernel.",
    "status: no_code. The answer held no ```python block.",
    "status: runtime_error. RuntimeError: Triton Error [CUDA]: an illegal memory access was encountered",
    "status: timeout. The worker ran past 180 s and was killed.",
)

_TRITON_SNIPPETS = (
    '''@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)
''',
    '''@triton.jit
def sigmoid_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    m = offs < n_elements
    x = tl.load(x_ptr + offs, mask=m).to(tl.float32)
    y = 1.0 / (1.0 + tl.exp(-x))
    tl.store(out_ptr + offs, y, mask=m)
''',
    '''@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    for start in range(0, n_cols, BLOCK):
        x = tl.load(x_ptr + row * stride + start + cols, mask=start + cols < n_cols, other=float("-inf"))
        m = tl.maximum(m, x)
    row_max = tl.max(m, axis=0)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        x = tl.load(x_ptr + row * stride + start + cols, mask=start + cols < n_cols, other=float("-inf"))
        s += tl.exp(x - row_max)
    total = tl.sum(s, axis=0)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_ptr + row * stride + start + cols, mask=mask)
        tl.store(out_ptr + row * stride + start + cols, tl.exp(x - row_max) / total, mask=mask)
''',
)


def tokenizer_corpus() -> list[str]:
    """The text the tiny tokenizer is trained on, in a fixed order."""
    texts = []
    for task in TASKS.values():
        for message in build_messages(task):
            texts.append(message["content"])
    for line in _FEEDBACK_LINES:
        texts.append(feedback_message(line)["content"])
    texts.extend(_TRITON_SNIPPETS)
    return texts


def hashed_settings(config: TinyModelConfig) -> dict:
    """The settings that identify a build: every field, with build_device/build_dtype only when they
    differ from the CPU/fp32 default (so the keys of models built before those fields existed hold)."""
    data = asdict(config)
    defaults = TinyModelConfig()
    for name in ("build_device", "build_dtype"):
        if data[name] == getattr(defaults, name):
            del data[name]
    return data


def build_device(config: TinyModelConfig) -> str:
    """The device the weights are drawn on: `auto` is cuda when a GPU is visible."""
    import torch

    if config.build_device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if config.build_device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("TinyModelConfig.build_device='cuda' but no CUDA device is visible; "
                           "set model.tiny.build_device=auto or cpu")
    return config.build_device


def tiny_model_hash(config: TinyModelConfig) -> str:
    """sha256 over the settings, the corpus and the builder version: the cache key."""
    h = hashlib.sha256(BUILDER_VERSION.encode())
    h.update(json.dumps(hashed_settings(config), sort_keys=True).encode())
    for text in tokenizer_corpus():
        h.update(hashlib.sha256(text.encode()).digest())
    return h.hexdigest()


def default_cache_dir() -> Path:
    """<cache root>/tiny: $KERNELFLOW_CACHE_DIR (the old $KERNELFLOW_CACHE still read, with a warning), see
    kernelflow/cache_dir.py."""
    return cache_root() / "tiny"


def build_tokenizer(config: TinyModelConfig, extra_texts: Sequence[str] = ()):
    """A byte-level BPE tokenizer with Qwen2's normaliser and pre-tokenizer, ChatML template, left padding.

    `extra_texts` are trained on after `tokenizer_corpus()` (the SFT policy adds its corpus' answers).
    """
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    raw = Tokenizer(models.BPE())
    raw.normalizer = normalizers.NFC()
    raw.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=config.tokenizer_vocab,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    raw.train_from_iterator([*tokenizer_corpus(), *extra_texts], trainer=trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        unk_token=ENDOFTEXT,
        padding_side="left",
        model_max_length=config.max_position_embeddings,
    )
    tok.chat_template = CHATML_TEMPLATE
    return tok


def build_model(config: TinyModelConfig, tokenizer):
    """A Qwen2ForCausalLM with random weights drawn from `config.seed`, on `build_device` in `build_dtype`."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    vocab = config.vocab_size or len(tokenizer)
    eos = [tokenizer.convert_tokens_to_ids(IM_END), tokenizer.convert_tokens_to_ids(ENDOFTEXT)]
    model_config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_kv_heads,
        max_position_embeddings=config.max_position_embeddings,
        tie_word_embeddings=config.tie_word_embeddings,
        bos_token_id=None,
        eos_token_id=eos[0],
        pad_token_id=eos[1],
    )
    device = build_device(config)
    fork_devices: list = [torch.cuda.current_device()] if device == "cuda" else []
    with torch.random.fork_rng(devices=fork_devices), torch.device(device):
        torch.manual_seed(config.seed)
        # The default dtype, not a cast afterwards: the fp32 copy of a 7B shape alone is ~30 GB.
        previous = torch.get_default_dtype()
        torch.set_default_dtype(getattr(torch, config.build_dtype))
        try:
            model = Qwen2ForCausalLM(model_config)
        finally:
            torch.set_default_dtype(previous)
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=eos[1], bos_token_id=None)
    return model


def build_tiny_model(config: TinyModelConfig | None = None, cache_dir: str | Path | None = None) -> Path:
    """The directory holding the tiny model and tokenizer for `config`, built on first use.

    Concurrent callers are serialised by a file lock; a build goes to a temporary directory that is
    renamed into place only when complete, so a killed build leaves nothing half-written behind.
    """
    config = config or TinyModelConfig()
    root = Path(cache_dir) if cache_dir else default_cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    target = root / f"tiny-{tiny_model_hash(config)[:16]}"
    done = target / "kernelflow_tiny.json"
    with FileLock(str(root / f"{target.name}.lock")):
        if done.is_file():
            return target
        if target.exists():
            shutil.rmtree(target)
        tmp = Path(tempfile.mkdtemp(prefix=f"{target.name}.", dir=root))
        try:
            tokenizer = build_tokenizer(config)
            model = build_model(config, tokenizer)
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            meta = {"builder_version": BUILDER_VERSION, "config": asdict(config), "hash": tiny_model_hash(config),
                    "built_on": build_device(config)}
            (tmp / "kernelflow_tiny.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
            tmp.rename(target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return target
