"""Benchmark: one epoch of the training loop against an environment server this script starts itself.

On the H200 (the default): a randomly initialised Qwen2 shaped like Qwen2.5-0.5B (hidden 896,
24 layers, 14 heads, 2 KV heads, intermediate 4864, a 151936-row tied embedding; ~494M parameters;
the tokenizer is the tiny local one, and the logits past it are masked), LoRA r16 on every linear
layer, bf16, 4 training tasks x 4 episodes x 2 turns, 256 new tokens per turn, against
`start_local_server(EnvServerConfig(eval=EvalConfig(backend="cuda", shape="full")))` on the same GPU.

It reports, per update and summarised: seconds in generation, evaluation and optimisation, generation
tokens/s, and the peak GPU memory; printed and written as JSON to `--out/train_step.json` (rewritten
after every update, so a run cut short still leaves its numbers).

A random model writes no code, so every verdict would be `no_code` and evaluation would cost nothing.
By default the first rollout of each group therefore submits the task's honest solution from
tests/fixtures/solutions on its first turn (the model's own tokens are still what is trained), so each
update includes one real GPU evaluation; `--no-inject` turns that off.

    python benchmarks/train_step.py --out results/train_step              # H200
    python benchmarks/train_step.py --device cpu --tiny --out /tmp/ts     # CPU dry check (interpreter)

`--model-shape 7b` uses Qwen2.5-7B's shape instead (hidden 3584, 28 layers, 28 heads, 4 KV heads,
intermediate 18944, a 152064-row untied embedding; ~7.6B parameters), built with random weights
directly on the GPU (writing and reloading 30 GB would take minutes) with the tiny local tokenizer,
and made into a Policy by the same `policy_from_model` that `load_policy` ends in. The pilot's
shape of one update is then `--model-shape 7b --tokens 2048 --group-size 4` (4 episodes x 2 turns x 2,048
tokens); `--gen-backend static_compiled` and `--no-merge` pick the generation path
(trainer.generation), and the JSON's per-update split (generation, evaluation, optimisation) and
peak memory are what docs/train.md's whole-pilot estimate is computed from.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import logging
import os
import platform
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

from kernelflow.env.client import KernelEnvSession, fetch_server_info  # noqa: E402
from kernelflow.env.config import EnvServerConfig  # noqa: E402
from kernelflow.env.server.launch import start_local_server  # noqa: E402
from kernelflow.eval import EvalConfig  # noqa: E402
from kernelflow.tasks import task_ids  # noqa: E402
from kernelflow.train import LoraSettings, PolicyConfig, TinyModelConfig, TrainerConfig, plan  # noqa: E402
from kernelflow.train.config import GenerationSettings  # noqa: E402
from kernelflow.train.policy import load_policy, load_tokenizer, policy_from_model  # noqa: E402
from kernelflow.train.rollout import collect_groups  # noqa: E402
from kernelflow.train.tiny import build_tiny_model  # noqa: E402
from kernelflow.train.trainer import GRPOLoop  # noqa: E402

SOLUTIONS = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "solutions"

# Qwen2.5-0.5B's shape; vocab padded to its 151936 rows so the LM head costs what the real one does.
QWEN25_05B = TinyModelConfig(
    hidden_size=896, intermediate_size=4864, num_layers=24, num_heads=14, num_kv_heads=2,
    vocab_size=151936, tie_word_embeddings=True, seed=0,
)

# Qwen2.5-7B's shape (Qwen2.5-Coder-7B-Instruct, the pilot's model), random weights, built on the GPU.
QWEN25_7B = dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                 num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False)

log = logging.getLogger("benchmarks.train_step")


def random_7b_policy(config: TrainerConfig, cache_dir: str | None):
    """A random 7B-shaped Qwen2 built on the policy's device, with the tiny tokenizer, as a Policy."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    tok_dir = build_tiny_model(TinyModelConfig(), cache_dir)  # only its tokenizer is used
    tokenizer = load_tokenizer(str(tok_dir))
    cfg = Qwen2Config(**QWEN25_7B, max_position_embeddings=32768, rope_theta=1e6, rms_norm_eps=1e-6,
                      use_cache=True, bos_token_id=None, eos_token_id=tokenizer.eos_token_id,
                      pad_token_id=tokenizer.pad_token_id)
    device = torch.device(config.policy.device)
    torch.manual_seed(0)
    with torch.device(device):
        base = AutoModelForCausalLM.from_config(cfg, dtype=getattr(torch, config.policy.dtype),
                                                attn_implementation=config.policy.attn_implementation)
    return policy_from_model(base, tokenizer, config.policy, config.lora, config.seed, device,
                             "random-qwen2-7b-shape")


class InjectFirstTurn:
    """A real session whose first submission is the task's honest solution (one real evaluation)."""

    def __init__(self, inner: KernelEnvSession):
        self.inner, self.steps, self.task_id = inner, 0, None

    def reset(self, task_id, seed=0, shape=None):
        self.task_id = task_id
        return self.inner.reset(task_id, seed=seed, shape=shape)

    def step(self, code):
        self.steps += 1
        path = SOLUTIONS / f"{self.task_id}.py"
        if self.steps == 1 and path.is_file():
            code = f"```python\n{path.read_text()}```"
        return self.inner.step(code)

    def close(self):
        self.inner.close()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--tiny", action="store_true", help="the ~0.1M-parameter test model instead of the 0.5B shape")
    p.add_argument("--model-shape", default="0.5b", choices=["0.5b", "7b"],
                   help="the random model's shape (7b: built on the GPU, the tiny tokenizer)")
    p.add_argument("--gen-backend", default="eager", choices=["eager", "static_compiled"],
                   help="trainer.generation.backend")
    p.add_argument("--no-merge", action="store_true", help="generate with the adapter unmerged (the old path)")
    p.add_argument("--rollout-groups", type=int, default=1,
                   help="trainer.rollout_groups: task groups generated in one batch (4 x group 4 = 16 rows)")
    p.add_argument("--importance-sampling", default="off", choices=["off", "token_truncate"],
                   help="trainer.importance_sampling (pair token_truncate with --rollout-groups > 1)")
    p.add_argument("--max-context", type=int, default=6144,
                   help="static_compiled: KV cache positions, context + new tokens (one compile per run)")
    p.add_argument("--out", required=True, help="directory for train_step.json")
    p.add_argument("--tokens", type=int, default=256, help="max new tokens per turn")
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--tasks", nargs="*", default=None, help="training task ids (default: the train group)")
    p.add_argument("--backend", default=None, help="evaluator backend (default: cuda on cuda, interpret on cpu)")
    p.add_argument("--shape", default=None, help="shape profile (default: full on cuda, small on cpu)")
    p.add_argument("--dtype", default=None, help="policy dtype (default: bfloat16 on cuda, float32 on cpu)")
    p.add_argument("--no-gradient-checkpointing", action="store_true")
    p.add_argument("--no-inject", action="store_true", help="do not substitute one honest solution per group")
    p.add_argument("--cache-dir", default=None, help="where the random model is built (default ~/.cache/kernelflow)")
    p.add_argument("--env-url", default=None,
                   help="judge against this running environment server instead of starting one (two-GPU runs)")
    p.add_argument("--env-token", default=None, help="the server's token, if it has one")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda but no CUDA device is visible; use --device cpu --tiny for a dry check", file=sys.stderr)
        return 2
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    out_file = out_dir / "train_step.json"
    backend = args.backend or ("cuda" if args.device == "cuda" else "interpret")
    shape = args.shape or ("full" if args.device == "cuda" else "small")
    dtype = args.dtype or ("bfloat16" if args.device == "cuda" else "float32")
    tasks = args.tasks or task_ids("train")
    model_cfg = TinyModelConfig() if args.tiny else QWEN25_05B
    seven_b = args.model_shape == "7b" and not args.tiny

    config = TrainerConfig(
        policy=PolicyConfig(
            source="tiny", tiny=model_cfg, dtype=dtype, device=args.device, cache_dir=args.cache_dir,
            gradient_checkpointing=not args.no_gradient_checkpointing,
        ),
        lora=LoraSettings(),
        generation=GenerationSettings(merge_adapter=not args.no_merge, backend=args.gen_backend,
                                      compile=args.device == "cuda", max_context=args.max_context),
        epochs=1,
        rollout_groups=args.rollout_groups,
        importance_sampling=args.importance_sampling,
        group_size=args.group_size,
        max_new_tokens=args.tokens,
        env_shape=shape,
    )
    report: dict = {
        "benchmark": "train_step",
        "argv": sys.argv[1:],
        "device": args.device,
        "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else None,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "model": QWEN25_7B if seven_b else dataclasses.asdict(model_cfg),
        "trainer": config.to_dict(),
        "plan": plan(config, len(tasks)),
        "evaluator": {"backend": backend, "shape": shape},
        "injected_solutions": not args.no_inject,
        "updates": [],
    }

    t0 = time.perf_counter()
    if seven_b:
        policy = random_7b_policy(config, args.cache_dir)
        report["model_build_s"] = time.perf_counter() - t0
        report["model_path"] = None
    else:
        path = build_tiny_model(model_cfg, args.cache_dir)
        report["model_build_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        policy = load_policy(config.policy, config.lora, seed=config.seed)
        report["model_load_s"] = time.perf_counter() - t0
        report["model_path"] = str(path)
    report["parameters"] = policy.parameter_counts()
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()

    eval_cfg = EvalConfig(backend=backend, shape=shape)
    server_cfg = EnvServerConfig(eval=eval_cfg, max_sessions=max(16, args.group_size))
    t0 = time.perf_counter()
    if args.env_url:
        server_ctx = contextlib.nullcontext(SimpleNamespace(url=args.env_url, token=args.env_token,
                                                            info=lambda: fetch_server_info(args.env_url, args.env_token)))
    else:
        server_ctx = start_local_server(server_cfg, log_path=out_dir / "env_server.log", startup_timeout_s=300)
    with server_ctx as server:
        report["server_start_s"] = time.perf_counter() - t0
        report["server"] = server.info()
        counter = itertools.count()

        def factory():
            inner = KernelEnvSession(server.url, token=server.token, message_timeout_s=config.message_timeout_s)
            if not args.no_inject and next(counter) % config.group_size == 0:
                return InjectFirstTurn(inner)
            return inner

        loop = GRPOLoop(config, policy, session_factory=factory, total_updates=len(tasks))
        t0 = time.perf_counter()
        order = loop.task_order(1, tasks)
        for begin in range(0, len(order), config.rollout_groups):
            chunk = order[begin : begin + config.rollout_groups]
            if len(chunk) > 1:  # one generation batch for the chunk, as GRPOLoop.train_epoch does
                groups = collect_groups(policy, loop.sessions, chunk, config.group_size, loop.sampling(),
                                        config.max_turns, [loop.env_seed(loop.updates + j) for j in range(len(chunk))],
                                        config.env_shape)
            else:
                groups = [None]
            for j, (task_id, group) in enumerate(zip(chunk, groups, strict=True)):
                m = loop.train_group(1, task_id, group, staleness=j)
                log.info(m.summary(len(tasks)))
                row = {k: v for k, v in m.to_dict().items() if k != "samples"}
                if args.device == "cuda":
                    row["peak_gpu_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
                report["updates"].append(row)
                report["epoch_s"] = time.perf_counter() - t0
                out_file.write_text(json.dumps(report, indent=2, default=str) + "\n")
        loop.epochs_completed = 1

    rows = report["updates"]

    def med(key):
        return statistics.median(r[key] for r in rows)

    total_gen_tokens = sum(r["generation_tokens"] for r in rows)
    total_gen_s = sum(r["generation_seconds"] for r in rows)
    report["summary"] = {
        "updates": len(rows),
        "update_s_median": med("update_seconds"),
        "generation_s_median": med("generation_seconds"),
        "evaluation_s_median": med("evaluation_seconds"),
        "optimisation_s_median": med("optimisation_seconds"),
        "generation_tokens_per_s": total_gen_tokens / total_gen_s if total_gen_s else 0.0,
        "generation_tokens_total": total_gen_tokens,
        "epoch_s": report["epoch_s"],
        "statuses": dict(sum((Counter(r["status_counts"]) for r in rows), start=Counter())),
    }
    if args.device == "cuda":  # the trainer process only; evaluator workers are separate processes
        report["summary"]["peak_gpu_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
        report["summary"]["peak_gpu_reserved_gib"] = torch.cuda.max_memory_reserved() / 2**30
    out_file.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(json.dumps(report["summary"], indent=2))
    print(f"wrote {out_file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
