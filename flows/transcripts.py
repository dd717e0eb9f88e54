"""Every submission and every episode a stage makes, recorded at the environment client and written out.

`Recorder.factory(endpoint)` returns a session factory for the trainer (`GRPOLoop(session_factory=...)`)
and for the flow's own stages. Each session it makes is a real `KernelEnvSession` wrapped so that
the prompt of every reset and the answer, verdict, reward and feedback of every step are kept. That
is the environment's own record of what was judged, so the trainer needs no hook for it.
`Recorder.write(stage_dir)` then writes

    submissions.jsonl     one line per submission: episode, task, seed, shape, turn, the model's answer, the verdict
    transcripts.jsonl     one line per episode: the prompt messages, then each turn's answer and feedback, the returns
    kernels/<task>/e<episode>-t<turn>.py    the code of each submission, headed by its status and reward

`read_submissions(stage_dir)` reads them back (rejudging, reports). This module does not judge,
train or track anything.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernelflow.env.client import KernelEnvSession
from kernelflow.tasks import extract_code

SUBMISSIONS = "submissions.jsonl"
TRANSCRIPTS = "transcripts.jsonl"


class RecordingSession:
    """A `KernelEnvSession` that reports each episode to its recorder (same reset/step/close API)."""

    def __init__(self, inner: KernelEnvSession, recorder: Recorder):
        self.inner = inner
        self.recorder = recorder
        self.episode: dict[str, Any] | None = None

    def reset(self, task_id: str, seed: int = 0, shape: str | None = None):
        self._flush()
        obs = self.inner.reset(task_id, seed=seed, shape=shape)
        self.episode = {
            "episode": self.recorder.next_index(), "task_id": task_id, "seed": seed, "shape": shape,
            "messages": list(obs.messages or []), "turns": [], "returns": None, "episode_return": None,
        }
        return obs

    def step(self, code: str):
        obs = self.inner.step(code)
        if self.episode is not None:
            self.episode["turns"].append({
                "turn": obs.turn, "answer": code, "status": obs.status, "correct": bool(obs.correct),
                "reward": obs.reward, "feedback": obs.feedback, "verdict": obs.verdict or {},
            })
            if obs.done:
                self.episode.update(returns=obs.returns, episode_return=obs.episode_return)
        return obs

    def close(self) -> None:
        self._flush()
        self.inner.close()

    def _flush(self) -> None:
        if self.episode is not None:
            self.recorder.add(self.episode)
            self.episode = None


class Recorder:
    """Collects episodes from many sessions (thread-safe); `write` puts them in a stage directory."""

    def __init__(self, stage: str):
        self.stage = stage
        self._lock = threading.Lock()
        self._count = 0
        self.episodes: list[dict[str, Any]] = []

    def next_index(self) -> int:
        with self._lock:
            self._count += 1
            return self._count

    def add(self, episode: dict[str, Any]) -> None:
        with self._lock:
            self.episodes.append(episode)

    def factory(self, url: str, token: str | None, message_timeout_s: float = 900.0) -> Callable[[], RecordingSession]:
        def make() -> RecordingSession:
            return RecordingSession(KernelEnvSession(url, token=token, message_timeout_s=message_timeout_s), self)

        return make

    def submissions(self) -> list[dict[str, Any]]:
        out = []
        for ep in sorted(self.episodes, key=lambda e: e["episode"]):
            for t in ep["turns"]:
                out.append({
                    "stage": self.stage, "episode": ep["episode"], "task_id": ep["task_id"], "seed": ep["seed"],
                    "shape": ep["shape"], "turn": t["turn"], "answer": t["answer"], "status": t["status"],
                    "correct": t["correct"], "reward": t["reward"], "verdict": t["verdict"],
                })
        return out

    def write(self, stage_dir: Path) -> dict[str, int]:
        """Write the three outputs (replacing any from an earlier attempt of the stage)."""
        stage_dir.mkdir(parents=True, exist_ok=True)
        subs = self.submissions()
        _write_jsonl(stage_dir / SUBMISSIONS, subs)
        _write_jsonl(stage_dir / TRANSCRIPTS, sorted(self.episodes, key=lambda e: e["episode"]))
        for s in subs:
            path = stage_dir / "kernels" / s["task_id"] / f"e{s['episode']:03d}-t{s['turn']}.py"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(kernel_file(s))
        return {"episodes": len(self.episodes), "submissions": len(subs)}


def kernel_file(sub: dict[str, Any]) -> str:
    """A submission as a browsable .py file: its verdict in a header comment, then its code."""
    code = extract_code(sub["answer"])
    reward = sub.get("reward")
    header = (
        f"# {sub['stage']} episode {sub['episode']} turn {sub['turn']}: {sub['task_id']} seed {sub['seed']} "
        f"shape {sub['shape']}\n# status {sub['status']}, reward {reward if reward is not None else 'n/a'}\n"
    )
    if code is None:
        return header + "# no code was found in the answer; the raw answer follows\n" + _comment(sub["answer"])
    return header + "\n" + code


def _comment(text: str) -> str:
    return "".join(f"# {line}\n" for line in (text or "").splitlines()) or "# (empty answer)\n"


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=True, default=str) + "\n")
    tmp.replace(path)


def read_submissions(stage_dir: Path) -> list[dict[str, Any]]:
    path = stage_dir / SUBMISSIONS
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
