"""kernelflow/tasks/pysource.py: our parses never overlap (CPython 3.11's AST state is shared by threads)."""

from __future__ import annotations

import ast
import threading
import time

from kernelflow.tasks import pysource


def test_parses_from_many_threads_run_one_at_a_time(monkeypatch):
    active, peak, lock = [0], [0], threading.Lock()
    real_parse = ast.parse

    def slow_parse(source, *args, **kwargs):  # widens the window in which two parses would overlap
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.01)
        try:
            return real_parse(source, *args, **kwargs)
        finally:
            with lock:
                active[0] -= 1

    monkeypatch.setattr(pysource.ast, "parse", slow_parse)
    trees = []
    threads = [threading.Thread(target=lambda i=i: trees.append(pysource.parse(f"x = {i}"))) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak[0] == 1
    assert sorted(t.body[0].value.value for t in trees) == list(range(8))


def test_the_static_checks_and_the_code_extractor_parse_through_it(monkeypatch):
    from kernelflow.eval.static.checks import run_static_checks
    from kernelflow.tasks.prompts import extract_code

    seen = []
    real = pysource.parse
    monkeypatch.setattr(pysource, "parse", lambda source: seen.append(source) or real(source))
    run_static_checks("import torch\n")
    extract_code("def f():\n    return 1\n")
    assert seen == ["import torch\n", "def f():\n    return 1"]
