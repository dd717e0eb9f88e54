"""Probe, on a GPU host, the two things evaluator v2's trust boundary rests on (issue #17).

1. Which OS isolation mechanisms work together with CUDA and CUDA IPC: a child process as another
   UID (setpriv), in a network namespace (unshare --net), under Landlock (writes only in its own
   directory and /dev/shm) and seccomp (pyseccomp), and in a PID namespace (expected to break
   legacy CUDA IPC). For each variant: can the child map the judge's shared buffer, compile and
   launch a Triton kernel, record an inter-process event the judge waits on.
2. Judge-side timing: the judge gates the child's work behind an inter-process event it records
   after a GPU spin, and times from its own event before the gate to its own event after waiting
   for the child's "done" event (nothing the child's Python can reach takes part in the figure).
   Compared with today's in-worker CUDA-event timing, for a ReLU at the full KernelBench shape
   (4096 x 393216 fp32, ~3 ms) and a GELU at 8192 x 8192 (~0.13 ms), and an empty call (overhead).

Self-contained on purpose (a one-off measurement whose results are in docs/evaluator.md); it does
not import kernelflow. Usage: python benchmarks/probes/trust_probe.py --out DIR [--calls 20]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
import traceback
from multiprocessing.connection import Connection

RELU_SHAPE = (4096, 393216)
GELU_SHAPE = (8192, 8192)
SPIN_CYCLES = 2_000_000  # ~1 ms at 1.98 GHz (+ the input copy): covers both host hops of a gated call


# ---------------------------------------------------------------- child ------------------------------
def _landlock(workdir: str) -> str:
    libc = ctypes.CDLL(None, use_errno=True)
    abi = libc.syscall(444, None, 0, 1)
    if abi < 1:
        return f"unavailable ({abi})"
    write_bits = (1 << 1) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) \
        | (1 << 11) | (1 << 12) | ((1 << 13) if abi >= 2 else 0) | ((1 << 14) if abi >= 3 else 0)

    class Ruleset(ctypes.Structure):
        _fields_ = [("handled_access_fs", ctypes.c_uint64)]

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    attr = Ruleset(write_bits)
    fd = libc.syscall(444, ctypes.byref(attr), ctypes.sizeof(attr), 0)
    if fd < 0:
        return f"create failed errno {ctypes.get_errno()}"
    for path, bits in ((workdir, write_bits), ("/dev/shm", write_bits), ("/dev", 1 << 1)):
        pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        rule = PathBeneath(bits, pfd)
        if libc.syscall(445, fd, 1, ctypes.byref(rule), 0) != 0:
            return f"add_rule {path} failed errno {ctypes.get_errno()}"
        os.close(pfd)
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    if libc.syscall(446, fd, 0) != 0:
        return f"restrict_self failed errno {ctypes.get_errno()}"
    return f"abi {abi}"


def _seccomp() -> str:
    try:
        import pyseccomp as sc
    except Exception as exc:  # noqa: BLE001
        return f"pyseccomp unavailable: {exc}"
    f = sc.SyscallFilter(defaction=sc.ALLOW)
    denied = ["ptrace", "process_vm_readv", "process_vm_writev", "setsid", "setpgid", "socket", "mount",
              "unshare", "setns", "bpf", "perf_event_open", "keyctl", "userfaultfd", "kcmp"]
    for name in denied:
        try:
            f.add_rule(sc.ERRNO(1), name)
        except Exception:  # noqa: BLE001
            pass
    f.load()
    return "loaded"


def child(fd: int, lockdown: bool) -> None:
    conn = Connection(fd)
    info: dict = {"uid": os.getuid(), "pid": os.getpid()}
    try:
        import torch
        import triton
        import triton.language as tl
        from torch.multiprocessing.reductions import reduce_tensor

        torch.cuda.init()
        dev = torch.device("cuda", 0)
        torch.cuda.set_device(dev)
        l2 = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
        if lockdown:
            info["landlock"] = _landlock(os.environ["HOME"])
            info["seccomp"] = _seccomp()
            try:
                socket.socket()
                info["socket_after_seccomp"] = "allowed"
            except OSError as exc:
                info["socket_after_seccomp"] = f"denied ({exc.errno})"
            try:
                open("/etc/kf_probe_write", "w").close()
                info["write_outside"] = "allowed"
            except OSError as exc:
                info["write_outside"] = f"denied ({exc.errno})"
            try:
                os.setsid()
                info["setsid"] = "allowed"
            except OSError as exc:
                info["setsid"] = f"denied ({exc.errno})"
        for what in ("environ", "mem"):  # the judge's secrets: readable from here?
            try:
                with open(f"/proc/{os.getppid()}/{what}", "rb") as fh:
                    fh.read(16)
                info[f"judge_{what}"] = "READABLE"
            except OSError as exc:
                info[f"judge_{what}"] = f"denied ({exc.errno})"

        @triton.jit
        def relu_k(x, y, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            m = offs < n
            v = tl.load(x + offs, mask=m)
            tl.store(y + offs, tl.maximum(v, 0.0), mask=m)

        @triton.jit
        def gelu_k(x, y, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            m = offs < n
            v = tl.load(x + offs, mask=m)
            z = 0.7978845608028654 * (v + 0.044715 * v * v * v)
            t = 2.0 / (1.0 + tl.exp(-2.0 * z)) - 1.0
            tl.store(y + offs, 0.5 * v * (1.0 + t), mask=m)

        kernels = {"relu": relu_k, "gelu": gelu_k}
        msg = conn.recv()  # ("setup", {name: shared input tensor}, G handle, B handle)
        _, inputs, g_handle, b_handle = msg
        gate = torch.cuda.Event.from_ipc_handle(dev, g_handle)
        done = torch.cuda.Event.from_ipc_handle(dev, b_handle)
        info["mapped"] = {k: list(v.shape) for k, v in inputs.items()}

        def launch(name):
            if name == "empty":
                return None
            x = inputs[name]
            y = torch.empty_like(x)
            n = x.numel()
            kernels[name][(triton.cdiv(n, 4096),)](x, y, n, BLOCK=4096)
            return y

        for name in ("relu", "gelu"):  # compile outside any timing
            launch(name)
        torch.cuda.synchronize()
        info["compiled"] = True
        conn.send(("ready", info))
        while True:
            op, name = conn.recv()
            if op == "exit":
                break
            if op == "gated":
                torch.cuda.current_stream().wait_event(gate)
                y = launch(name)
                done.record()
                conn.send(("queued", reduce_tensor(y) if y is not None else None))
            elif op == "inchild":  # today's protocol, in the worker
                l2.zero_()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                torch.cuda._sleep(2_000_000)
                start.record()
                y = launch(name)
                torch.cuda.synchronize()
                end.record()
                end.synchronize()
                conn.send(("timed", start.elapsed_time(end)))
    except Exception:  # noqa: BLE001
        info["error"] = traceback.format_exc()[-1500:]
        try:
            conn.send(("failed", info))
        except Exception:  # noqa: BLE001
            pass


# ---------------------------------------------------------------- judge ------------------------------
def spawn(prefix: list[str], lockdown: bool, workroot: str, uid: int | None):
    a, b = socket.socketpair()
    home = os.path.join(workroot, f"w{len(os.listdir(workroot))}")
    os.makedirs(home)
    if uid is not None:
        os.chown(home, uid, uid)
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LD_LIBRARY_PATH", "CUDA_HOME", "PYTHONPATH")}
    env.update(HOME=home, TMPDIR=home, TRITON_CACHE_DIR=os.path.join(home, "tc"), PYTHONDONTWRITEBYTECODE="1")
    script = os.path.join(workroot, "trust_probe.py")
    cmd = prefix + [sys.executable, script, "--child", str(b.fileno())] + (["--lockdown"] if lockdown else [])
    proc = subprocess.Popen(cmd, pass_fds=(b.fileno(),), env=env, cwd=home, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    b.close()
    return proc, Connection(a.detach())


def run_variant(name, prefix, lockdown, workroot, uid, inputs, stages, refs, calls, timing):
    import torch
    from torch.multiprocessing.reductions import rebuild_cuda_tensor  # noqa: F401  (registers)

    res: dict = {"variant": name}
    proc, conn = spawn(prefix, lockdown, workroot, uid)
    try:
        gate = torch.cuda.Event(interprocess=True)
        done = torch.cuda.Event(interprocess=True)
        conn.send(("setup", inputs, gate.ipc_handle(), done.ipc_handle()))
        if not conn.poll(240):
            raise TimeoutError("child did not answer in 240 s")
        kind, info = conn.recv()
        res["child"] = info
        if kind != "ready":
            res["ok"] = False
            return res
        res["ok"] = True
        if not timing:
            gate.record()
            conn.send(("gated", "relu"))  # one gated call: does the event gate work here?
            _, red = conn.recv()
            torch.cuda.current_stream().wait_event(done)
            fn, args = red
            out = fn(*args)
            res["gated_relu_correct"] = bool(torch.equal(out, torch.relu(inputs["relu"])))
            return res
        l2 = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
        for kname in ("empty", "gelu", "relu"):
            gated, late, wrong = [], 0, 0
            for i in range(calls):
                x = inputs.get(kname)
                l2.zero_()
                torch.cuda._sleep(SPIN_CYCLES)
                if x is not None:  # fresh inputs land last: nothing can start on them before the gate
                    x.copy_(stages[kname][i % 2])
                a = torch.cuda.Event(enable_timing=True)
                a.record()
                gate.record()
                conn.send(("gated", kname))
                _, red = conn.recv()
                if a.query():
                    late += 1
                torch.cuda.current_stream().wait_event(done)
                c = torch.cuda.Event(enable_timing=True)
                c.record()
                if red is not None:
                    fn, args = red
                    out = fn(*args)
                    got = out.clone()
                c.synchronize()
                gated.append(a.elapsed_time(c))
                if red is not None:
                    torch.cuda.synchronize()
                    ref = refs[kname][i % 2]
                    if not torch.allclose(got, ref, atol=1e-5, rtol=1e-5):
                        wrong += 1
                    del out, got
            inchild = []
            for i in range(calls):
                x = inputs.get(kname)
                if x is not None:
                    x.copy_(stages[kname][i % 2])
                torch.cuda.synchronize()
                conn.send(("inchild", kname))
                inchild.append(conn.recv()[1])
            res[kname] = {"gated_median_ms": statistics.median(gated), "gated_min_ms": min(gated),
                          "gated_max_ms": max(gated), "late_gates": late, "wrong_outputs": wrong,
                          "inchild_median_ms": statistics.median(inchild), "inchild_min_ms": min(inchild),
                          "inchild_max_ms": max(inchild)}
        return res
    except Exception:  # noqa: BLE001
        res["ok"] = False
        res["error"] = traceback.format_exc()[-1500:]
        return res
    finally:
        try:
            conn.send(("exit", None))
        except Exception:  # noqa: BLE001
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        res["child_output"] = (proc.stdout.read() or b"").decode(errors="replace")[-1500:]


def facts() -> dict:
    libc = ctypes.CDLL(None, use_errno=True)
    out = {"uname": os.uname().release, "uid": os.getuid(), "python": sys.version.split()[0],
           "landlock_abi": libc.syscall(444, None, 0, 1),
           "unshare": shutil.which("unshare"), "setpriv": shutil.which("setpriv")}
    try:
        out["libseccomp"] = subprocess.run(["sh", "-c", "ldconfig -p | grep seccomp"], capture_output=True,
                                           text=True).stdout.strip()
        out["dev_nvidia"] = subprocess.run(["sh", "-c", "ls -l /dev/nvidia*"], capture_output=True,
                                           text=True).stdout.strip()
        out["unshare_net"] = subprocess.run(["unshare", "--net", "true"]).returncode
    except Exception as exc:  # noqa: BLE001
        out["facts_error"] = repr(exc)
    import torch
    import triton

    out.update(torch=torch.__version__, triton=triton.__version__, gpu=torch.cuda.get_device_name(0))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", type=int)
    ap.add_argument("--lockdown", action="store_true")
    ap.add_argument("--out", default=".")
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args()
    if args.child is not None:
        child(args.child, args.lockdown)
        os._exit(0)
    import torch

    os.makedirs(args.out, exist_ok=True)
    workroot = "/tmp/kf_trust_probe"
    shutil.rmtree(workroot, ignore_errors=True)
    os.makedirs(workroot)
    os.chmod(workroot, 0o755)
    shutil.copy(__file__, os.path.join(workroot, "trust_probe.py"))
    os.chmod(os.path.join(workroot, "trust_probe.py"), 0o644)
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "facts": facts(), "variants": []}
    print(json.dumps(report["facts"], indent=1), flush=True)
    g = torch.Generator(device="cuda").manual_seed(0)
    stages = {k: [torch.randn(s, device="cuda", generator=g) * 3 for _ in range(2)]
              for k, s in (("relu", RELU_SHAPE), ("gelu", GELU_SHAPE))}
    refs = {"relu": [torch.relu(s) for s in stages["relu"]],
            "gelu": [torch.nn.functional.gelu(s, approximate="tanh") for s in stages["gelu"]]}
    inputs = {k: torch.empty_like(v[0]) for k, v in stages.items()}
    for k in inputs:
        inputs[k].copy_(stages[k][0])
    torch.cuda.synchronize()
    nocaps = ["setpriv", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
    netns = ["unshare", "--net", "--"]
    variants = [
        ("plain", [], False, None, False, False),
        ("nocaps", nocaps, False, None, False, False),
        ("netns", netns, False, None, False, False),
        ("nondumpable_judge", [], False, None, False, True),
        ("nocaps_nondumpable_judge", nocaps, False, None, False, True),
        ("netns_nocaps_lockdown_nondumpable", netns + nocaps, True, None, True, True),
        ("netns_nocaps_lockdown", netns + nocaps, True, None, True, False),
    ]
    libc = ctypes.CDLL(None, use_errno=True)
    for name, prefix, lockdown, vuid, timing, nondump in variants:
        libc.prctl(4, 0 if nondump else 1, 0, 0, 0)  # PR_SET_DUMPABLE
        t0 = time.monotonic()
        r = run_variant(name, prefix, lockdown, workroot, vuid, inputs, stages, refs, args.calls, timing)
        r["wall_s"] = round(time.monotonic() - t0, 2)
        report["variants"].append(r)
        print(json.dumps({k: v for k, v in r.items() if k != "child_output"}, default=str)[:3000], flush=True)
        with open(os.path.join(args.out, "trust_probe.json"), "w") as fh:
            json.dump(report, fh, indent=1, default=str)
    print("\nvariant                      ok   relu gated/inchild ms   gelu gated/inchild ms   empty gated ms  late")
    for r in report["variants"]:
        def cell(k, r=r):
            d = r.get(k)
            return f"{d['gated_median_ms']:.4f}/{d['inchild_median_ms']:.4f}" if d else "-"
        late = sum(r[k]["late_gates"] for k in ("empty", "gelu", "relu") if k in r)
        empty = f"{r['empty']['gated_median_ms']:.4f}" if "empty" in r else "-"
        print(f"{r['variant']:28s} {str(r.get('ok')):5s} {cell('relu'):22s} {cell('gelu'):22s} {empty:14s} {late}")


if __name__ == "__main__":
    main()
