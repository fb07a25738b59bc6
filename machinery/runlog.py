"""
The run folder: atomic JSON and checkpoint writes, JSONL logs, and resume.

A run folder holds config.json, metrics.jsonl (a line per model per step), trajectories.jsonl
(a line per model, step and prompt: what stored-peer mode reads), evals.jsonl, checkpoint.pt,
and summary.json (`summarize`: held-out accuracy at start / end / best, exchange statistics);
print_table prints the main job's report from the GRPO and GRAFT runs' summaries.
Every whole-file write goes to a temporary file that is renamed over the old one, so a run
killed at any moment leaves either the old or the new file, never half of one. On resume the
JSONL logs are cut back to the checkpoint's step, so they match a run that was never killed.

A folder is only reused with the settings it was made with (`check_resume`, `check_config`):
config.json is compared key by key with the new run's settings, and a difference is an error
that names each key with both values, so that two experiments never mix in one folder. Stored
mode checks the run whose log it replays the same way (`check_peer_log`).
"""

import json
import logging
import os
import shutil
import tempfile

import torch

from machinery import memory
from machinery.tasks import BadData
from machinery.wheels import share_modes

log = logging.getLogger("graft_min")

# config.json keys that say where things go, not what is computed: never compared
BOOKKEEPING = ("out", "resume", "bar_position", "cache_dir", "machine", "sizes")  # machine: see report_machine;
# sizes: the `auto` batch sizes a run measured at its start (memory.resolve_auto_sizes), a result, not a setting
# keys added after runs were recorded, with the value that does what those runs did (saved_config fills them in)
ADDED_LATER = {"world_size": 1, "bf16_sampler": False, "fused_adamw": False, "memory_gib": None,
               "max_prompt_tokens": 2048, "seq_ratio": False, "random_prompts": False, "random_admission": False}
# keys that may change when a run is resumed: the number of steps (to extend the run, never to
# end it before its checkpoint), how often it evaluates and checkpoints (evaluations are seeded
# by their step, training does not see them), and the memory / placement settings (device,
# micro-batch, gradient checkpointing: the same computation, equal up to floating-point rounding), and the
# software stack (settings.software_stack: versions and CPU kernels; the run stays valid, only not bit-exact)
RESUME_MAY_CHANGE = BOOKKEEPING + ("steps", "eval_every", "ckpt_every", "device", "micro_batch",
                                   "grad_checkpointing", "fused_adamw", "memory_gib", "stack")
MISSING = "<not set>"  # how a key that only one config has is shown


class ConfigMismatch(ValueError):
    """A run folder's settings disagree with those of a run that would reuse it."""


class CheckpointNotWritten(OSError):
    """checkpoint.pt could not be written (a full disk, say); the previous checkpoint is intact."""


def _atomic(path, write):
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        share_modes(tmp)  # mkstemp's 600 -> the umask's, as open() would give
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_json(path, obj):
    _atomic(path, lambda f: f.write((json.dumps(obj, indent=1) + "\n").encode()))


def write_jsonl(path, records):
    _atomic(path, lambda f: f.write("".join(json.dumps(r) + "\n" for r in records).encode()))


def read_json(path):
    with open(path) as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:
            raise BadData(f"{path}: not valid JSON ({e})") from e


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
                raise BadData(f"{path}, line {lineno}: not valid JSON ({e.msg})") from e
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


def config_differences(saved, new, ignore=(), keys=None):
    """[(key, saved value, new value)] for each key whose values differ, in sorted order: every
    key of either config (or only `keys`) except those in `ignore`. Values are compared as JSON
    stores them, so a tuple equals the list it was saved as."""
    saved, new = json.loads(json.dumps(saved)), json.loads(json.dumps(new))
    keys = sorted(set(saved) | set(new)) if keys is None else keys
    return [(k, saved.get(k, MISSING), new.get(k, MISSING)) for k in keys
            if k not in ignore and saved.get(k, MISSING) != new.get(k, MISSING)]


def check_config(saved, new, where, fix, ignore=(), keys=None):
    """Raise ConfigMismatch naming every differing key (see config_differences) with its value in
    `where` (the saved config.json) and now; `fix` says what to do about it."""
    diffs = config_differences(saved, new, ignore, keys)
    if diffs:
        lines = "\n".join(f"  {k}: saved {json.dumps(old)}, now {json.dumps(cur)}" for k, old, cur in diffs)
        raise ConfigMismatch(f"{where}: {len(diffs)} setting(s) differ from this run's:\n{lines}\n{fix}")


def saved_config(out):
    """out/config.json: the settings of the run that made folder `out`. A setting added since that run was made
    reads as the value it had in effect then, so that the folder (or experiments/reproduce.py's record of it) stays reusable."""
    path = os.path.join(out, "config.json")
    if not os.path.exists(path):
        raise ConfigMismatch(f"{out}: has a checkpoint but no config.json, so its settings cannot be checked; "
                             f"start a fresh run in another folder (--out)")
    return {**ADDED_LATER, **read_json(path)}  # e.g. folders from before torchrun: one process


def check_world_size(out, saved, config):
    """A checkpoint resumes only with the number of processes that wrote it: each rank's share of
    every batch, and so its samples, depend on the world size."""
    was, now = saved["world_size"], config["world_size"]
    if was != now:
        launch = "plain `python graft_min.py`" if was == 1 else f"`torchrun --nproc_per_node {was} graft_min.py`"
        raise ConfigMismatch(f"{out}: the run was written by {was} process(es), this is {now}; resume it with "
                             f"{launch} and the same flags, or start a fresh run in another folder (--out)")


def stack_differences(saved, new):
    """['transformers 5.17.0 -> 5.25.0', ...]: each entry of two software stacks (settings.software_stack) that
    differs; a stack that was not recorded (a folder from before the stack was) differs as a whole."""
    if not isinstance(saved, dict) or not isinstance(new, dict):
        return [] if saved == new else [f"stack {json.dumps(saved)} -> {json.dumps(new)}"]
    return [f"{k} {saved.get(k, MISSING)} -> {new.get(k, MISSING)}" for k in sorted(set(saved) | set(new))
            if saved.get(k, MISSING) != new.get(k, MISSING)]


def report_changes(out, changes):
    """Log each setting that a resumed run changed (check_resume's list); those that change only the
    rounding (device, micro-batch, checkpointing, the software stack) as warnings, the stack in one line."""
    for key, old, new in changes:
        if key == "stack":
            log.warning("%s: resumed on another software stack (%s); the run is valid, but no longer bit-exact with "
                        "one never stopped", out, ", ".join(stack_differences(old, new)))
            continue
        rounding = key in ("device", "micro_batch", "grad_checkpointing", "fused_adamw")
        log.log(logging.WARNING if rounding else logging.INFO, "%s: resumed with %s %s (was %s)%s", out, key,
                json.dumps(new), json.dumps(old), "; equal to a run never stopped only up to rounding" * rounding)


def report_machine(out, saved, config):
    """A run resumed on another CPU model goes on with a warning: the CPU is recorded, never compared (runs made
    before it was recorded, and experiments/reproduce.py's records of them, stay reusable), yet it can move the numbers."""
    if saved.get("machine") not in (None, config.get("machine")):
        log.warning("%s: resumed on another CPU (%s -> %s); the run is valid, but no longer bit-exact with one never "
                    "stopped", out, saved["machine"], config.get("machine"))


def check_resume(out, saved, config, next_step):
    """May a run with settings `config` resume the checkpoint of folder `out` at `next_step`?
    `saved`: out/config.json.

    Raises ConfigMismatch unless every key outside RESUME_MAY_CHANGE is as saved and --steps does
    not end before the checkpoint. Returns the allowed keys that did change (bookkeeping aside),
    as config_differences does, for the caller to report."""
    path = os.path.join(out, "config.json")
    check_config(saved, config, path, ignore=RESUME_MAY_CHANGE,
                 fix=f"--resume would mix two experiments in one folder. Resume with the saved values, or start a "
                     f"fresh run in another folder (--out). Only {', '.join(RESUME_MAY_CHANGE)} may change on resume.")
    if config["steps"] < next_step:
        raise ConfigMismatch(f"{out}: the checkpoint is at step {next_step}, after the {config['steps']} steps asked "
                             f"for; give --steps {next_step} or more to extend the run, or use another folder (--out)")
    return config_differences(saved, config, ignore=BOOKKEEPING, keys=RESUME_MAY_CHANGE)


# Stored mode replays the groups another run logged (trajectories.jsonl): they stand for this run's
# peer only if that run sampled them as this one would: at the same temperature (Eq. 7 compares
# log-probs taken at it), with the same n, response length and prompt format, and on the same
# prompts (step t's batch depends on the seed, the data and the batch size), from the same model.
PEER_LOG_MUST_MATCH = ("temperature", "n", "max_new_tokens", "plain_prompt", "seed", "data", "train_data",
                       "world_seed", "world_split", "narrate", "prompts_per_step")


def check_peer_log(config):
    """Stored mode: the config.json next to config["peer_log"] must agree with this run's config on
    PEER_LOG_MUST_MATCH, and its model_paths on the peer's model; else ConfigMismatch names the keys."""
    path = os.path.join(os.path.dirname(os.path.abspath(config["peer_log"])), "config.json")
    if not os.path.exists(path):
        raise ConfigMismatch(f"{path}: not found; stored mode checks the settings of the run that wrote "
                             f"{config['peer_log']} in the config.json next to it")
    logged, model = read_json(path), f"model_paths.{config['peer']}"
    check_config({**logged, model: logged.get("model_paths", {}).get(config["peer"], MISSING)},
                 {**config, model: config["model_paths"][config["peer"]]}, path, keys=PEER_LOG_MUST_MATCH + (model,),
                 fix="the peer log was sampled with other settings; give this run the logged run's values, or "
                     "log a GRPO run with this run's settings and pass its trajectories.jsonl")


def read_peer_log(path, peer):
    """Stored mode: {step: [records of model `peer`, in batch order]} from a run's trajectories.jsonl."""
    steps = {}
    for r in read_jsonl(path):
        if r["model"] == peer:
            steps.setdefault(r["step"], []).append(r)
    return steps


def logged_groups(peer_log, step, prompt_ids, cfg):
    """The logged records of step `step`, checked against this run's batch (its prompt ids) and n."""
    path, records = cfg.peer_log, peer_log.get(step)
    if not records:
        raise BadData(f"{path}: no logged groups of model {cfg.peer} at step {step}; the log has steps "
                      f"0..{max(peer_log) if peer_log else -1} (run the GRPO run for at least --steps {cfg.steps})")
    ids = [r["prompt_id"] for r in records]
    if ids != prompt_ids:
        raise BadData(f"{path}: step {step}: the logged prompts {ids[:3]}... do not line up with this run's batch "
                      f"{prompt_ids[:3]}...; use the logged run's --seed, --prompts-per-step and data")
    if any(len(r["texts"]) != cfg.n for r in records):
        raise BadData(f"{path}: step {step}: logged groups do not have n = {cfg.n} responses")
    return records


def log_groups(path, step, name, batch, groups, n):
    """One trajectories.jsonl line per prompt: model `name`'s n texts, finished flags, rewards and
    mean generation log-probs (graft_min.Groups of the whole batch): what stored mode replays."""
    for q, p in enumerate(batch):
        sl = slice(q * n, (q + 1) * n)
        append_jsonl(path, {"step": step, "model": name, "prompt_id": p.id, "texts": groups.texts[sl],
                            "finished": groups.finished[sl], "rewards": groups.rewards[q].tolist(),
                            "mean_logprobs": groups.mean_logprobs[sl].tolist()})


def save_checkpoint(path, state):
    """Write the checkpoint atomically. If it cannot be written (no space left, say), the partial file is
    removed, the previous checkpoint stays as it was, and CheckpointNotWritten says so in one line."""
    try:
        _atomic(path, lambda f: torch.save(state, f))
    except (OSError, RuntimeError) as e:  # torch.save reports a failed write as a RuntimeError
        previous = f"the previous checkpoint {path} is intact" if os.path.exists(path) else "no checkpoint was kept"
        free = shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free / 1e9
        raise CheckpointNotWritten(f"{path}: cannot write the checkpoint ({e}); {previous}; {free:.1f} GB free there. "
                                   f"Free disk space and rerun with --resume") from e


def announce_checkpoints(out, models, cfg):
    """Say, before the first checkpoint, how large each checkpoint.pt will be: both models' fp32 weights and
    AdamW's two fp32 moments (12 bytes a parameter, memory.memory_estimate's figures; gradients are not saved)."""
    gb = sum(g["weights"] + g["adam"] for g in (memory.memory_estimate(m, cfg) for m in models))
    log.info("%s: each checkpoint.pt will hold ~%.1f GB (the weights and AdamW moments of %d model(s), in fp32), "
             "written every %d steps and at the end; writing it needs that much free space again", out, gb,
             len(models), cfg.ckpt_every)
    return gb


def load_checkpoint(path):
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except (OSError, RuntimeError, EOFError) as e:
        raise BadData(f"{path}: cannot read the checkpoint ({e}); delete it to start over") from e


def first_last(ms, value, share=0.2):
    """(mean of value(m) over the first `share` of the steps in ms, the same over the last share)."""
    k = max(1, round(share * len(ms)))
    return sum(map(value, ms[:k])) / k, sum(map(value, ms[-k:])) / k


def summarize(out, wall):
    """Per model: held-out accuracy at start / end / best, the run's exchange statistics, and how
    training moved: all-fail share and T = 1 training reward per family, first vs last 20% of steps."""
    metrics = read_jsonl(os.path.join(out, "metrics.jsonl"))
    evals = read_jsonl(os.path.join(out, "evals.jsonl"))
    config = os.path.join(out, "config.json")
    saved = read_json(config) if os.path.exists(config) else {}
    summary = {"wall_seconds": round(wall, 1), "stack": saved.get("stack"), "machine": saved.get("machine"),
               "models": {}}  # the versions and the CPU that made the run
    for name in sorted({m["model"] for m in metrics}):
        ms = [m for m in metrics if m["model"] == name]
        ev = [e for e in evals if e["model"] == name]
        best = max(ev, key=lambda e: e["mean"])
        ws = [m["w_mean"] * m["admitted"] for m in ms if m["admitted"]]
        summary["models"][name] = {
            "start": {k: ev[0][k] for k in eval_families(ev[0]) + ["mean"]},
            "end": {k: ev[-1][k] for k in eval_families(ev[-1]) + ["mean"]},
            "best_step": best["step"], "best_mean": best["mean"],
            "all_fail_share": sum(m["all_fail_share"] for m in ms) / len(ms),
            "groups_exchanged": sum(m["selected"] for m in ms),
            "responses_admitted": sum(m["admitted"] for m in ms),
            "mean_w": sum(ws) / max(1, sum(m["admitted"] for m in ms)) if ws else None,
            "clip_self": sum(m["clip_self"] * m["tokens_self"] for m in ms) / max(1, sum(m["tokens_self"] for m in ms)),
            "clip_peer": sum(m["clip_peer"] * m["tokens_peer"] for m in ms) / max(1, sum(m["tokens_peer"] for m in ms)),
            "skipped_updates": sum(m["skipped_updates"] for m in ms),
            "all_fail_first_last": first_last(ms, lambda m: m["all_fail_share"]),
            "train_reward_first_last": {f: first_last(ms, lambda m: m["families"][f]["reward"])
                                        for f in sorted(ms[0]["families"])},
            "train_all_fail_first_last": {f: first_last(ms, lambda m: m["families"][f]["all_fail"])
                                          for f in sorted(ms[0]["families"])},
        }
    return summary


def eval_families(record):
    """The held-out families of an evals.jsonl record (graft_min.evaluate), sorted: its keys but the step, the
    model, the mean and the per-family dicts of finished shares (records of older runs have none)."""
    return sorted(k for k, v in record.items() if k not in ("step", "model", "mean") and not isinstance(v, dict))


def print_table(results):
    """The main job's report: held-out pass@1 at the start and end, the training reward (T = 1) and
    all-fail share in the first and last 20% of the steps, and what the exchange did."""
    fams = [f for f in results["grpo"]["models"]["a"]["start"] if f != "mean"]
    labels = [f"{f} {c}" for f in fams for c in ("start", "GRPO", "GRAFT")]
    w = max(map(len, labels))  # each column as wide as the longest label
    print("\nheld-out pass@1 (T 0.6), start and end of training\nmodel  " + "  ".join(f"{s:>{w}s}" for s in labels))
    for name in ("a", "b"):
        g, f = results["grpo"]["models"][name], results["graft"]["models"][name]
        print(f"{name:5s}  " + "  ".join(f"{x:{w}.3f}" for fam in fams for x in (g["start"][fam], g["end"][fam], f["end"][fam])))
    # the training set's families: the tiny world's are the held-out ones; MATH's ("math") are not the benchmarks'
    train_fams = list(results["grpo"]["models"]["a"]["train_reward_first_last"])
    print("\ntraining reward (T = 1) and all-fail share per family, first -> last 20% of steps\nmodel  method " +
          "  ".join(f"{fam + ' ' + c:>14s}" for c in ("reward", "all-fail") for fam in train_fams))
    for method, res in results.items():
        for name, m in res["models"].items():
            cells = [m[key][fam] for key in ("train_reward_first_last", "train_all_fail_first_last") for fam in train_fams]
            print(f"{name:5s}  {method:6s} " + "  ".join(f"{a:6.3f} -> {b:.3f}" for a, b in cells))
    print(f"\n{'model':5s} {'method':6s} {'exchanged':>10s} {'admitted':>9s} {'mean w':>7s} "
          f"{'clip self':>10s} {'clip peer':>10s} {'wall s':>7s}")
    for method, res in results.items():
        for name, m in res["models"].items():
            w = f"{m['mean_w']:.3f}" if m["mean_w"] is not None else "-"
            print(f"{name:5s} {method:6s} {m['groups_exchanged']:10d} {m['responses_admitted']:9d} "
                  f"{w:>7s} {m['clip_self']:10.4f} {m['clip_peer']:10.4f} {res['wall_seconds']:7.0f}")
