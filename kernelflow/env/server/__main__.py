"""`python -m kernelflow.env.server`: the same as `kernelflow serve`, plus two options for launchers.

`--port-file` receives the bound port (so `--port 0` can pick a free one). `--exit-with-parent PID`
ends the server when the process that launched it is gone: `launch.start_local_server` starts it in
a session of its own (so a Ctrl-C in the launcher's terminal does not reach it mid-verdict), which
also means a launcher killed with SIGKILL could not take it down, and the server and its evaluator's
workers were left running. A watcher thread notices the launcher's death by the server's parent PID
changing (the kernel re-parents an orphan), then asks the server to stop (SIGTERM: uvicorn's graceful
shutdown closes the evaluator) and, if it is still there `HARD_STOP_S` later, kills its own process
group (the server and its workers; it leads that group). Not covered: a launcher that is alive but
hung; `prctl(PR_SET_PDEATHSIG)` was not used because it fires when the launching *thread* ends, and
the flow launches from a Prefect worker thread that ends long before the experiment.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time

from kernelflow.env.server.app import serve

POLL_S = 1.0
HARD_STOP_S = 30.0


def watch_parent(parent_pid: int, poll_s: float = POLL_S, hard_stop_s: float = HARD_STOP_S) -> threading.Thread:
    """Start the daemon thread that stops this process once `parent_pid` is no longer its parent."""

    def run() -> None:
        while os.getppid() == parent_pid:
            time.sleep(poll_s)
        print(f"kernelflow serve: the launcher (pid {parent_pid}) is gone; stopping", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(hard_stop_s)
        os.killpg(os.getpgid(0), signal.SIGKILL)  # still here: the group is this server and its workers

    thread = threading.Thread(target=run, name="kf-parent-watch", daemon=True)
    thread.start()
    return thread


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernelflow.env.server", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port (see --port-file)")
    parser.add_argument("--config", default=None, help="a JSON file of EnvServerConfig fields")
    parser.add_argument("--port-file", default=None, help="write the bound port to this file once listening")
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    parser.add_argument("--exit-with-parent", type=int, default=None, metavar="PID",
                        help="stop when the process PID (the launcher) is no longer this server's parent")
    args = parser.parse_args(argv)
    if args.exit_with_parent is not None:
        if os.getppid() != args.exit_with_parent:
            print(f"kernelflow serve: --exit-with-parent {args.exit_with_parent} is not this process's parent "
                  f"({os.getppid()}); give the launcher's own PID", file=sys.stderr)
            return 2
        if os.getpgid(0) != os.getpid():
            print("kernelflow serve: --exit-with-parent needs the server to lead its own process group "
                  "(start it with start_new_session=True), so that its stop kills only its own workers",
                  file=sys.stderr)
            return 2
        watch_parent(args.exit_with_parent)
    return serve(args)


if __name__ == "__main__":
    sys.exit(main())
