"""Static checks of a submission's text, before any of it runs (judge side).

- `checks.py`: `run_static_checks` / `first_failure`, the entry points, and the check order;
- `analysis.py`: one pass over the AST (names, aliases, imports, calls, kernels) that the checks read;
- `tables.py`, `reexports.py`: the tables the checks use (names, modules, re-exported forms);
- `rules.py`: the shared rule helpers; `escapes.py`, `harness_checks.py`, `kernel_checks.py`: the named checks,
  each with the hack it blocks.
"""
