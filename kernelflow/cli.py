"""The `kernelflow` command line: tasks, prompt, eval, serve.

    kernelflow tasks [--suite families]    list task ids, groups and shapes (pilot by default)
    kernelflow prompt TASK_ID              print the prompt a model sees
    kernelflow eval TASK_ID FILE [...]     judge a submission (see `kernelflow eval -h`)
    kernelflow serve [--host --port]       run the OpenEnv environment server

Usage errors (unknown task id, unreadable file) exit with status 2 and a message on stderr; `eval
--json` prints exactly one verdict on stdout and exits 0 whenever a verdict exists.
"""

from __future__ import annotations

import argparse
import json
import sys

from kernelflow.tasks import GROUPS, TASKS, build_prompt_text, get_task


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
    try:
        task = get_task(args.task_id)
    except KeyError as exc:
        print(f"kernelflow: {exc.args[0]}", file=sys.stderr)
        return 2
    print(build_prompt_text(task))
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from kernelflow.eval.cli import run_eval

    return run_eval(args)


def _cmd_serve(args: argparse.Namespace) -> int:
    from kernelflow.env.server.app import serve

    return serve(args)


def _cmd_rejudge(args: argparse.Namespace) -> int:
    from flows.rejudge import rejudge_command

    stages = [s for s in (args.stages or "").split(",") if s] or None
    return rejudge_command(args.run, args.overrides, stages=stages, runs_root=args.runs_root)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kernelflow", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("tasks", help="list the task suite")
    p.add_argument("--json", action="store_true", help="print the full metadata as JSON")
    p.add_argument("--suite", choices=("pilot", "families"), default="pilot",
                   help="which suite to list: the pilot's ten tasks (default) or the second-tier families")
    p.set_defaults(func=_cmd_tasks)

    p = sub.add_parser("prompt", help="print the prompt for a task")
    p.add_argument("task_id")
    p.set_defaults(func=_cmd_prompt)

    p = sub.add_parser("eval", help="judge one submission file")
    p.add_argument("task_id")
    p.add_argument("file", help="the submission: a Python module or a model answer holding one")
    p.add_argument("--shape", choices=["small", "full"], default=None, help="shape profile (default: small)")
    p.add_argument("--backend", choices=["auto", "cuda", "interpret"], default="auto")
    p.add_argument("--seeds", type=int, default=None, help="number of input seeds for correctness")
    p.add_argument("--json", action="store_true", help="print exactly one JSON verdict on stdout")
    p.add_argument("--prewarm-workers", default=None, metavar="N|auto",
                   help="pre-warmed workers (default: kernelflow/eval/config.py ONE_SHOT_DEFAULTS, 0: one verdict)")
    p.set_defaults(func=_cmd_eval)

    p = sub.add_parser("serve", help="run the OpenEnv environment server")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--config", default=None, help="a JSON file of server settings (EnvServerConfig fields)")
    p.set_defaults(func=_cmd_serve)

    p = sub.add_parser("rejudge", help="re-judge a run's stored kernels into a new stage of that run")
    p.add_argument("run", help="a run directory, or its name under --runs-root")
    p.add_argument("overrides", nargs="*", help="KEY=VALUE changes to the run's config, e.g. env.url=http://host:8000")
    p.add_argument("--stages", default=None, help="comma-separated stages to re-judge (default: every stored one)")
    p.add_argument("--runs-root", default="runs", help="where run directories are looked up by name (default: runs)")
    p.set_defaults(func=_cmd_rejudge)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
