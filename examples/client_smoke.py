"""Smoke test of a running kernelflow environment server: one honest Triton ReLU must be judged correct.

    kernelflow serve --port 8000 &                     # or a Docker container on a GPU host
    python examples/client_smoke.py --url http://127.0.0.1:8000 [--shape full] [--min-reward 2.7]

It prints the server's settings, resets an episode of 19_ReLU, writes the prompt the model would see
to task_prompt.txt in the --out directory (default: a new temporary directory, never the current
one) and prints that path, submits the ReLU below (masked, int64 offsets, so it is right at every shape),
prints the verdict, and exits 0 only if the verdict is correct (and, with --min-reward, earns at
least that reward; on an H200 with --shape full it should earn more than 2.7). Exit codes: 0 pass,
1 the verdict failed, 2 the server could not be used. The token, if the server needs one, comes
from --token or $KERNELFLOW_ENV_TOKEN.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from kernelflow.env.client import EnvServerError, EnvUnavailableError, KernelEnvSession, fetch_server_info

RELU_ANSWER = '''```python
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_SIZE = 1024  # 8 fp32 per thread at 4 warps: the fastest of 14 block/warp pairs tried on an H200


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    # int64 offsets: the full shape has 1.6e9 elements, past int32
    pid = tl.program_id(axis=0).to(tl.int64)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, BLOCK_SIZE),)](x, out, n, BLOCK_SIZE=BLOCK_SIZE, num_warps=4)
        return out
```'''


def output_dir(out: str | None) -> Path:
    """Where the prompt goes: `out` (created if missing), else a fresh temporary directory, never the cwd."""
    if out is None:
        return Path(tempfile.mkdtemp(prefix="kernelflow_client_smoke_"))
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the server's base URL")
    parser.add_argument("--shape", choices=["small", "full"], default=None, help="shape profile (server default)")
    parser.add_argument("--seed", type=int, default=0, help="the episode's input seed (default: 0)")
    parser.add_argument("--token", default=None, help="access token (default: $KERNELFLOW_ENV_TOKEN)")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="directory for task_prompt.txt (default: a new temporary directory)")
    parser.add_argument("--min-reward", type=float, default=None, help="also require at least this reward")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the verdict")
    args = parser.parse_args(argv)

    try:
        info = fetch_server_info(args.url, token=args.token)
        keys = ("evaluator_version", "backend", "device", "config_hash", "max_turns", "gamma")
        print(f"server: {json.dumps({k: info.get(k) for k in keys})}")
        with KernelEnvSession(args.url, token=args.token, message_timeout_s=args.timeout) as session:
            first = session.reset("19_ReLU", seed=args.seed, shape=args.shape)
            prompt_file = output_dir(args.out) / "task_prompt.txt"
            prompt_file.write_text(first.prompt or "")
            print(f"prompt: {len(first.prompt or '')} characters written to {prompt_file}")
            obs = session.step(RELU_ANSWER)
    except (EnvUnavailableError, EnvServerError, TimeoutError) as exc:
        print(f"client_smoke: {exc}", file=sys.stderr)
        return 2

    verdict = obs.verdict or {}
    summary = {k: verdict.get(k) for k in ("task_id", "status", "correct", "reward", "shape", "backend", "device",
                                           "runtime_ms", "t_min_ms", "roofline_fraction", "speedup_vs_eager")}
    print(f"verdict: {json.dumps(summary)}")
    if not obs.correct:
        print(f"client_smoke: FAIL, the honest ReLU was judged {obs.status}:\n{obs.feedback}", file=sys.stderr)
        return 1
    if args.min_reward is not None and (obs.reward or 0.0) < args.min_reward:
        print(f"client_smoke: FAIL, reward {obs.reward} is below --min-reward {args.min_reward}", file=sys.stderr)
        return 1
    print(f"client_smoke: PASS (reward {obs.reward})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
