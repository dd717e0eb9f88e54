"""The `kernelflow` command line: tasks, prompt, eval, serve (and a pointer to where rejudge went).

    kernelflow tasks [--suite families]    list task ids, groups and shapes (pilot by default)
    kernelflow prompt TASK_ID              print the prompt a model sees
    kernelflow eval TASK_ID FILE [...]     judge a submission (see `kernelflow eval -h`)
    kernelflow serve [--host --port]       run the OpenEnv environment server
    kernelflow --version                   the package and evaluator versions

Re-judging a run's stored kernels is `python -m flows.rejudge RUN [KEY=VALUE ...]` (flows/rejudge.py,
the flows extra). It was `kernelflow rejudge`; that command is kept only to say where it moved (exit
2), because the base package never imports the `flows` layer (an import-linter contract checks it).

Exit status, for every command (`EXIT_STATUS`): 0 ok; 1 the command ran and failed;
2 a usage or input error (unknown option or task id, unreadable file, bad
config), with a message on stderr. `eval` exits 0 whenever a verdict exists, whatever the verdict
says, and with `--json` prints exactly one verdict on stdout. An unknown task id is answered with
the closest known ids and a pointer to `kernelflow tasks`, not the whole list
(`kernelflow.tasks.unknown_task_message`, which the environment server uses too).

The Hydra entry point (`python -m flows.experiment`) is not this CLI; it follows the same exit status
(flows/experiment.py).
"""

from __future__ import annotations

import argparse
import json
import sys

import kernelflow
from kernelflow.tasks import GROUPS, TASKS, build_prompt_text, get_task, unknown_task_message

EXIT_STATUS = """exit status:
  0  ok (for eval: a verdict exists, whatever its status)
  1  the command ran and failed
  2  usage or input error: unknown option or task id, unreadable file, bad config"""


def _known_task(task_id: str) -> bool:
    """Whether `task_id` names a task; if not, the message is on stderr (the caller exits 2)."""
    try:
        get_task(task_id)
    except KeyError:
        print(f"kernelflow: {unknown_task_message(task_id)}", file=sys.stderr)
        return False
    return True


class _VersionAction(argparse.Action):
    """`--version`: the package and the evaluator version; imports the evaluator (torch) only when asked."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            from kernelflow.eval.evaluator import EVALUATOR_VERSION
        except ImportError as exc:  # an install without the eval extra still answers --version
            EVALUATOR_VERSION = f"unavailable ({exc.name or exc} not installed)"
        print(f"kernelflow {kernelflow.__version__} (evaluator {EVALUATOR_VERSION})")  # stdout, as argparse's own
        parser.exit()


def _cmd_tasks(args: argparse.Namespace) -> int:
    if args.suite == "families":
        return _list_families(args)
    if args.json:
        print(json.dumps([t.to_dict() for t in TASKS.values()], indent=2))
        return 0
    for group in GROUPS:
        print(f"{group}:")
        _print_tasks(t for t in TASKS.values() if t.group == group)
    return 0


def _print_tasks(tasks) -> None:
    """One line per task with every input's shape per profile, e.g. `4096x4096, 4096x4096` for a matmul."""
    def shapes(task, profile: str) -> str:
        return ", ".join("x".join(map(str, shape)) for shape in task.input_shapes(profile))

    for task in tasks:
        print(f"  {task.task_id:<36} small {shapes(task, 'small'):<20} full {shapes(task, 'full')}")


def _list_families(args: argparse.Namespace) -> int:
    """The second-tier suite (kernelflow/tasks/families.py), by group, with each group's role."""
    from kernelflow.tasks import FAMILY_GROUPS, FAMILY_ROLES, FAMILY_TASKS

    if args.json:
        print(json.dumps([t.to_dict() for t in FAMILY_TASKS.values()], indent=2))
        return 0
    for group in FAMILY_GROUPS:
        print(f"{group} ({FAMILY_ROLES[group]}):")
        _print_tasks(t for t in FAMILY_TASKS.values() if t.group == group)
    return 0


def _cmd_prompt(args: argparse.Namespace) -> int:
    if not _known_task(args.task_id):
        return 2
    print(build_prompt_text(get_task(args.task_id)))
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    if not _known_task(args.task_id):  # before importing torch and the evaluator
        return 2
    from kernelflow.eval.cli import run_eval

    return run_eval(args)


def _cmd_serve(args: argparse.Namespace) -> int:
    from kernelflow.env.server.app import serve

    return serve(args)


REJUDGE_MOVED = ("`kernelflow rejudge` moved to `python -m flows.rejudge RUN [KEY=VALUE ...] [--stages a,b] "
                 "[--runs-root DIR]` (flows/rejudge.py; the kernelflow package does not import flows)")


def _cmd_rejudge(args: argparse.Namespace) -> int:
    """Only says where the command went (see the module docstring); never imports `flows`."""
    print(f"kernelflow: {REJUDGE_MOVED}", file=sys.stderr)
    if args.args:
        print(f"  run: python -m flows.rejudge {' '.join(args.args)}", file=sys.stderr)
    return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kernelflow", description=__doc__.split("\n")[0], epilog=EXIT_STATUS,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action=_VersionAction, help="print the package and evaluator versions and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, description=help, epilog=EXIT_STATUS,
                              formatter_class=argparse.RawDescriptionHelpFormatter)

    p = add("tasks", "list the task suite")
    p.add_argument("--json", action="store_true", help="print the full metadata as JSON")
    p.add_argument("--suite", choices=("pilot", "families"), default="pilot",
                   help="which suite to list: the pilot's ten tasks (default) or the second-tier families")
    p.set_defaults(func=_cmd_tasks)

    p = add("prompt", "print the prompt for a task")
    p.add_argument("task_id", help="a task id, e.g. 19_ReLU (see `kernelflow tasks`)")
    p.set_defaults(func=_cmd_prompt)

    p = add("eval", "judge one submission file")
    p.add_argument("task_id", help="a task id, e.g. 19_ReLU (see `kernelflow tasks`)")
    p.add_argument("file", help="the submission: a Python module or a model answer holding one")
    p.add_argument("--shape", choices=["small", "full"], default=None, help="shape profile (default: small)")
    p.add_argument("--backend", choices=["auto", "cuda", "interpret"], default="auto",
                   help="where kernels run: cuda (GPU, timed), interpret (Triton's CPU interpreter, correctness "
                        "only), auto: cuda when a GPU is visible, else interpret (default: auto)")
    p.add_argument("--seeds", type=int, default=None, metavar="N",
                   help="number of input seeds checked for correctness (default: the evaluator config's)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON verdict on stdout")
    p.add_argument("--prewarm-workers", default=None, metavar="N|auto",
                   help="pre-warmed workers (default: kernelflow/eval/config.py ONE_SHOT_DEFAULTS, 0: one verdict)")
    p.set_defaults(func=_cmd_eval)

    p = add("serve", "run the OpenEnv environment server")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default: 127.0.0.1; a non-loopback one needs a token: "
                        "$KERNELFLOW_ENV_TOKEN or \"token\" in --config)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default: 8000)")
    p.add_argument("--config", default=None, help="a JSON file of server settings (EnvServerConfig fields)")
    p.set_defaults(func=_cmd_serve)

    p = add("rejudge", "moved: use `python -m flows.rejudge RUN [KEY=VALUE ...]` (this only says so, exit 2)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="ignored; repeated in the pointer to python -m flows.rejudge")
    p.set_defaults(func=_cmd_rejudge)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
