"""OS isolation of the worker (kernelflow/eval/sandbox/policy.py): levels, mechanisms, and the attacks they stop.

Fast tests check the level table, the config and the server's refusal, and apply Landlock and the
seccomp filter in throwaway subprocesses. The `slow` ones start a judge in a subprocess (so its
environment holds a secret from its first instruction, as a real judge's tokens would), with a victim
process, a UDP listener and a cache dir beside it, and judge every `iso_*` fixture under the
interpreter at the full level and at `network` (the mechanisms the CUDA backend gets). Each must end
in its declared status with reward 0, and its effect must not have happened: the secret is in no
verdict, nothing was planted, the victim lives, no datagram arrived, no process survives.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from kernelflow.eval.config import EvalConfig
from kernelflow.eval.sandbox import policy as isolation
from kernelflow.eval.sandbox.policy import (
    BACKEND_MECHANISMS,
    LEVEL_MECHANISMS,
    LEVELS,
    IsolationError,
    Resolved,
    ceiling,
    check_minimum,
    level_of,
    plan_worker,
    resolve,
)

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "fixtures" / "adversarial"
ISO_FIXTURES = sorted(CORPUS.glob("iso_*.py"))
SECRET = "KF_ISO_SECRET=s3cr3t-" + os.urandom(6).hex()
UDP_PORT = 47391  # where iso_network_socket.py sends its datagram
HOST = isolation.host_mechanisms()
HERE = resolve("interpret").level  # this host's interpreter level ("network" where Python is under a 0700 home)


def needs(*mechanisms: str):
    lacking = {m: HOST[m] for m in mechanisms if HOST[m] is not None}
    return pytest.mark.skipif(bool(lacking), reason=f"host lacks {lacking}")


# Where this host's Python is unreadable by other UIDs (pyenv under /root), the system's Python of the
# same minor version, with our venv's packages on its path, is: it runs the judge at level "full".
SITE = next((p for p in sys.path if p.endswith("site-packages")), "")
SYSTEM_PY = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
OWN_UID_PY = sys.executable if HOST["uid"] is None else (SYSTEM_PY if os.path.exists(SYSTEM_PY) else None)


needs_all = needs("no_new_privs", "no_caps", "landlock", "seccomp", "netns")

# The judge: one evaluator, every fixture given on the command line; prints the verdicts as JSON.
JUDGE = textwrap.dedent('''
    import json, sys
    from kernelflow.eval import EvalConfig, Evaluator
    kw = json.loads(sys.argv[1])
    ev = Evaluator(EvalConfig(backend="interpret", seeds=1, timed_runs=1, check_odd_shape=False,
                              check_determinism=False, static_checks=False, verdict_cache_size=0,
                              timeout_s=90, **kw))
    out = []
    for path in sys.argv[2:]:
        v = ev.evaluate("19_ReLU", open(path).read())
        out.append({"path": path, "status": v.status, "reward": v.reward, "feedback": v.feedback,
                    "checks": {k: c.why for k, c in v.checks.items()}, "isolation": getattr(v, "isolation", None)})
    print("VERDICTS:" + json.dumps(out))
''')


# ---- the level table ------------------------------------------------------------------------------
def test_levels_are_a_chain_and_each_backend_has_a_ceiling():
    for lower, higher in zip(LEVELS, LEVELS[1:], strict=False):
        assert set(LEVEL_MECHANISMS[lower]) < set(LEVEL_MECHANISMS[higher])
    assert LEVEL_MECHANISMS["full"] == tuple(isolation.MECHANISMS) or set(LEVEL_MECHANISMS["full"]) == set(isolation.MECHANISMS)
    assert ceiling("interpret") == "full"
    assert ceiling("cuda") == "network"  # no PID namespace (CUDA IPC), no own UID (0600 IPC refcount files)
    assert "pidns" not in BACKEND_MECHANISMS["cuda"]
    assert level_of(["netns", "uid", "pidns"]) == "none"  # namespaces alone are not a level without the process set


def test_explicit_level_needs_every_mechanism(monkeypatch):
    lacking = dict(isolation.host_mechanisms(), landlock="no Landlock in this test")
    monkeypatch.setattr(isolation, "host_mechanisms", lambda: lacking)
    with pytest.raises(IsolationError, match="landlock: no Landlock in this test"):
        resolve("interpret", "process")
    auto = resolve("interpret", "auto")
    assert auto.level == "none" and "landlock" in auto.missing  # degraded, and says so
    assert "missing here: landlock" in auto.describe()
    with pytest.raises(IsolationError, match="cannot use"):
        resolve("cuda", "full")
    assert resolve("interpret", "none").mechanisms == ()


def test_check_minimum_names_what_is_missing():
    check_minimum("full", None, "interpret")
    check_minimum("network", None, "cuda")
    check_minimum("process", "process", "interpret")
    with pytest.raises(IsolationError, match=r"below the required 'full'.*pidns: no user namespaces.*min_isolation"):
        check_minimum("user", "full", "interpret", {"pidns": "no user namespaces"})
    assert isolation.default_minimum("interpret") == HERE and isolation.default_minimum("cuda") in ("network", HERE)


def test_config_validates_the_isolation_fields():
    assert EvalConfig().isolation == "auto" and EvalConfig().min_isolation is None
    EvalConfig(isolation="network", min_isolation="process")
    with pytest.raises(ValueError, match="isolation='strong'"):
        EvalConfig(isolation="strong")
    with pytest.raises(ValueError, match="min_isolation='all'"):
        EvalConfig(min_isolation="all")
    assert "min_isolation" not in EvalConfig().judging_dict() and "isolation" in EvalConfig().judging_dict()


def test_each_worker_gets_a_fresh_unprivileged_uid(tmp_path):
    resolved = Resolved("interpret", "auto", isolation.MECHANISMS)  # the plan, whatever this host has
    a, b = plan_worker(resolved, str(tmp_path)), plan_worker(resolved, str(tmp_path))
    assert a.uid != b.uid and all(isolation.UID_RANGE[0] <= p.uid < isolation.UID_RANGE[1] for p in (a, b))
    assert f"--reuid={a.uid}" in a.prefix and "--clear-groups" in a.prefix and "--bounding-set=-all" in a.prefix
    assert "--pid" in a.prefix and "--net" in a.prefix and a.prefix[-4:-2] == ("/bin/sh", "-c")  # PID 1 is a shell
    assert a.self_setup["landlock"]["dirs"][0] == str(tmp_path)
    cuda = plan_worker(Resolved("cuda", "auto", tuple(m for m in isolation.MECHANISMS if m in BACKEND_MECHANISMS["cuda"])),
                       str(tmp_path))
    assert cuda.uid is None and "--pid" not in cuda.prefix and "--net" in cuda.prefix
    assert "/dev/shm" in cuda.self_setup["landlock"]["dirs"]
    # CUDA's initialisation fails under Landlock (H200): there it comes after the warm-up, not at the start.
    assert cuda.self_setup["landlock"]["late"] and not a.self_setup["landlock"]["late"]
    assert "/dev" in cuda.self_setup["landlock"]["files"]


def test_landlock_marked_late_is_applied_by_confine_late_not_early(tmp_path):
    """In a subprocess: a late rule set leaves the early step unconfined and confines at the late one."""
    code = (
        "import os, sys\n"
        "from kernelflow.eval.sandbox.confine import confine_early, confine_late\n"
        f"setup = {{'no_new_privs': True, 'landlock': {{'dirs': [{str(tmp_path)!r}], 'files': [], 'late': True}}, "
        "'seccomp': None}\n"
        "early = confine_early(setup)\n"
        "open('/tmp/kf_late_probe', 'w').close(); os.unlink('/tmp/kf_late_probe')  # still allowed\n"
        "late = confine_late(setup)\n"
        "try:\n"
        "    open('/tmp/kf_late_probe', 'w')\n"
        "    print(early, late, 'WROTE')\n"
        "except OSError:\n"
        "    print(early, late, 'DENIED')\n"
    )
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["['no_new_privs']", "['landlock']", "DENIED"], out.stdout


def test_evaluator_reports_its_level_and_the_judge_is_not_dumpable():
    import ctypes

    from kernelflow.eval import Evaluator

    ev = Evaluator(EvalConfig(backend="interpret", verdict_cache_size=0))
    info = ev.info()
    assert info["isolation"] == ev.isolation.level and info["isolation_mechanisms"] == list(ev.isolation.mechanisms)
    assert info["isolation"] == HERE
    verdict = ev.evaluate("19_ReLU", "no code here")
    assert verdict.isolation == info["isolation"] and verdict.checks["isolation"].passed
    assert ctypes.CDLL(None).prctl(3, 0, 0, 0, 0) == 0  # PR_GET_DUMPABLE


def test_server_refuses_to_start_below_the_minimum():
    from kernelflow.env.config import EnvServerConfig
    from kernelflow.env.server.app import create_kernel_app

    class Weak:
        closed = False

        def info(self):
            return {"backend": "interpret", "isolation": "process", "min_isolation": "full",
                    "isolation_missing": {"uid": "the judge does not run as root"}}

        def close(self):
            Weak.closed = True

    with pytest.raises(IsolationError, match="uid: the judge does not run as root"):
        create_kernel_app(EnvServerConfig(), evaluator=Weak())
    assert Weak.closed


# ---- the mechanisms, each in a throwaway process --------------------------------------------------
def _run_py(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}  # one thread, as in a worker
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=60)


@needs("no_new_privs", "landlock")
def test_landlock_allows_writes_only_in_the_worker_dir(tmp_path):
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    inside.mkdir()
    outside.mkdir()
    r = _run_py(f'''
        import os
        from kernelflow.eval.sandbox.confine import confine_early
        confine_early({{"no_new_privs": True, "landlock": {{"dirs": ["{inside}"], "files": ["/dev/null"]}}}})
        open("{inside}/a", "w").write("ok"); os.rename("{inside}/a", "{inside}/b"); os.mkdir("{inside}/d")
        open("/dev/null", "w").write("ok")
        for path in ("{outside}/x", "{REPO}/kernelflow/_iso_probe.py"):
            try:
                open(path, "w")
                print("WROTE", path)
            except PermissionError:
                print("DENIED", path)
        open("{REPO}/kernelflow/__init__.py").read()  # reads stay open
    ''')
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("DENIED") == 2 and "WROTE" not in r.stdout
    assert (inside / "b").exists() and not list(outside.iterdir())


@needs("no_new_privs", "seccomp")
def test_seccomp_denies_the_listed_calls_and_keeps_fork_exec():
    r = _run_py('''
        import ctypes, os, socket, subprocess
        from kernelflow.eval.sandbox.confine import confine_early, confine_late
        setup = {"no_new_privs": True, "seccomp": {"allow_sockets": False, "allow_processes": True}}
        confine_early(setup); confine_late(setup)
        def denied(fn):
            try:
                fn()
                return "allowed"
            except OSError as e:
                return e.errno
        libc = ctypes.CDLL(None, use_errno=True)
        print("socket", denied(lambda: socket.socket()))
        print("socketpair", denied(lambda: socket.socketpair()))
        print("setsid", denied(os.setsid))
        print("setpgid", denied(lambda: os.setpgid(0, 0)))
        print("unshare", libc.unshare(0x40000000), ctypes.get_errno())
        print("ptrace", libc.ptrace(0x4206, os.getppid(), None, None), ctypes.get_errno())
        print("exec", subprocess.run(["true"]).returncode)
    ''')
    assert r.returncode == 0, r.stderr
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines())
    for name in ("socket", "socketpair", "setsid", "setpgid"):
        assert lines[name] == "1", (name, lines)  # EPERM
    assert lines["unshare"] == "-1 1" and lines["ptrace"] == "-1 1" and lines["exec"] == "0"


@needs("no_new_privs", "seccomp")
def test_seccomp_without_processes_refuses_fork_and_exec_but_keeps_threads():
    # the interpreter backend's setting (BACKEND_PROCESSES_ALLOWED): a child process is work the guard never sees
    r = _run_py('''
        import os, subprocess, threading
        from kernelflow.eval.sandbox.confine import confine_early, confine_late
        setup = {"no_new_privs": True, "seccomp": {"allow_sockets": False, "allow_processes": False}}
        confine_early(setup); confine_late(setup)
        def denied(fn):
            try:
                fn()
                return "allowed"
            except OSError as e:
                return e.errno
        print("fork", denied(os.fork))
        print("exec", denied(lambda: subprocess.run(["true"])))
        print("execv", denied(lambda: os.execv("/bin/true", ["true"])))
        box = []
        t = threading.Thread(target=lambda: box.append(sum(range(10))))
        t.start(); t.join()
        print("thread", box[0])
    ''')
    assert r.returncode == 0, r.stderr
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines())
    assert lines["fork"] == "1" and lines["exec"] == "1" and lines["execv"] == "1", lines  # EPERM
    assert lines["thread"] == "45"


def test_only_the_interpreter_worker_is_denied_new_processes():
    assert isolation.BACKEND_PROCESSES_ALLOWED == {"interpret": False, "cuda": True}


# ---- the attacks, judged end to end ---------------------------------------------------------------
def _victim() -> subprocess.Popen:
    return subprocess.Popen(["kf-iso-victim", "600"], executable="/bin/sleep", start_new_session=True)


def _marked(marker: bytes) -> list[int]:
    found = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(marker):
                found.append(int(pid))
        except OSError:
            continue
    return found


def judge_fixtures(paths: list[Path], judge_kwargs: dict, pythonpath: str = str(REPO), python: str = sys.executable,
                   ) -> dict:
    """Run the fixtures through a judge subprocess with the secret, a victim, a listener and a cache dir.

    Returns {"verdicts": {stem: verdict dict}, "effects": {...}}: what each attack left behind. Also used
    (with `pythonpath` pointing at a checkout without isolation) to show that each attack works there.
    """
    base = Path(tempfile.mkdtemp(prefix="kf-iso-judge-"))
    os.chmod(base, 0o755)
    cache = base / "home" / ".cache" / "kernelflow"
    cache.mkdir(parents=True)
    calibration = cache / "calibration-cpu.json"
    calibration.write_text('{"copy_gbps": 1.0}\n')
    package = Path(pythonpath) / "kernelflow" / "_iso_planted.py"
    victim = _victim()
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", UDP_PORT))
    udp.settimeout(0.2)
    secret_key, secret_value = SECRET.split("=", 1)
    path = pythonpath if python == sys.executable else f"{pythonpath}:{SITE}"
    env = {**os.environ, "PYTHONPATH": path, "HOME": str(base / "home"), secret_key: secret_value}
    try:
        r = subprocess.run([python, "-c", JUDGE, json.dumps(judge_kwargs), *map(str, paths)], env=env, cwd=base,
                           capture_output=True, text=True, timeout=90 * len(paths) + 120)
        line = [ln for ln in r.stdout.splitlines() if ln.startswith("VERDICTS:")]
        assert line, f"the judge printed no verdicts (rc {r.returncode}):\n{r.stderr[-3000:]}"
        verdicts = {Path(v["path"]).stem: v for v in json.loads(line[0][len("VERDICTS:"):])}
        try:
            datagram = udp.recv(64)
        except TimeoutError:
            datagram = None
        time.sleep(0.5)  # a survivor that is still being killed is not a survivor
        effects = {
            "secret_seen": [k for k, v in verdicts.items() if secret_value in json.dumps(v)],
            "package_planted": package.exists(),
            "cache_planted": (cache / "iso_planted.lock").exists(),
            "calibration_unchanged": calibration.read_text() == '{"copy_gbps": 1.0}\n',
            "victim_alive": victim.poll() is None,
            "datagram": datagram,
            "survivors": _marked(b"kf-iso-survivor"),
        }
        return {"verdicts": verdicts, "effects": effects}
    finally:
        for pid in _marked(b"kf-iso-survivor"):
            os.kill(pid, signal.SIGKILL)
        victim.kill()
        victim.wait()
        udp.close()
        package.unlink(missing_ok=True)
        subprocess.run(["rm", "-rf", str(base)], check=False)


@pytest.mark.slow
@needs_all
@pytest.mark.parametrize("level", ["auto", "network", "full"])  # network: the mechanisms a CUDA worker gets
def test_isolation_fixtures_are_stopped(level):
    if level == "full" and OWN_UID_PY is None:
        pytest.skip("no Python here that another UID can run")
    python = OWN_UID_PY if level == "full" else sys.executable
    result = judge_fixtures(ISO_FIXTURES, {"isolation": level}, python=python)
    verdicts, effects = result["verdicts"], result["effects"]
    assert set(verdicts) == {p.stem for p in ISO_FIXTURES}
    for name, v in verdicts.items():
        expected = dict(item.split("=") for item in
                        next(ln for ln in (CORPUS / f"{name}.py").read_text().splitlines()
                             if ln.startswith("# expect:"))[len("# expect:"):].split())["interpret"]
        assert v["status"] == expected and v["reward"] == 0, (name, v["status"], v["feedback"])
        assert v["isolation"] == (HERE if level == "auto" else level)
    assert effects == {"secret_seen": [], "package_planted": False, "cache_planted": False,
                       "calibration_unchanged": True, "victim_alive": True,
                       "datagram": None, "survivors": []}, effects


@pytest.mark.slow
@needs_all
@pytest.mark.parametrize("own_uid", [False, True])
def test_worker_runs_as_a_fresh_user_without_capabilities_in_its_own_namespaces(own_uid):
    if own_uid and OWN_UID_PY is None:
        pytest.skip("no Python here that another UID can run")
    probe = (CORPUS / "iso_network_socket.py").read_text().split("class ModelNew")[0] + textwrap.dedent('''
        import os
        class ModelNew(nn.Module):
            def forward(self, x):
                status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
                raise RuntimeError("PROBE " + json.dumps({
                    "uid": os.getuid(), "groups": os.getgroups(), "pids": len([p for p in os.listdir("/proc") if p.isdigit()]),
                    **{k: status[k].strip() for k in ("CapEff", "CapBnd", "NoNewPrivs", "Seccomp")}}))
        import json
    ''')
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(probe)
    try:
        verdicts = judge_fixtures([Path(f.name)], {"isolation": "full" if own_uid else "auto"},
                                  python=OWN_UID_PY if own_uid else sys.executable)["verdicts"]
    finally:
        os.unlink(f.name)
    feedback = next(iter(verdicts.values()))["feedback"]
    seen = json.loads(" ".join(feedback[feedback.rindex("PROBE {") + 6:].split("}", 1)[0].split()) + "}")
    if own_uid or HOST["uid"] is None:
        assert seen["uid"] >= isolation.UID_RANGE[0] and seen["groups"] == []
    else:  # e.g. Python under /root (0700): the worker keeps the judge's UID, without capabilities
        assert seen["uid"] == os.getuid()
    assert seen["CapEff"] == seen["CapBnd"] == "0000000000000000"
    assert seen["NoNewPrivs"] == "1" and seen["Seccomp"] == "2"
    if HOST["pidns"] is None:
        assert seen["pids"] <= 4  # the init shell (PID 1) and the worker: the judge is not visible


# ---- on the GPU host ------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("level", ["auto", "process", "none"])
def test_cuda_honest_relu_is_ok_at_each_level(level):
    """The probe for the CUDA table row: an honest ReLU must be ok (and timed) under each level."""
    from kernelflow.eval import Evaluator
    from tests.eval.test_static_checks import HONEST_RELU

    ev = Evaluator(EvalConfig(backend="cuda", seeds=2, timed_runs=3, verdict_cache_size=0, isolation=level))
    v = ev.evaluate("19_ReLU", HONEST_RELU)
    assert v.status == "ok" and v.timed, v.feedback
    assert v.isolation == (ceiling("cuda") if level == "auto" else level)
