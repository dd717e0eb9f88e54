"""The worker's OS sandbox, split along the trust boundary.

- `policy.py` (judge side): the mechanisms, the levels they add up to, probing the host, the per-backend
  table, each worker's spawn prefix and self-setup (`plan_worker`), the minimum the server requires;
- `confine.py` (worker side): applying the self-setup in the worker (no_new_privs, Landlock, seccomp);
- `sandbox/landlock.py`, `sandbox/seccomp_policy.py`: the two mechanisms' system-call wrappers, used by both sides
  (the judge probes them, the worker applies them).
"""
