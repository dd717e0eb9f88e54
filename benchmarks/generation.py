"""Benchmark: rollout generation speed of each generation path, on random-weight Qwen2 models.

Models are built here from a config, with random weights, directly on the device (no download, no
tokenizer: prompts are random ids): Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14 heads, 2 KV heads,
intermediate 4864, 151936-row tied embedding) and Qwen2.5-7B's (hidden 3584, 28 layers, 28 heads,
4 KV heads, intermediate 18944, 152064-row untied embedding), bf16, LoRA r16 alpha 32 on every linear
layer (its B drawn at random, so the merged delta is not zero). Generation goes through the trainer's
own `kernelflow.train.generation.generate` with the pilot's sampling (T 0.8, top_p 1, the vocabulary
limit), one path at a time:

    unmerged   today's path: transformers generate on the unmerged PEFT model, dynamic KV cache
    merged     the adapter folded into the weights (merge.py), dynamic cache
    static     merged + static KV cache + torch.compile (CUDA graphs; static.py), cache sized once

The eos id is placed past the vocabulary limit, so it is never sampled and every row runs every step.
Each (shape, batch, new tokens, path) runs once as warm-up (the static path compiles there; its time
is reported as `warmup_s`) and then `--repeats` times measured. Reported per row, steady state:
tokens/s (rows x steps / seconds: every row produces a token at every step here), decode steps and
steps/s, ms per step, peak GPU memory. Written as JSON to `--out/generation.json` after every row (a
run cut short keeps its numbers), with a short table printed last. `--budget-s` skips the rows that
would start after that many seconds, and says so.

    python benchmarks/generation.py --quick --out "$OUT/generation"        # H200, ~5-6 min
    python benchmarks/generation.py --out "$OUT/generation" --shapes 7b --batches 4 16 --tokens 256 2048
    python benchmarks/generation.py --tiny --device cpu --out /tmp/gen      # CPU dry check
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

from kernelflow.train.config import GenerationSettings, LoraSettings, PolicyConfig  # noqa: E402
from kernelflow.train.generation import SamplingSettings, generate  # noqa: E402
from kernelflow.train.policy import Policy  # noqa: E402

SHAPES = {
    "0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
               num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=1024, tie_word_embeddings=True),
}
TOKENIZER_VOCAB = {"0.5b": 151665, "7b": 151665, "tiny": 1000}  # ids past these are padding rows
PATHS = ("unmerged", "merged", "static")


def build_policy(shape: str, device: torch.device, dtype: torch.dtype, lora_r: int = 16, seed: int = 0) -> Policy:
    """A random Qwen2 of `shape` with a LoRA adapter on every linear layer, as a trainer Policy."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, GenerationConfig, Qwen2Config

    torch.manual_seed(seed)
    limit = TOKENIZER_VOCAB[shape]
    cfg = Qwen2Config(**SHAPES[shape], max_position_embeddings=32768, rope_theta=1e6, rms_norm_eps=1e-6,
                      use_cache=True, bos_token_id=None, eos_token_id=limit, pad_token_id=limit + 1)
    with torch.device(device):
        base = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation="sdpa")
    base.generation_config = GenerationConfig(eos_token_id=[limit], pad_token_id=limit + 1)
    lora = LoraSettings(r=lora_r, alpha=2 * lora_r)
    model = get_peft_model(base, LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=0.0,
                                            target_modules=list(lora.target_modules), task_type="CAUSAL_LM"))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.01)
    model.to(device)
    model.eval()
    return Policy(
        model=model, tokenizer=None, config=PolicyConfig(source="tiny", device=str(device)), lora=lora,
        device=device, base_id=f"random-qwen2-{shape}", base_revision=None, eos_ids=(limit,), turn_end_id=limit,
        pad_id=limit + 1, vocab_limit=limit,
    )


def settings_for(path: str, context: int, compile_static: bool) -> GenerationSettings:
    if path == "unmerged":
        return GenerationSettings(merge_adapter=False)
    if path == "merged":
        return GenerationSettings(merge_adapter=True)
    return GenerationSettings(backend="static_compiled", compile=compile_static, batch_bucket=1, length_bucket=256,
                              max_context=context)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_row(policy: Policy, path: str, batch: int, new_tokens: int, prompt_len: int, repeats: int,
            warmup_tokens: int, compile_static: bool) -> dict:
    device = policy.device
    policy.runtime.clear()  # a fresh engine / merge buffers per path
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    policy.generation = settings_for(path, prompt_len + new_tokens, compile_static)
    gen = torch.Generator().manual_seed(batch * 7919 + new_tokens)
    prompts = torch.randint(0, policy.vocab_limit, (batch, prompt_len), generator=gen).tolist()
    sampling = SamplingSettings(max_new_tokens=new_tokens, do_sample=True, temperature=0.8, top_p=1.0)
    t0 = time.perf_counter()
    generate(policy, prompts, dataclasses.replace(sampling, max_new_tokens=min(warmup_tokens, new_tokens)))
    sync(device)
    warmup_s = time.perf_counter() - t0
    runs = []
    for _ in range(repeats):
        res = generate(policy, prompts, sampling)
        runs.append({"seconds": res.seconds, "decode_steps": res.decode_steps, "tokens": res.tokens})
    best = min(runs, key=lambda r: r["seconds"])
    row = {
        "path": path, "batch": batch, "new_tokens": new_tokens, "prompt_len": prompt_len, "warmup_s": warmup_s,
        "runs": runs, "seconds": best["seconds"], "decode_steps": best["decode_steps"], "tokens": best["tokens"],
        "tokens_per_s": best["tokens"] / best["seconds"], "steps_per_s": best["decode_steps"] / best["seconds"],
        "ms_per_step": 1000 * best["seconds"] / max(best["decode_steps"], 1),
        "all_steps_ran": best["decode_steps"] == new_tokens and best["tokens"] == batch * new_tokens,
    }
    engine = policy.runtime.get("static_engine")
    if engine is not None:
        row["static_cache"] = {"rows": engine.rows, "positions": engine.cache_len, "allocations": engine.allocations}
    if device.type == "cuda":
        row["peak_gpu_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    policy.runtime.clear()
    return row


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for generation.json")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--tiny", action="store_true", help="the tiny shape only (CPU dry check)")
    p.add_argument("--quick", action="store_true",
                   help="7b and 0.5b, batch 16, 256 new tokens, every path (one H200 command, ~5-6 min)")
    p.add_argument("--shapes", nargs="*", default=["0.5b", "7b"], choices=sorted(SHAPES))
    p.add_argument("--batches", nargs="*", type=int, default=[4, 16])
    p.add_argument("--tokens", nargs="*", type=int, default=[256, 2048])
    p.add_argument("--paths", nargs="*", default=list(PATHS), choices=PATHS)
    p.add_argument("--prompt-len", type=int, default=512, help="prompt ids per row")
    p.add_argument("--repeats", type=int, default=1, help="measured runs per row after the warm-up (best kept)")
    p.add_argument("--warmup-tokens", type=int, default=16, help="new tokens of the warm-up run")
    p.add_argument("--dtype", default=None, help="bfloat16 (default on cuda) or float32 (default on cpu)")
    p.add_argument("--no-compile", action="store_true", help="the static path without torch.compile")
    p.add_argument("--budget-s", type=float, default=None, help="start no row after this many seconds")
    args = p.parse_args(argv)
    if args.quick:
        args.shapes, args.batches, args.tokens = ["7b", "0.5b"], [16], [256]
        args.budget_s = args.budget_s or 420.0
    if args.tiny:
        args.shapes = ["tiny"]
    return args


def table(rows: list[dict]) -> str:
    lines = [f"{'shape':6} {'path':9} {'batch':>5} {'new':>5} {'tok/s':>9} {'steps/s':>8} {'ms/step':>8} "
             f"{'warmup s':>9} {'peak GiB':>9}"]
    for r in rows:
        if "skipped" in r:
            lines.append(f"{r['shape']:6} {r['path']:9} {r['batch']:>5} {r['new_tokens']:>5}  skipped: {r['skipped']}")
            continue
        mem = f"{r['peak_gpu_memory_gib']:.1f}" if "peak_gpu_memory_gib" in r else "-"
        lines.append(f"{r['shape']:6} {r['path']:9} {r['batch']:>5} {r['new_tokens']:>5} {r['tokens_per_s']:>9.1f} "
                     f"{r['steps_per_s']:>8.1f} {r['ms_per_step']:>8.2f} {r['warmup_s']:>9.1f} {mem:>9}")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda but no CUDA device is visible; use --device cpu --tiny for a dry check", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[
        args.dtype or ("bfloat16" if device.type == "cuda" else "float32")]
    compile_static = not args.no_compile and device.type == "cuda"  # inductor on CPU: too slow to be useful here
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    out_file = out_dir / "generation.json"
    import peft
    import transformers

    report = {
        "benchmark": "generation", "argv": sys.argv[1:], "device": args.device,
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
                     "python": platform.python_version()},
        "dtype": str(dtype).removeprefix("torch."), "lora_r": 16, "sampling": {"temperature": 0.8, "top_p": 1.0},
        "static_compiled": compile_static, "rows": [],
    }
    start = time.perf_counter()
    for shape in args.shapes:
        t0 = time.perf_counter()
        policy = build_policy(shape, device, dtype)
        build_s = time.perf_counter() - t0
        params = sum(p.numel() for p in policy.model.parameters())
        print(f"{shape}: {params / 1e6:.1f}M parameters built in {build_s:.1f} s", flush=True)
        for batch in args.batches:
            for new_tokens in args.tokens:
                for path in args.paths:
                    base = {"shape": shape, "parameters": params, "path": path, "batch": batch, "new_tokens": new_tokens}
                    elapsed = time.perf_counter() - start
                    if args.budget_s is not None and elapsed > args.budget_s:
                        row = {**base, "skipped": f"budget: {elapsed:.0f} s > {args.budget_s:.0f} s"}
                    else:
                        row = {**base, **run_row(policy, path, batch, new_tokens, args.prompt_len, args.repeats,
                                                 args.warmup_tokens, compile_static)}
                        print(f"  {path:9} batch {batch:>2} x {new_tokens} tokens: {row['tokens_per_s']:.1f} tok/s "
                              f"({row['decode_steps']} steps, warm-up {row['warmup_s']:.1f} s)", flush=True)
                    report["rows"].append(row)
                    report["elapsed_s"] = time.perf_counter() - start
                    out_file.write_text(json.dumps(report, indent=2) + "\n")
        del policy
        if device.type == "cuda":
            torch.cuda.empty_cache()
    print(f"wrote {out_file}")
    print(table(report["rows"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
