"""Count false refusals of the submission language (kernelflow/eval/static/language.py, and the kernel
language of kernelflow/eval/static/kernel_language.py for @triton.jit bodies) on honest code.

    python benchmarks/language_false_refusals.py [--out results/language_false_refusals.json]

Runs the language check alone over every sample we hold that is known to be correct:
(a) the honest controls (tests/fixtures/solutions, the second tier under families/) and the honest
    submissions the tests send (`HONEST_RELU` of tests/eval/test_static_checks.py and tests/env/kernels.py,
    the `*_OK` multi-input submissions of tests/eval/test_multi_input.py);
(b) the SFT corpus the learnability policy is trained on (kernelflow/train/corpus.py with the settings of
    conf/model/sft.yaml): every completion labelled correct, and every judged first answer labelled `ok`
    in kernelflow/train/feedback_samples.json;
(c) every correct answer recorded under docs/results: JSON/JSONL records holding code (`ModelNew`) whose
    status is `ok` or that are marked correct.
Prints counts per source and each refusal with its rule; exits 1 when anything was refused.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmarks run from a checkout; tests/ holds the honest submissions

import yaml  # noqa: E402

from kernelflow.eval.static.kernel_language import check_kernel_language  # noqa: E402
from kernelflow.eval.static.language import check_language  # noqa: E402
from kernelflow.tasks.prompts import extract_code  # noqa: E402


def _constants(path: Path, names=None, suffix=None) -> list[tuple[str, str]]:
    """Module-level string constants of a test file, by name or name suffix, without importing it."""
    out = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if (names and name in names) or (suffix and name.endswith(suffix)):
                try:
                    value = ast.literal_eval(node.value)
                except ValueError:  # HEADER + '''...''': evaluate the concatenation of literals and names
                    value = eval(compile(ast.Expression(node.value), str(path), "eval"),  # noqa: S307 - our tests
                                 {"HEADER": _header(path)})
                out.append((f"{path.relative_to(ROOT)}:{name}", value))
    return out


def _header(path: Path) -> str:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "HEADER":
            return ast.literal_eval(node.value)
    return ""


def honest_controls() -> list[tuple[str, str]]:
    """(a): the honest solutions and the honest submissions of the tests."""
    samples = [(str(p.relative_to(ROOT)), p.read_text())
               for p in sorted((ROOT / "tests/fixtures/solutions").rglob("*.py"))]
    samples += _constants(ROOT / "tests/eval/test_static_checks.py", names={"HONEST_RELU"})
    samples += _constants(ROOT / "tests/env/kernels.py", names={"HONEST_RELU"})
    samples += _constants(ROOT / "tests/eval/test_multi_input.py", suffix="_OK")
    return [(name, extract_code(text) or text) for name, text in samples]


def sft_corpus() -> list[tuple[str, str]]:
    """(b): every correct completion of the learnability SFT corpus and every judged `ok` first answer."""
    from kernelflow.train.corpus import build_corpus, feedback_samples
    from kernelflow.train.policy_config import SFTSettings

    conf = yaml.safe_load((ROOT / "conf/model/sft.yaml").read_text())["sft"]
    fields = SFTSettings.__dataclass_fields__
    settings = SFTSettings(**{k: tuple(v) if isinstance(v, list) else v for k, v in conf.items() if k in fields})
    samples = [(f"corpus[{i}]:{ex.task_id}", extract_code(ex.completion))
               for i, ex in enumerate(build_corpus(settings)) if ex.mistake is None]
    for (task_id, kind), pool in sorted(feedback_samples().items()):
        if kind == "ok":
            samples += [(f"feedback_samples:{task_id}:ok[{i}]", extract_code(a)) for i, (a, _) in enumerate(pool)]
    return [(n, c) for n, c in samples if c]


def _records(obj, path=""):
    if isinstance(obj, dict):
        yield path, obj
        for k, v in obj.items():
            yield from _records(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _records(v, f"{path}[{i}]")


def recorded_results() -> tuple[list[tuple[str, str]], int]:
    """(c): code of correct records under docs/results; also how many files were scanned."""
    samples, files = [], 0
    for path in sorted((ROOT / "docs/results").rglob("*")):
        if path.suffix not in (".json", ".jsonl"):
            continue
        files += 1
        lines = path.read_text(errors="replace").splitlines() if path.suffix == ".jsonl" else [path.read_text()]
        for ln, line in enumerate(lines):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            for where, rec in _records(data):
                ok = rec.get("status") == "ok" or rec.get("correct") is True
                for key in ("code", "answer", "completion", "source", "text"):
                    text = rec.get(key)
                    if ok and isinstance(text, str) and "ModelNew" in text:
                        code = extract_code(text) or text
                        samples.append((f"{path.relative_to(ROOT)}:{ln}{where}.{key}", code))
    return samples, files


def refusals(samples: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(name, why) for every sample the language refuses."""
    out = []
    for name, code in samples:
        tree = ast.parse(code)
        for check in (check_language(tree, code), check_kernel_language(tree, code)):
            if not check.passed:
                out.append((name, check.why))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="write the counts as JSON here")
    args = parser.parse_args()
    recorded, files = recorded_results()
    sources = {"honest_controls": honest_controls(), "sft_corpus": sft_corpus(), "docs_results": recorded}
    report = {"date": datetime.now(UTC).date().isoformat(), "docs_results_files_scanned": files, "sources": {}}
    total_refused = 0
    for source, samples in sources.items():
        refused = refusals(samples)
        total_refused += len(refused)
        report["sources"][source] = {"checked": len(samples), "refused": len(refused),
                                     "refusals": [{"sample": n, "why": w} for n, w in refused]}
        print(f"{source}: checked {len(samples)}, refused {len(refused)}")
        for n, w in refused:
            print(f"  {n}: {w}")
    print(f"docs/results: {files} JSON/JSONL files scanned for recorded correct code")
    print(f"total: checked {sum(len(s) for s in sources.values())}, refused {total_refused}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 1 if total_refused else 0


if __name__ == "__main__":
    raise SystemExit(main())
