"""`kernelflow tasks` and `kernelflow prompt`, driven in process through `kernelflow.cli.main`."""

from __future__ import annotations

import json

import pytest

from kernelflow.cli import main
from kernelflow.tasks import TASKS, build_prompt_text

EXPECTED_GROUPS = {
    "train": ["19_ReLU", "20_LeakyReLU", "21_Sigmoid", "22_Tanh"],
    "reserved": ["25_Swish", "28_HardSigmoid", "32_HardTanh"],
    "heldout": ["23_Softmax", "24_LogSoftmax", "88_MinGPTNewGelu"],
}


def _sections(stdout: str) -> dict[str, list[str]]:
    """Heading -> task ids listed under it, in order."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in stdout.splitlines():
        if not line.strip():
            continue
        if not line.startswith(" ") and line.rstrip().endswith(":"):
            current = line.rstrip()[:-1]
            assert current not in sections, f"heading {current!r} printed twice"
            sections[current] = []
        else:
            assert current is not None, f"task line before any heading: {line!r}"
            sections[current].append(line.split()[0])
    return sections


def test_tasks_lists_the_ten_ids_under_their_group_headings(capsys):
    assert main(["tasks"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    sections = _sections(out)
    assert list(sections) == ["train", "reserved", "heldout"]
    assert sections == EXPECTED_GROUPS


def test_tasks_shows_both_shape_profiles(capsys):
    main(["tasks"])
    out = capsys.readouterr().out
    relu = next(line for line in out.splitlines() if "19_ReLU" in line)
    assert "16x4099" in relu and "4096x393216" in relu
    gelu = next(line for line in out.splitlines() if "88_MinGPTNewGelu" in line)
    assert "8192x8192" in gelu


def test_tasks_json_is_the_metadata(capsys):
    assert main(["tasks", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["task_id"] for d in data] == list(TASKS)
    assert data == [t.to_dict() for t in TASKS.values()]


@pytest.mark.parametrize("task_id", list(TASKS))
def test_prompt_prints_the_prompt_for_every_task(task_id, capsys):
    assert main(["prompt", task_id]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out == build_prompt_text(TASKS[task_id]) + "\n"
    assert TASKS[task_id].source in out
    assert "ModelNew" in out


def test_prompt_with_an_unknown_id_exits_2_naming_it(capsys):
    assert main(["prompt", "99_NoSuchTask"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "99_NoSuchTask" in err
    assert "kernelflow tasks" in err  # the message says where the known ids are listed


def test_no_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2
    assert "usage" in capsys.readouterr().err.lower()


# --- the CLI's conventions (issue 22): --version, help on every option, suggestions, exit status -----


def test_version_names_the_package_and_the_evaluator(capsys):
    import kernelflow
    from kernelflow.eval.evaluator import EVALUATOR_VERSION

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"kernelflow {kernelflow.__version__} (evaluator {EVALUATOR_VERSION})"


def _subparsers(parser):
    import argparse

    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def test_every_option_and_argument_of_every_command_has_help():
    from kernelflow.cli import build_parser

    parser = build_parser()
    commands = _subparsers(parser)
    assert set(commands) == {"tasks", "prompt", "eval", "serve", "rejudge"}
    missing = [f"{name} {a.option_strings or a.dest}" for name, p in [("kernelflow", parser), *commands.items()]
               for a in p._actions if not a.help and a.dest != "command"]
    assert missing == []


def test_rejudge_says_where_it_moved_and_imports_no_flows(capsys):
    # kernelflow never imports the flows layer: `kernelflow rejudge` only points at `python -m flows.rejudge`
    import sys

    before = {m for m in sys.modules if m == "flows" or m.startswith("flows.")}
    assert main(["rejudge", "runs/x", "env.url=http://h:8000"]) == 2
    err = capsys.readouterr().err
    assert "python -m flows.rejudge" in err and "python -m flows.rejudge runs/x env.url=http://h:8000" in err
    assert {m for m in sys.modules if m == "flows" or m.startswith("flows.")} == before


def test_help_lists_rejudge_and_the_exit_status_convention(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "rejudge" in out.split("positional arguments")[0]  # in the description, not only the command list
    assert "moved: use `python -m flows.rejudge" in out  # and the command list says where it went
    assert "exit status:" in out and "1  the command ran and failed" in out and "2  usage or input error" in out
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    out = capsys.readouterr().out
    assert "exit status:" in out and "--backend" in out and "Triton's CPU interpreter" in out


@pytest.mark.parametrize("command", [["prompt"], ["eval"]])
@pytest.mark.parametrize("typo, suggestion", [("19_Relu", "19_ReLU"), ("relu", "19_ReLU"), ("23_Softmx", "23_Softmax")])
def test_unknown_task_id_suggests_the_closest_and_does_not_list_them_all(command, typo, suggestion, capsys, tmp_path):
    args = [*command, typo] + ([str(tmp_path / "unused.py")] if command == ["eval"] else [])
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert f"unknown task {typo!r}; did you mean" in err and repr(suggestion) in err
    assert "kernelflow tasks" in err
    assert "32_HardTanh" not in err and len(err) < 300  # not the whole list of ids


def test_unknown_task_id_with_nothing_close_points_to_the_list(capsys):
    assert main(["prompt", "zzzz"]) == 2
    err = capsys.readouterr().err
    assert "did you mean" not in err and "unknown task 'zzzz'" in err and "kernelflow tasks" in err
