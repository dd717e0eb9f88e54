"""kernelflow: teach language models to write fast, correct Triton kernels from execution feedback.

Importing this package has no side effects; the layers live in `kernelflow.tasks`, `kernelflow.eval`,
`kernelflow.env` and `kernelflow.train` (see ARCHITECTURE in the README).
"""

__version__ = "0.1.0"
