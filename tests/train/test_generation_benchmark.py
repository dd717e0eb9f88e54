"""benchmarks/generation.py --tiny on CPU: every path runs every step and the JSON says what it measured.

Covers the script's plumbing (model build, the three paths through the trainer's generate, the
report and the budget skip), not its speed: timings on this CPU mean nothing and are not asserted.
"""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_generation_benchmark_runs_every_path_on_the_tiny_shape(tmp_path):
    out = tmp_path / "gen"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "generation.py"), "--tiny", "--device", "cpu", "--out", str(out),
           "--batches", "2", "--tokens", "6", "--prompt-len", "24", "--warmup-tokens", "2"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / "generation.json").read_text())
    rows = report["rows"]
    assert [r["path"] for r in rows] == ["unmerged", "merged", "static"]
    for r in rows:
        assert r["shape"] == "tiny" and r["batch"] == 2 and r["new_tokens"] == 6
        assert r["all_steps_ran"] and r["decode_steps"] == 6 and r["tokens"] == 12
        assert r["tokens_per_s"] > 0 and r["steps_per_s"] > 0
    # 24 prompt ids pad to one 256-bucket, + 6 new = 262 positions, rounded up to 512; allocated once, at warm-up
    assert rows[-1]["static_cache"] == {"rows": 2, "positions": 512, "allocations": 1}
    assert report["versions"]["transformers"] and report["static_compiled"] is False
    assert "tok/s" in done.stdout.splitlines()[-4]  # the table is printed last

    skipped = subprocess.run([*cmd[:-6], "--tokens", "4", "--budget-s", "0", "--paths", "merged"], cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
    assert skipped.returncode == 0, skipped.stderr[-3000:]
    assert "budget" in json.loads((out / "generation.json").read_text())["rows"][0]["skipped"]
