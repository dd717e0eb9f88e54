"""Checkpoints: the adapter in standard PEFT format plus everything needed to continue exactly.

A checkpoint directory holds

    adapter/                      PEFT `save_pretrained` output (adapter_model.safetensors,
                                  adapter_config.json) and README.md, a Hugging Face model card
    training_state.pt             optimizer, scheduler and RNG states (torch, CUDA, python, numpy)
    trainer_state.json            counts (epochs, updates), seeds, base model id + revision, the
                                  trainer configuration, package versions and the sha256 of every file

`adapter/` alone is a complete PEFT adapter: `PeftModel.from_pretrained(base, "<dir>/adapter")`.
Loading restores the adapter weights into the live policy (after checking hashes and the base model),
then the optimiser, scheduler and RNG states, so the next update equals the one an uninterrupted run
would have made (on CPU bit for bit; CUDA kernels may not be deterministic). A checkpoint is written
to a temporary directory and renamed into place, so a crash never leaves a half-written one.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from kernelflow.train.config import TrainerConfig
from kernelflow.train.policy import Policy

FORMAT_VERSION = 1
ADAPTER_DIR = "adapter"
STATE_FILE = "training_state.pt"
META_FILE = "trainer_state.json"


@dataclass(frozen=True)
class CheckpointInfo:
    path: Path
    epochs_completed: int
    updates: int
    sha256: dict[str, str]  # relative path -> digest, every file but the card and the metadata
    train_tasks: tuple[str, ...] = ()

    @property
    def adapter_path(self) -> Path:
        return self.path / ADAPTER_DIR

    @classmethod
    def from_meta(cls, path: str | Path, meta: dict) -> CheckpointInfo:
        """The info of the checkpoint at `path` from its `trainer_state.json` record."""
        return cls(Path(path), meta["epochs_completed"], meta["updates"], meta["sha256"],
                   tuple(meta.get("train_tasks", ())))

    @classmethod
    def read(cls, path: str | Path) -> CheckpointInfo:
        """The info of the checkpoint written at `path` (its metadata only; nothing is verified or loaded)."""
        return cls.from_meta(path, read_checkpoint_meta(path))


def sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _hashed_files(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.name not in ("README.md", META_FILE):
            out[p.relative_to(root).as_posix()] = sha256_file(p)
    return out


def rng_state() -> dict:
    np_state = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": (np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def package_versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {}
    for name in ("torch", "transformers", "peft", "tokenizers", "kernelflow"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            pass
    return out


def save_adapter(policy: Policy, directory: Path) -> dict[str, str]:
    """PEFT save_pretrained into `directory`; returns the sha256 of each file written."""
    directory.mkdir(parents=True, exist_ok=True)
    peft_config = policy.model.peft_config["default"]
    peft_config.base_model_name_or_path = policy.base_id
    peft_config.revision = policy.base_revision
    policy.model.save_pretrained(str(directory))
    readme = directory / "README.md"
    if readme.exists():  # PEFT's template card; ours is written by model_card.py
        readme.unlink()
    return {p.name: sha256_file(p) for p in sorted(directory.iterdir()) if p.is_file()}


def save_checkpoint(
    directory: str | Path,
    policy: Policy,
    optimizer: torch.optim.Optimizer,
    scheduler,
    config: TrainerConfig,
    *,
    epochs_completed: int,
    updates: int,
    train_tasks: tuple[str, ...] = (),
    card: Callable[[dict[str, str]], str] | None = None,
) -> CheckpointInfo:
    """Write a checkpoint; `card(weight_sha256)` renders the adapter's README.md from the weight hashes."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    try:
        save_adapter(policy, tmp / ADAPTER_DIR)
        torch.save(
            {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "rng": rng_state()},
            tmp / STATE_FILE,
        )
        hashes = _hashed_files(tmp)
        meta = {
            "format_version": FORMAT_VERSION,
            "epochs_completed": epochs_completed,
            "updates": updates,
            "train_tasks": list(train_tasks),
            "seed": config.seed,
            "env_seed": config.env_seed,
            "lora_seed": config.seed,
            "base_model": policy.base_id,
            "base_revision": policy.base_revision,
            "policy_source": policy.config.source,
            "estimator": config.estimator,
            "config": config.to_dict(),
            "packages": package_versions(),
            "sha256": hashes,
            "weight_sha256": {k: v for k, v in hashes.items() if k.endswith((".safetensors", ".bin"))},
        }
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        if card is not None:
            (tmp / ADAPTER_DIR / "README.md").write_text(card(meta["weight_sha256"]))
        if directory.exists():
            old = directory.with_name(f".{directory.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            directory.rename(old)
            tmp.rename(directory)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(directory)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return CheckpointInfo(directory, epochs_completed, updates, hashes, tuple(train_tasks))


def read_checkpoint_meta(directory: str | Path) -> dict:
    path = Path(directory) / META_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{directory} is not a kernelflow checkpoint (no {META_FILE})")
    return json.loads(path.read_text())


def verify_checkpoint(directory: str | Path) -> dict:
    """The checkpoint's metadata, after checking every file against its recorded sha256."""
    directory = Path(directory)
    meta = read_checkpoint_meta(directory)
    for rel, digest in meta["sha256"].items():
        path = directory / rel
        if not path.is_file():
            raise ValueError(f"checkpoint {directory}: {rel} is missing")
        actual = sha256_file(path)
        if actual != digest:
            raise ValueError(f"checkpoint {directory}: {rel} has sha256 {actual}, recorded {digest} (corrupted?)")
    return meta


def load_checkpoint(
    directory: str | Path, policy: Policy, optimizer: torch.optim.Optimizer, scheduler
) -> CheckpointInfo:
    """Restore adapter weights, optimiser, scheduler and RNG states from `directory` into live objects."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    directory = Path(directory)
    meta = verify_checkpoint(directory)
    if meta["base_model"] != policy.base_id or meta["base_revision"] != policy.base_revision:
        raise ValueError(
            f"checkpoint {directory} was trained on {meta['base_model']}@{meta['base_revision']}, "
            f"but the policy is {policy.base_id}@{policy.base_revision}; load the same base model"
        )
    weights = load_file(str(directory / ADAPTER_DIR / "adapter_model.safetensors"), device=str(policy.device))
    result = set_peft_model_state_dict(policy.model, weights)
    missing = [k for k in getattr(result, "missing_keys", []) if "lora_" in k]
    unexpected = list(getattr(result, "unexpected_keys", []))
    if missing or unexpected:
        raise ValueError(
            f"checkpoint {directory}: adapter does not match the policy's LoRA "
            f"(missing {missing[:3]}, unexpected {unexpected[:3]}); are the LoRA settings the same?"
        )
    state = torch.load(directory / STATE_FILE, map_location="cpu", weights_only=True)
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    set_rng_state(state["rng"])
    return CheckpointInfo.from_meta(directory, meta)
