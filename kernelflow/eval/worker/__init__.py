"""Everything that runs inside the submission's process, and nothing else.

Trust: this folder is on the submission's side of the boundary. A submission that escapes every guard can
replace any object here, so nothing here decides a verdict: the judge (`kernelflow/eval/session/`) checks
what the worker reports against its own evidence. Modules:

- `main.py`: the worker's entry (`python -m kernelflow.eval.worker.main`): bootstrap, confinement, warm-up,
  the call loop, reports;
- `submission.py`: loading the checked submission text as a module, trimming its tracebacks, output checks;
- `controls.py`: the in-process runtime controls (a cheap first layer: launch counting, the dispatch guard,
  tripwires);
- `worker/warm_kernel.py`: the judge's own tiny Triton kernel that warms the compiler before any submission exists.

Imports: the standard library, torch, triton, `kernelflow.eval.protocol` (the typed wire) and
`kernelflow.eval.sandbox.confine` (the worker's side of the sandbox). Import-linter contracts in
pyproject.toml keep it so, and keep every judge-side module from importing this folder.
"""
