"""Judging across processes and hosts with Ray (optional: `ray` is imported only when it is used).

- `ray_backend.py`: `RayEvaluator`, the facade with the `Evaluator` interface;
- `ray_config.py`: its settings (`RayConfig`);
- `actor_pool.py`: the actors, their scheduling and replacement;
- `failure.py`: the verdict a submission gets when the machinery around the evaluator gave up on it.
"""
