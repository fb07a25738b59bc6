"""
The run folder: atomic JSON and checkpoint writes, JSONL logs, and resume.

A run folder holds config.json, metrics.jsonl (a line per model per step), trajectories.jsonl
(a line per model, step and prompt: what stored-peer mode reads), evals.jsonl, checkpoint.pt,
and summary.json (`summarize`: held-out accuracy at start / end / best, exchange statistics).
Every whole-file write goes to a temporary file that is renamed over the old one, so a run
killed at any moment leaves either the old or the new file, never half of one. On resume the
JSONL logs are cut back to the checkpoint's step, so they match a run that was never killed.
"""

import json
import os
import tempfile

import torch


def _atomic(path, write):
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_json(path, obj):
    _atomic(path, lambda f: f.write((json.dumps(obj, indent=1) + "\n").encode()))


def read_json(path):
    with open(path) as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not valid JSON ({e})") from e


def append_jsonl(path, record):
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def read_jsonl(path):
    """All records of a JSONL file; a bad line is an error naming the file and line."""
    records = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}, line {lineno}: not valid JSON ({e.msg})") from e
    return records


def truncate_jsonl(path, before_step):
    """Keep only records with step < before_step (and drop a torn last line)."""
    if not os.path.exists(path):
        return
    kept = []
    with open(path) as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                break  # a line torn by the kill: everything after it is newer than the checkpoint
            if record["step"] < before_step:
                kept.append(line if line.endswith("\n") else line + "\n")
    _atomic(path, lambda f: f.write("".join(kept).encode()))


def save_checkpoint(path, state):
    _atomic(path, lambda f: torch.save(state, f))


def load_checkpoint(path):
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except (OSError, RuntimeError, EOFError) as e:
        raise ValueError(f"{path}: cannot read the checkpoint ({e}); delete it to start over") from e


def summarize(out, wall):
    """Per model: held-out accuracy at start / end / best, and the run's exchange statistics."""
    metrics = read_jsonl(os.path.join(out, "metrics.jsonl"))
    evals = read_jsonl(os.path.join(out, "evals.jsonl"))
    summary = {"wall_seconds": round(wall, 1), "models": {}}
    for name in sorted({m["model"] for m in metrics}):
        ms = [m for m in metrics if m["model"] == name]
        ev = [e for e in evals if e["model"] == name]
        best = max(ev, key=lambda e: e["mean"])
        ws = [m["w_mean"] * m["admitted"] for m in ms if m["admitted"]]
        summary["models"][name] = {
            "start": {k: v for k, v in ev[0].items() if k not in ("step", "model")},
            "end": {k: v for k, v in ev[-1].items() if k not in ("step", "model")},
            "best_step": best["step"], "best_mean": best["mean"],
            "all_fail_share": sum(m["all_fail_share"] for m in ms) / len(ms),
            "groups_exchanged": sum(m["selected"] for m in ms),
            "responses_admitted": sum(m["admitted"] for m in ms),
            "mean_w": sum(ws) / max(1, sum(m["admitted"] for m in ms)) if ws else None,
            "clip_self": sum(m["clip_self"] * m["tokens_self"] for m in ms) / max(1, sum(m["tokens_self"] for m in ms)),
            "clip_peer": sum(m["clip_peer"] * m["tokens_peer"] for m in ms) / max(1, sum(m["tokens_peer"] for m in ms)),
            "skipped_updates": sum(m["skipped_updates"] for m in ms),
        }
    return summary
