"""The judge's clock: everything that decides how long a kernel took, and the floor it is compared with.

- `clock/gated_clock.py`: the judge's own CUDA events around an inter-process gate, for the submission's timed calls;
- `clock/gpu_signal.py`: the worker's done signal, a value in the judge's memory that the judge can write too;
- `clock/gpu_lock.py`: the per-device cross-process lock every timed phase holds;
- `clock/timing.py`: eager-PyTorch timing of references and calibration runs (`time_cuda`), the lock helpers;
- `clock/roofline.py`: the device's measured bandwidth and matmul rate, and each task's t_min floor;
- `clock/baselines.py`: the device calibration and the cached eager / torch.compile timings of references.
"""
