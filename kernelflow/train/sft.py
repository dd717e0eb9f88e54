"""The SFT policy: the tiny Qwen2 pre-trained here with TRL's SFTTrainer on the synthetic corpus.

`build_sft_model(tiny, sft, cache_dir)` returns a directory in Hugging Face format (config,
safetensors weights, tokenizer, generation config) that `policy.load_policy` loads through the same
`from_pretrained` path as a hub model (PolicyConfig source `sft`). The build:

1. writes the corpus (corpus.py) from `sft.corpus_seed`;
2. trains the byte-level BPE tokenizer of tiny.py on the project's text plus the corpus' answers, so
   kernels take few tokens;
3. draws the `tiny` architecture's weights from `tiny.seed` (tiny.py);
4. runs `trl.SFTTrainer` on the prompt-completion records (conversational format: the chat template
   renders the prompt, and the loss covers only the answer and its closing `<|im_end|>`);
5. saves the model, the tokenizer, `kernelflow_sft.json` (settings, corpus statistics, loss curve,
   sha256 of every file, versions) and a model card README.md with the same hashes.

Everything is a function of (`TinyModelConfig`, `SFTSettings`, the corpus, this builder's version),
so the result is cached under a hash of them and rebuilt only when one changes. On one machine a
rebuild gives the same weights (CPU kernels are deterministic at a fixed thread count); another
device or thread count may differ in the last bits, which is why the hashes are recorded and the
directory (a few MB) can be carried instead of rebuilt. Concurrent builders are serialised by a file
lock and a build is renamed into place only when complete. The training itself runs in a child process
(`python -m kernelflow.train.sft OUT_DIR`, settings as JSON on stdin; see `_train_in_subprocess`).

This module does not add LoRA or run reinforcement learning (policy.py, trainer.py), and it never
judges code: the corpus' labels are checked against the evaluator by the tests.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from filelock import FileLock

from kernelflow.config_dicts import config_from_dict
from kernelflow.train.config import SFTSettings, TinyModelConfig
from kernelflow.train.corpus import CORPUS_VERSION, MISTAKES, build_corpus, corpus_hash, mistake_counts
from kernelflow.train.tiny import build_model, build_tokenizer, default_cache_dir, tiny_model_hash

log = logging.getLogger("kernelflow.train")

BUILDER_VERSION = "1"
META_FILE = "kernelflow_sft.json"
CARD_FILE = "README.md"


def sft_model_hash(tiny: TinyModelConfig, sft: SFTSettings) -> str:
    """sha256 over the builder version, the architecture (and tiny's tokenizer corpus), the SFT settings and the corpus."""
    h = hashlib.sha256(f"sft:{BUILDER_VERSION}".encode())
    h.update(tiny_model_hash(tiny).encode())
    h.update(json.dumps(asdict(sft), sort_keys=True).encode())
    h.update(corpus_hash(sft).encode())
    return h.hexdigest()


def _sha256(path: Path) -> str:
    # checkpoint.sha256_file does the same, but checkpoint imports policy, which imports this module
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _hashes(root: Path) -> dict[str, str]:
    return {p.name: _sha256(p) for p in sorted(root.iterdir()) if p.is_file() and p.name not in (META_FILE, CARD_FILE)}


def _versions() -> dict[str, str]:
    import torch
    import transformers
    import trl

    return {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__}


def _card(meta: dict) -> str:
    sft, tiny = meta["sft"], meta["tiny"]
    rows = "\n".join(f"| {name} | `{digest}` |" for name, digest in sorted(meta["sha256"].items()))
    counts = "\n".join(
        f"| {task} | " + " | ".join(str(row.get(k, 0)) for k in ("none", *MISTAKES, "second_turn")) + " |"
        for task, row in meta["corpus"]["mistakes"].items()
    )
    return f"""---
library_name: transformers
pipeline_tag: text-generation
tags:
- kernelflow
- triton
- synthetic
---

# kernelflow SFT policy (synthetic corpus)

A {meta['parameters']:,}-parameter Qwen2 (hidden {tiny['hidden_size']}, {tiny['num_layers']} layers,
{tiny['num_heads']} heads, {tiny['num_kv_heads']} KV heads) with a {meta['vocab']}-token BPE tokenizer, trained
from random weights (seed {tiny['seed']}) by kernelflow with TRL's SFTTrainer on a synthetic corpus of
Triton answers to the training tasks' prompts (kernelflow/train/corpus.py, seed {sft['corpus_seed']}). Some
answers carry a deliberate mistake, so the policy starts imperfect. It is the learnability experiment's
starting point (docs/learnability.md): it says whether the reinforcement loop learns, nothing about any
real model.

## Corpus (answers per task and mistake)

| task | correct | no_mask | formula | grid | arange | two-turn (mistake, feedback, correct) |
|---|---:|---:|---:|---:|---:|---:|
{counts}

## Training

- {sft['epochs']} epoch(s), batch {sft['batch_size']}, learning rate {sft['learning_rate']} (cosine, warmup
  {sft['warmup_ratio']}), seed {sft['seed']}; loss on the answer only
- final training loss {meta['final_loss']:.4f}; built in {meta['build_seconds']:.0f} s on {meta['device']}
- build hash `{meta['hash']}`

## Files (sha256)

| file | sha256 |
|---|---|
{rows}
"""


def train_sft(tiny: TinyModelConfig, sft: SFTSettings, out_dir: Path) -> dict:
    """Build the corpus, tokenizer and model, run TRL's SFTTrainer, save everything to `out_dir`; returns the metadata."""
    import torch
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    start = time.perf_counter()
    examples = build_corpus(sft)
    tokenizer = build_tokenizer(tiny, extra_texts=[e.completion for e in examples])
    model = build_model(tiny, tokenizer)
    n_params = sum(p.numel() for p in model.parameters())
    # the rendered text tokenized as the rollouts do it (transcript.py); answers differ little in length
    longest = max(
        len(tokenizer(tokenizer.apply_chat_template(
            [*e.prompt, {"role": "assistant", "content": e.completion}], tokenize=False))["input_ids"])
        for e in examples
    )
    if longest > sft.max_length:
        raise ValueError(
            f"a corpus example takes {longest} tokens but sft.max_length={sft.max_length}; TRL would cut it "
            f"(raise sft.max_length to at least {longest}, or model.tiny.tokenizer_vocab to shorten it)"
        )
    log.info("SFT policy: %d parameters, %d-token vocab, %d examples (longest %d tokens), %s epoch(s)",
             n_params, len(tokenizer), len(examples), longest, sft.epochs)
    steps_per_epoch = -(-len(examples) // sft.batch_size)
    args = SFTConfig(
        output_dir=str(out_dir / "_trainer"),
        num_train_epochs=sft.epochs,
        per_device_train_batch_size=sft.batch_size,
        learning_rate=sft.learning_rate,
        lr_scheduler_type="cosine",
        warmup_steps=sft.warmup_ratio,  # transformers 5: a float in [0, 1) is a share of the steps
        weight_decay=0.0,
        max_length=sft.max_length,
        logging_steps=max(1, steps_per_epoch // 2),
        save_strategy="no",
        report_to=[],
        seed=sft.seed,
        data_seed=sft.seed,
        bf16=False,
        fp16=False,
        dataloader_num_workers=0,
        disable_tqdm=True,
        use_cpu=not torch.cuda.is_available(),
    )
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list([e.to_record() for e in examples]),
        processing_class=tokenizer,
    )
    trainer.train()
    losses = [
        {"step": r["step"], "epoch": r.get("epoch"), "loss": r["loss"]} for r in trainer.state.log_history if "loss" in r
    ]
    device = str(next(model.parameters()).device)
    model = model.to("cpu")
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    shutil.rmtree(out_dir / "_trainer", ignore_errors=True)
    meta = {
        "builder_version": BUILDER_VERSION,
        "corpus_version": CORPUS_VERSION,
        "hash": sft_model_hash(tiny, sft),
        "tiny": asdict(tiny),
        "sft": asdict(sft),
        "parameters": n_params,
        "vocab": len(tokenizer),
        "corpus": {"examples": len(examples), "longest_tokens": longest, "mistakes": mistake_counts(examples),
                   "sha256": corpus_hash(sft)},
        "loss_curve": losses,
        "final_loss": losses[-1]["loss"] if losses else float("nan"),
        "device": device,
        "build_seconds": time.perf_counter() - start,
        "versions": _versions(),
        "sha256": _hashes(out_dir),
    }
    (out_dir / META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    (out_dir / CARD_FILE).write_text(_card(meta))
    log.info("SFT policy built in %.0f s (%d steps): loss %s", meta["build_seconds"], trainer.state.global_step,
             " -> ".join(f"{r['loss']:.3f}" for r in losses))
    return meta


def build_sft_model(tiny: TinyModelConfig, sft: SFTSettings, cache_dir: str | Path | None = None) -> Path:
    """The directory holding the SFT policy for (`tiny`, `sft`), built on first use (see the module docstring)."""
    root = Path(cache_dir) if cache_dir else default_cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    target = root / f"sft-{sft_model_hash(tiny, sft)[:16]}"
    done = target / META_FILE
    with FileLock(str(root / f"{target.name}.lock")):
        if done.is_file():
            return target
        if target.exists():
            shutil.rmtree(target)
        log.info("building the SFT policy %s (first use; cached afterwards)", target)
        tmp = Path(tempfile.mkdtemp(prefix=f"{target.name}.", dir=root))
        try:
            _train_in_subprocess(tiny, sft, tmp)
            tmp.rename(target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return target


def _train_in_subprocess(tiny: TinyModelConfig, sft: SFTSettings, out_dir: Path) -> None:
    """`train_sft` in a child process, its log lines relayed here.

    Why a child: TRL's dataset preparation fingerprints functions with dill, which disassembles them
    by printing to a swapped stdout; under a Prefect task (whose print goes to the run log) that
    becomes hundreds of log lines. A child also returns TRL's and the Trainer's memory and threads
    when it exits, before the trainer loads the policy.
    """
    cmd = [sys.executable, "-m", "kernelflow.train.sft", str(out_dir)]
    spec = json.dumps({"tiny": asdict(tiny), "sft": asdict(sft)})
    tail: list[str] = []
    with subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True) as proc:
        assert proc.stdin is not None and proc.stderr is not None
        proc.stdin.write(spec)
        proc.stdin.close()
        for line in proc.stderr:
            line = line.rstrip()
            tail = (tail + [line])[-30:]
            if line.startswith("kernelflow.train: "):
                log.info("%s", line.removeprefix("kernelflow.train: "))
    if proc.returncode != 0:
        raise RuntimeError(f"building the SFT policy failed (exit {proc.returncode}):\n" + "\n".join(tail))


def main(argv: list[str] | None = None) -> int:
    """`python -m kernelflow.train.sft OUT_DIR` with {"tiny": {...}, "sft": {...}} on stdin: train_sft into OUT_DIR."""
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s", stream=sys.stderr)
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m kernelflow.train.sft OUT_DIR < settings.json", file=sys.stderr)
        return 2
    spec = json.loads(sys.stdin.read())
    train_sft(config_from_dict(TinyModelConfig, spec["tiny"], "tiny"), config_from_dict(SFTSettings, spec["sft"], "sft"),
              Path(args[0]))
    return 0


def verify_sft_model(path: str | Path) -> dict:
    """The metadata of a built SFT policy, after checking every recorded sha256 against its file."""
    path = Path(path)
    meta_path = path / META_FILE
    if not meta_path.is_file():
        raise FileNotFoundError(f"{path} holds no {META_FILE}; is it an SFT policy built by kernelflow.train.sft?")
    meta = json.loads(meta_path.read_text())
    bad = [name for name, digest in meta["sha256"].items() if not (path / name).is_file() or _sha256(path / name) != digest]
    if bad:
        raise ValueError(f"SFT policy {path}: file(s) {bad} are missing or differ from their recorded sha256; rebuild it")
    return meta


if __name__ == "__main__":
    sys.exit(main())
