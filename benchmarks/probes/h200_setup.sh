# Source this on the GPU host (bash): installs the carried wheels (.whl/, built by scripts/build_wheelhouse.py;
# see docs/offline_bundle.md) into /tmp/site and points Python at the checkout and at them. No network needed.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH="$PWD:/tmp/site" KERNELFLOW_CACHE_DIR=/tmp/kfc HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$KERNELFLOW_CACHE_DIR"
python3 - <<'PY'
import torch, triton
print("host:", torch.cuda.get_device_name(0), "| torch", torch.__version__, "| triton", triton.__version__)
PY
