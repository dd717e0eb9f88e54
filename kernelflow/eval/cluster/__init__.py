"""Judging across processes and hosts with Ray (optional: `ray` is imported only when it is used).

- `cluster/ray_backend.py`: `RayEvaluator`, the facade with the `Evaluator` interface;
- `cluster/ray_config.py`: its settings (`RayConfig`);
- `cluster/actor_pool.py`: the actors, their scheduling and replacement;
- `cluster/failure.py`: the verdict a submission gets when the machinery around the evaluator gave up on it.
"""
