# kernelflow environment server for a CUDA host (an H200 in the pilot).
#
#   docker build -t kernelflow-env .
#   docker run --gpus all -p 127.0.0.1:8000:8000 -e KERNELFLOW_ENV_TOKEN="$(openssl rand -hex 16)" kernelflow-env
#
# The base image brings CUDA, torch and triton; kernelflow[env] is installed on top with the project's
# constraints, minus torch/triton/CUDA wheels, so the image's GPU build of torch is kept. The server
# listens on 0.0.0.0 inside the container, so it refuses to start without KERNELFLOW_ENV_TOKEN.
# Settings: mount a JSON file of EnvServerConfig fields and set KERNELFLOW_ENV_CONFIG to its path.
# This recipe was written and linted on a machine without a Docker engine; it has not been built there.
ARG BASE_IMAGE=pytorch/pytorch:2.11.0-cuda12.8-cudnn9-runtime
FROM ${BASE_IMAGE}

ENV PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1

WORKDIR /opt/kernelflow
COPY pyproject.toml constraints.txt README.md ./
COPY kernelflow ./kernelflow
COPY examples ./examples

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# Keep the image's torch and triton: drop them and the CUDA wheels from the constraints, pin them to
# what the image has, and fail the build if the install would change them.
RUN grep -viE '^(torch|triton|nvidia-[a-z0-9-]+|cuda-[a-z0-9-]+)==' constraints.txt > /tmp/constraints.txt \
 && { python -m pip freeze | grep -iE '^(torch|triton)==' || true; } | tee -a /tmp/constraints.txt > /tmp/before.txt \
 && python -m pip install --no-cache-dir -c /tmp/constraints.txt ".[env]" \
 && { python -m pip freeze | grep -iE '^(torch|triton)==' || true; } > /tmp/after.txt \
 && diff /tmp/before.txt /tmp/after.txt \
 && python -c "import torch, triton, kernelflow.env.server.app; print('torch', torch.__version__, 'triton', triton.__version__)" \
 && rm -f /tmp/constraints.txt /tmp/before.txt /tmp/after.txt

RUN useradd --create-home --uid 10001 kernelflow
USER 10001

EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=4).status != 200)"]
CMD ["kernelflow", "serve", "--host", "0.0.0.0", "--port", "8000"]
