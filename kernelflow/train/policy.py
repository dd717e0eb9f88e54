"""The policy: a causal LM from the hub (pinned revision), a local directory, or a model built here, plus LoRA.

`load_policy` is the one loading path. Every source ends in `AutoModelForCausalLM.from_pretrained`
and `AutoTokenizer.from_pretrained` (a hub id with its revision, or a directory), so the models built
here (the tiny random one of tiny.py, the SFT policy of sft.py) exercise the same code as
Qwen2.5-Coder-7B-Instruct. The tokenizer is set to left
padding (batched generation needs it) and must have a chat template, a pad token and an eos token.

The hub's sampling defaults are dropped at load time: Qwen2.5-Instruct ships top_k 20, top_p 0.8,
temperature 0.7 and repetition_penalty 1.05 in generation_config.json, and transformers fills every
setting a caller leaves unset from there. Rollouts must sample from the policy itself (only the
configured temperature and top_p), or the update would be off-policy; so the model's generation
config is replaced by one holding just its eos, pad and bos ids.

`Policy` bundles the PEFT model with what the rest of the trainer needs to know about its tokens:
which ids end a turn, and `vocab_limit` when the model's embedding is padded past the tokenizer
(Qwen pads 151665 tokens to 151936): those rows are never sampled and are cut from the loss's
softmax too, so sampling and training see the same distribution.

This module does not generate (generation.py) or train (update.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelflow.train.config import GenerationSettings, LoraSettings, PolicyConfig
from kernelflow.train.sft import build_sft_model
from kernelflow.train.tiny import build_tiny_model

log = logging.getLogger("kernelflow.train")

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class Policy:
    """A PEFT-wrapped causal LM and its tokenizer, ready to generate and to train."""

    model: Any  # peft.PeftModel
    tokenizer: Any  # transformers.PreTrainedTokenizerBase
    config: PolicyConfig
    lora: LoraSettings
    device: torch.device
    base_id: str  # hub id, or the local directory
    base_revision: str | None
    eos_ids: tuple[int, ...]  # any of these ends a turn
    turn_end_id: int  # the token the chat template closes a turn with (<|im_end|>)
    pad_id: int
    vocab_limit: int | None  # logits at ids >= this are excluded (padded embedding rows)
    generation: GenerationSettings = field(default_factory=GenerationSettings)  # the loop sets the run's
    runtime: dict = field(default_factory=dict, repr=False)  # generation's reusable state (merge buffers, engines)

    def trainable_parameters(self) -> list[tuple[str, torch.nn.Parameter]]:
        return [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]

    def parameter_counts(self) -> dict[str, int]:
        total = sum(p.numel() for p in self.model.parameters())
        trainable = sum(p.numel() for _, p in self.trainable_parameters())
        return {"total": total, "trainable": trainable}


def resolve_device(device: str) -> torch.device:
    """`auto` becomes cuda when a GPU is visible, else cpu; an explicit cuda without one is an error."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"policy.device={device!r} but no CUDA device is visible; set policy.device=cpu or auto")
    return torch.device(device)


def model_location(config: PolicyConfig) -> tuple[str, str | None]:
    """(path or hub id, revision) that from_pretrained is called with; builds the tiny or SFT model if needed."""
    if config.source == "tiny":
        return str(build_tiny_model(config.tiny, config.cache_dir)), None
    if config.source == "sft":
        return str(build_sft_model(config.tiny, config.sft, config.cache_dir)), None
    if config.source == "local":
        return config.model, None
    return config.model, config.revision


def load_tokenizer(location: str, revision: str | None = None):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(location, revision=revision)
    tok.padding_side = "left"
    problems = []
    if not getattr(tok, "chat_template", None):
        problems.append("no chat_template")
    if tok.eos_token_id is None:
        problems.append("no eos token")
    if tok.pad_token_id is None:
        problems.append("no pad token")
    if problems:
        raise ValueError(f"tokenizer of {location!r} is unusable for chat rollouts: {', '.join(problems)}")
    return tok


def load_policy(config: PolicyConfig, lora: LoraSettings, seed: int = 42) -> Policy:
    """Load the base model and tokenizer, wrap the model in a fresh LoRA adapter drawn from `seed`."""
    from transformers import AutoModelForCausalLM

    location, revision = model_location(config)
    device = resolve_device(config.device)
    dtype = _DTYPES[config.dtype]
    if dtype == torch.float16 and device.type == "cpu":
        raise ValueError("policy.dtype=float16 is not supported on cpu; use float32 or bfloat16")
    tokenizer = load_tokenizer(location, revision)
    kwargs: dict[str, Any] = {"dtype": dtype, "attn_implementation": config.attn_implementation}
    if revision:
        kwargs["revision"] = revision
    if device.type == "cuda":
        kwargs["device_map"] = {"": str(device)}
    log.info("loading %s%s (%s) on %s", location, f"@{revision}" if revision else "", config.dtype, device)
    base = AutoModelForCausalLM.from_pretrained(location, **kwargs)
    if device.type != "cuda":
        base.to(device)
    return policy_from_model(base, tokenizer, config, lora, seed, device, location, revision)


def policy_from_model(
    base, tokenizer, config: PolicyConfig, lora: LoraSettings, seed: int, device: torch.device,
    location: str, revision: str | None = None,
) -> Policy:
    """A loaded base model (on `device`) and its tokenizer made into a Policy: checkpointing, generation
    config, a fresh LoRA adapter drawn from `seed`. `load_policy` ends here; benchmarks that build a
    large random model directly on the GPU (benchmarks/train_step.py) enter here too."""
    from peft import LoraConfig, get_peft_model
    from transformers import GenerationConfig

    if config.gradient_checkpointing:
        # transformers 5 renamed it; the old name still works but warns
        enable = getattr(base, "activation_checkpointing_enable", None)
        if enable is not None:
            enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    base.config.use_cache = True

    eos = {tokenizer.eos_token_id}
    gen_eos = getattr(base.generation_config, "eos_token_id", None)
    if isinstance(gen_eos, int):
        eos.add(gen_eos)
    elif gen_eos:
        eos.update(int(e) for e in gen_eos)
    base.generation_config = GenerationConfig(
        eos_token_id=sorted(eos), pad_token_id=tokenizer.pad_token_id, bos_token_id=base.generation_config.bos_token_id
    )

    lora_config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
    # The adapter's random init (LoRA A) is drawn from `seed` without disturbing the global RNG.
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        model = get_peft_model(base, lora_config)
    model.to(device)

    n_vocab = base.get_input_embeddings().weight.shape[0]
    vocab_limit = len(tokenizer) if n_vocab > len(tokenizer) else None
    policy = Policy(
        model=model,
        tokenizer=tokenizer,
        config=config,
        lora=lora,
        device=device,
        base_id=location,
        base_revision=revision,
        eos_ids=tuple(sorted(eos)),
        turn_end_id=int(tokenizer.eos_token_id),
        pad_id=int(tokenizer.pad_token_id),
        vocab_limit=vocab_limit,
    )
    counts = policy.parameter_counts()
    log.info("policy ready: %d parameters, %d trainable (LoRA r=%d)", counts["total"], counts["trainable"], lora.r)
    return policy
