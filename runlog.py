"""
The run folder: atomic JSON and checkpoint writes, JSONL logs, and resume.

A run folder holds config.json, metrics.jsonl (a line per model per step), trajectories.jsonl
(a line per model, step and prompt: what stored-peer mode reads), evals.jsonl, checkpoint.pt.
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
