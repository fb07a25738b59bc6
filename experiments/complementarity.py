"""
Fig. 1 and the gate on a real pair: how complementary two models are on real problems, and how many
of the peer's responses Eq. 7-8's gate would admit (paper Fig. 1; Eqs. 4, 6, 7, 8). No training.

    python -m experiments.complementarity --model-a cache/real/qwen2.5-coder-0.5b-instruct \
        --model-b cache/real/smollm2-135m-instruct --data gsm8k --k 50 --n 8

Three phases, each resumable (a killed run starts again where it stopped):
    sample   K problems of a real data set (machinery/tasks.py's loaders on the local JSONL of `python -m machinery.pairs
             fetch`, chosen by --seed); each model samples n responses per problem at --temperature
             (rollout.sample_groups, the prompt of tasks.encode_prompt: the chat template unless
             --plain-prompt), graded by verifier.reward (the paper's boxed rule unless --lenient-answers);
             k_M(q) = model M's successes. A line per problem in <out>/samples_a.jsonl, samples_b.jsonl:
             texts, finished flags, rewards, each response's Eq. 6 mean generation log-prob.
    score    Eq. 7 per direction source -> receiver: the receiver re-tokenises each peer text
             (rollout.retokenize) after its own prompt encoding and scores it at the same temperature
             (rollout.token_logprobs); s = exp(receiver's mean log-prob - source's own)
             (loss.compatibility_score). By default only Eq. 4's candidates (the receiver failed all n,
             the source's group is mixed); --score all scores every peer response. A line per problem
             in <out>/scores_a_to_b.jsonl, scores_b_to_a.jsonl. A text that re-tokenises to nothing is
             not scored (s = null), as graft_min.graft_groups drops it.
    report   per model pass@1 and the all-fail / mixed / all-success shares; Fig. 1: of each receiver's
             all-fail prompts, the share where the peer has >= 1 success and where its group is mixed;
             the k_A x k_B count matrix; per direction the s quantiles (10%, median, 90%) of correct and
             of wrong peer responses and the admitted share (s > delta, Eq. 8) for delta 0.5 ... 0.9 (the
             paper's 0.8); the mean log-prob per token, receiver vs source; the wall time per phase.
             Written next to the folder: <out>.json, <out>_heatmap.png, <out>_compatibility.png,
             <out>_admitted.png (default out: results/real_complementarity).

Resume: <out>/config.json holds the settings that define the measurement (MUST_MATCH); a run with
other values there is refused with the differing keys (runlog.check_config). Batch sizes, chunk size,
threads, --score and --delta may change. Each chunk of problems is sampled under its own seed, so
an unbroken run and a resumed one with the same --chunk draw the same numbers (one CPU, same threads).

MATH levels (--math-levels 1,2): tasks.load_math_train / load_benchmark drop the `level` field, so this
script reads it from the same file (a problem's id "math/<row>" is its row in the file).
"""

import argparse
import json
import os
import random
import time
import zlib

import numpy as np
import torch
from tqdm import tqdm

import loss
import rollout
from verifier import reward
from machinery import pairs, plots, runlog, tasks

MODELS = ("a", "b")
DIRECTIONS = (("a", "b"), ("b", "a"))  # (source, receiver)
DELTAS = (0.5, 0.6, 0.7, 0.8, 0.9)  # admitted share vs delta; the paper's delta is 0.8
# config.json keys that define what is measured: a resume must keep them
MUST_MATCH = ("model_a", "model_b", "data", "data_file", "math_levels", "k", "n", "temperature",
              "max_new_tokens", "seed", "plain_prompt", "lenient_answers")




class UsageError(ValueError):
    """A setting or a file this script cannot use; the message names it and the fix."""


# ---------------------------------------------------------------- problems

def math_level(value):
    """MATH's level as an int: "Level 2" (MATH train) or 2 (MATH-500); None for "Level ?" or none."""
    digits = "".join(ch for ch in str(value) if ch.isdigit())
    return int(digits) if digits else None


def select_problems(data, path, k, seed, levels=None):
    """K problems of data set `data` read from `path`, drawn without replacement by `seed`
    (only those of MATH `levels` when given)."""
    pool = tasks.load_fetched(data, path)
    if levels:
        if data not in ("math", "math500"):
            raise UsageError(f"--math-levels: {data} has no MATH levels; use --data math or math500, or drop the flag")
        level = {i: math_level(row.get("level")) for i, (_, row) in enumerate(tasks.read_rows(path))}
        pool = [p for p in pool if level[int(p.id.rsplit("/", 1)[1])] in levels]
    if k > len(pool):
        raise UsageError(f"--k {k}: {path} has only {len(pool)} problems"
                         f"{' of levels ' + ','.join(map(str, levels)) if levels else ''}; give --k {len(pool)} or less")
    return random.Random(f"complementarity-{seed}").sample(pool, k)


# ---------------------------------------------------------------- resumable JSONL

def read_done(path):
    """The records of a JSONL file written by this script, {id: record}. A torn last line (a kill during
    the write) is cut off the file; a bad line before the last is an error naming the file and line."""
    if not os.path.exists(path):
        return {}
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    done, good_bytes = {}, 0
    for i, line in enumerate(lines):
        if not line.strip():
            good_bytes += len(line) + 1
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            if any(rest.strip() for rest in lines[i + 1:]):
                raise UsageError(f"{path}, line {i + 1}: not valid JSON ({e.msg}); delete the file to redo "
                                 f"its phase") from None
            with open(path, "r+b") as f:  # the torn last line: drop it, redo its problem
                f.truncate(good_bytes)
            break
        done[record["id"]] = record
        good_bytes += len(line) + 1
    return done


def chunks(items, size):
    """[(chunk index, items of the chunk)] in order; a chunk's index is fixed by its place in `items`."""
    return [(c, items[c * size:(c + 1) * size]) for c in range((len(items) + size - 1) // size)]


def chunk_seed(seed, name, c):
    return zlib.crc32(f"complementarity/{seed}/{name}/{c}".encode())


# ---------------------------------------------------------------- phase 1: sample and grade

def sample_model(name, policy, problems, cfg, path, sampler=rollout.sample_groups):
    """n responses per problem from one model, graded; policy() loads its (model, tokenizer) when first needed.
    A line per problem appended to `path` after each chunk, problems already there skipped; sampler stands
    in for rollout.sample_groups in tests. Returns {problem id: record}."""
    done = read_done(path)
    todo = [(c, [p for p in chunk if p.id not in done]) for c, chunk in chunks(problems, cfg.chunk)]
    todo = [(c, chunk) for c, chunk in todo if chunk]
    model, tok = policy() if todo else (None, None)
    for c, chunk in tqdm(todo, desc=f"sample {name.upper()}", unit="chunk"):
        t0 = time.time()
        torch.manual_seed(chunk_seed(cfg.seed, name, c))
        ro = sampler(model, tok, [tasks.encode_prompt(tok, p) for p in chunk], cfg.n, cfg.max_new_tokens,
                     cfg.temperature, gen_batch=cfg.gen_batch, score_batch=cfg.score_batch,
                     desc=f"{name.upper()}, chunk {c + 1}")  # a bar by token inside the chunk
        mean_lp = ro.mean_logprobs().tolist()  # [G * n] Eq. 6 under the source, on its own tokens
        seconds = (time.time() - t0) / len(chunk)
        for g, p in enumerate(chunk):
            rows = range(g * cfg.n, (g + 1) * cfg.n)
            record = {"id": p.id, "gold": p.answer, "texts": [ro.texts[j] for j in rows],
                      "finished": [ro.finished[j] for j in rows],
                      "rewards": [reward(ro.texts[j], p.answer, require_box=not cfg.lenient_answers) for j in rows],
                      "mean_logprob": [mean_lp[j] for j in rows], "tokens": [len(ro.response_ids[j]) for j in rows],
                      "seconds": seconds}
            runlog.append_jsonl(path, record)
            done[p.id] = record
    return done


# ---------------------------------------------------------------- phase 2: Eq. 7 per direction

def is_candidate(k_src, k_recv, n):
    """Eq. 4: the receiver failed all n, and the source's group is mixed."""
    return k_recv == 0 and 0 < k_src < n


@torch.no_grad()
def score_direction(name, src, recv, recv_policy, problems, cfg, path):
    """Eq. 7 for the source's responses on the receiver's side; name ("A -> B") labels the progress bar.
    src, recv: {problem id: sample record}; recv_policy() loads the receiver's (model, tokenizer) when first
    needed. Scores Eq. 4's candidates (cfg.score == "candidates") or every problem ("all"); a line per problem
    appended to `path`, problems already there skipped. Returns {problem id: record}."""
    done = read_done(path)
    wanted = [p for p in problems if cfg.score == "all"
              or is_candidate(sum(src[p.id]["rewards"]), sum(recv[p.id]["rewards"]), cfg.n)]
    todo = [p for p in wanted if p.id not in done]
    model, tok = recv_policy() if todo else (None, None)
    for _, chunk in tqdm(chunks(todo, cfg.chunk), desc=f"score {name}", unit="chunk"):
        t0 = time.time()
        rows = [(p, i) for p in chunk for i in range(cfg.n)]  # [P * n] every peer response of the chunk
        resp = rollout.retokenize([src[p.id]["texts"][i] for p, i in rows],
                                  [src[p.id]["finished"][i] for p, i in rows], tok)  # receiver's ids
        keep = [j for j, r in enumerate(resp) if r]  # a text that re-tokenises to nothing is not scored
        recv_mean, s = [None] * len(rows), [None] * len(rows)
        if keep:
            prompts = {p.id: tasks.encode_prompt(tok, p) for p in chunk}  # the receiver's own prompt encoding
            lp, mask = rollout.token_logprobs(model, [prompts[rows[j][0].id] for j in keep], [resp[j] for j in keep],
                                              tok.pad_token_id, cfg.temperature, micro_batch=cfg.score_batch,
                                              desc=f"score {name}: micro-batches")
            r_mean = loss.mean_logprob(lp, mask).float().cpu()  # [len(keep)] Eq. 6, receiver side
            s_mean = torch.tensor([src[rows[j][0].id]["mean_logprob"][rows[j][1]] for j in keep])  # [len(keep)] source
            for j, r, x in zip(keep, r_mean.tolist(), loss.compatibility_score(r_mean, s_mean).tolist()):  # Eq. 7
                recv_mean[j], s[j] = r, x
        seconds = (time.time() - t0) / len(chunk)
        for g, p in enumerate(chunk):
            mine = slice(g * cfg.n, (g + 1) * cfg.n)
            record = {"id": p.id, "s": s[mine], "recv_mean_logprob": recv_mean[mine],
                      "src_mean_logprob": src[p.id]["mean_logprob"], "correct": src[p.id]["rewards"],
                      "recv_tokens": [len(r) for r in resp[mine]],
                      "candidate": is_candidate(sum(src[p.id]["rewards"]), sum(recv[p.id]["rewards"]), cfg.n),
                      "seconds": seconds}
            runlog.append_jsonl(path, record)
            done[p.id] = record
    return done


# ---------------------------------------------------------------- phase 3: the report (pure functions)

def fig1(k, n):
    """Fig. 1 from success counts k = {"a": [K], "b": [K]} (same problem order) out of n each.

    Per model: pass@1, all-fail / mixed / all-success shares. Per direction "s_to_r" (source -> receiver):
    the receiver's all-fail prompts, and of them the share where the source has >= 1 success and where
    its group is mixed (Eq. 4's candidates; None without all-fail prompts). matrix[k_B][k_A]: prompts."""
    out = {"models": {}, "directions": {}, "matrix": [[0] * (n + 1) for _ in range(n + 1)]}
    for m in MODELS:
        km = k[m]
        out["models"][m] = {"pass@1": sum(km) / (n * len(km)), "all_fail": sum(x == 0 for x in km) / len(km),
                            "mixed": sum(0 < x < n for x in km) / len(km), "all_success": sum(x == n for x in km) / len(km)}
    for s, r in DIRECTIONS:
        fail = [q for q, x in enumerate(k[r]) if x == 0]
        out["directions"][f"{s}_to_{r}"] = {
            "receiver_all_fail": len(fail),
            "peer_any_success_share": sum(k[s][q] > 0 for q in fail) / len(fail) if fail else None,
            "peer_mixed_share": sum(0 < k[s][q] < n for q in fail) / len(fail) if fail else None}
    for ka, kb in zip(k["a"], k["b"]):
        out["matrix"][kb][ka] += 1
    return out


def quantiles(values):
    """{"p10", "median", "p90"} (linear interpolation, as numpy), or None for no values."""
    if not values:
        return None
    return dict(zip(("p10", "median", "p90"), (float(x) for x in np.quantile(values, [0.1, 0.5, 0.9]))))


def gate_stats(records, deltas=DELTAS):
    """Eq. 7-8 statistics over the peer responses of score records: counts, s quantiles and the share
    admitted (s > delta) for each delta, for all responses and split by the source's reward. Responses not
    scored (s None: empty after re-tokenisation) count in the shares and can never be admitted. mean_logprob:
    the mean over scored responses of Eq. 6 (each response's mean log-prob per token), receiver and source."""
    rows = [(s, c, rm, sm) for rec in records for s, c, rm, sm in
            zip(rec["s"], rec["correct"], rec["recv_mean_logprob"], rec["src_mean_logprob"])]
    out = {"responses": len(rows), "correct": sum(c > 0 for _, c, _, _ in rows),
           "not_scored": sum(s is None for s, _, _, _ in rows), "s": {}, "admitted": {}}
    for kind, keep in (("all", lambda c: True), ("correct", lambda c: c > 0), ("wrong", lambda c: c == 0)):
        s = [x for x, c, _, _ in rows if keep(c)]
        scored = [x for x in s if x is not None]
        out["s"][kind] = quantiles(scored)
        out["admitted"][kind] = {str(d): sum(x > d for x in scored) / len(s) if s else None for d in deltas}
    scored = [(rm, sm) for s, _, rm, sm in rows if s is not None]
    out["mean_logprob"] = {"receiver": sum(r for r, _ in scored) / len(scored) if scored else None,
                           "source": sum(q for _, q in scored) / len(scored) if scored else None}
    return out


def make_report(problems, samples, scores, cfg):
    """The whole report as a dict (<out>.json). samples: {"a", "b": {id: record}}; scores:
    {"a_to_b", "b_to_a": {id: record}}; cfg: the run's settings (an argparse.Namespace)."""
    ids = [p.id for p in problems]
    k = {m: [int(sum(samples[m][q]["rewards"])) for q in ids] for m in MODELS}
    report = {"settings": {key: getattr(cfg, key) for key in MUST_MATCH + ("score", "delta")},
              "problems": ids, **fig1(k, cfg.n)}
    for m in MODELS:
        recs = [samples[m][q] for q in ids]
        report["models"][m].update({
            "path": getattr(cfg, f"model_{m}"),
            "finished": sum(sum(r["finished"]) for r in recs) / (cfg.n * len(recs)),
            "mean_tokens": sum(sum(r["tokens"]) for r in recs) / (cfg.n * len(recs)),
            "mean_logprob": sum(sum(r["mean_logprob"]) for r in recs) / (cfg.n * len(recs))})
    for s, r in DIRECTIONS:
        d = f"{s}_to_{r}"
        recs = [scores[d][q] for q in ids if q in scores[d]]
        report["directions"][d].update({
            "candidates": sum(is_candidate(a, b, cfg.n) for a, b in zip(k[s], k[r])),
            "eq4_candidates": gate_stats([x for x in recs if x["candidate"]]),
            "all_peer_responses": gate_stats(recs) if len(recs) == len(ids) else None})
    report["seconds"] = {f"sample_{m}": sum(samples[m][q]["seconds"] for q in ids) for m in MODELS}
    report["seconds"].update({f"score_{d}": sum(x["seconds"] for x in scores[d].values()) for d in scores})
    return report


def _count(g, kind):
    """How many of gate_stats' responses are of this kind: all, correct or wrong."""
    return {"all": g["responses"], "correct": g["correct"], "wrong": g["responses"] - g["correct"]}[kind]


def _pct(x):
    return "    -" if x is None else f"{x:5.3f}"


def print_report(report):
    """The report as printed tables (see the module docstring)."""
    st, n = report["settings"], report["settings"]["n"]
    name = {m: os.path.basename(os.path.normpath(report["models"][m]["path"])) for m in MODELS}
    print(f"\nA = {name['a']}, B = {name['b']}; {st['data']}"
          f"{' levels ' + ','.join(map(str, st['math_levels'])) if st['math_levels'] else ''}, K = {st['k']}, "
          f"n = {n}, T = {st['temperature']}, <= {st['max_new_tokens']} new tokens, "
          f"{'lenient' if st['lenient_answers'] else 'boxed'} answers")
    print(f"\n{'model':5s} {'pass@1':>7s} {'all-fail':>9s} {'mixed':>6s} {'all-success':>12s} {'finished':>9s} "
          f"{'tokens':>7s} {'mean lp':>8s}")
    for m in MODELS:
        v = report["models"][m]
        print(f"{m.upper():5s} {v['pass@1']:7.3f} {v['all_fail']:9.3f} {v['mixed']:6.3f} {v['all_success']:12.3f} "
              f"{v['finished']:9.3f} {v['mean_tokens']:7.1f} {v['mean_logprob']:8.3f}")
    print("\nFig. 1: of the receiver's all-fail prompts, the share where the peer has >= 1 success, and where "
          "its group is mixed (Eq. 4)")
    print(f"{'peer -> receiver':16s} {'receiver all-fail':>18s} {'peer >= 1':>10s} {'peer mixed':>11s}")
    for d, v in report["directions"].items():
        s, r = d.split("_to_")
        print(f"{s.upper() + ' -> ' + r.upper():16s} {v['receiver_all_fail']:18d} {_pct(v['peer_any_success_share']):>10s} "
              f"{_pct(v['peer_mixed_share']):>11s}")
    print("\nprompts by success counts (rows k_B, columns k_A)\n       " + "".join(f"{f'k_A={j}':>7s}" for j in range(n + 1)))
    for i, row in enumerate(report["matrix"]):
        print(f"k_B={i:<3d}" + "".join(f"{c:7d}" for c in row))
    deltas = list(next(iter(report["directions"].values()))["eq4_candidates"]["admitted"]["all"])
    print("\nEq. 7: s of peer responses (10% / median / 90%) and the share admitted, s > delta "
          f"(* = --delta {st['delta']})")
    print(f"{'peer -> receiver':16s} {'responses of':24s} {'kind':7s} {'n':>5s} {'s 10%':>6s} {'median':>6s} {'90%':>6s} "
          + " ".join(f"{d + ('*' if float(d) == st['delta'] else ''):>5s}" for d in deltas) + "  mean lp recv / src")
    for d, v in report["directions"].items():
        s, r = d.split("_to_")
        for which in ("eq4_candidates", "all_peer_responses"):
            g = v[which]
            if g is None:
                continue
            head = f"{s.upper() + ' -> ' + r.upper():16s} {which.replace('_', ' '):24s}"
            if not g["responses"]:
                print(f"{head} none")
                continue
            for kind in ("all", "correct", "wrong"):
                q = g["s"][kind] or {"p10": None, "median": None, "p90": None}
                lp = g["mean_logprob"]
                tail = f"  {lp['receiver']:.2f} / {lp['source']:.2f}" if kind == "all" and lp["receiver"] is not None else ""
                print(f"{head} {kind:7s} {_count(g, kind):5d} {_pct(q['p10']):>6s} {_pct(q['median']):>6s} "
                      f"{_pct(q['p90']):>6s} " + " ".join(f"{_pct(g['admitted'][kind][x]):>5s}" for x in deltas) + tail)
    print("\nwall time (s): " + ", ".join(f"{k.replace('_', ' ')} {v:.0f}" for k, v in report["seconds"].items()))


# ---------------------------------------------------------------- plots

def plot_report(report, scores, prefix):
    """<prefix>_heatmap.png (k_A x k_B, plots.plot_success_grid as for a run's heatmap), _compatibility.png
    (histograms of s per direction, correct vs wrong peer responses, delta marked), _admitted.png (admitted share vs delta)."""
    delta = report["settings"]["delta"]
    label = "[A = {}, B = {}]".format(*(os.path.basename(os.path.normpath(report["models"][m]["path"])) for m in MODELS))
    paths = [f"{prefix}_{name}.png" for name in ("heatmap", "compatibility", "admitted")]
    grid = report["matrix"]  # [k_B][k_A]
    plots.plot_success_grid(grid, paths[0], f"Problems by success counts\n{label}", "problems")
    fig, axes = plots.plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, (s, r) in zip(axes, DIRECTIONS):
        d = f"{s}_to_{r}"
        for kind, color, keep in (("correct", "tab:green", lambda c: c > 0), ("wrong", "tab:red", lambda c: c == 0)):
            vals = [min(x, 2.0) for rec in scores[d].values() for x, c in zip(rec["s"], rec["correct"])
                    if x is not None and keep(c)]
            if vals:
                ax.hist(vals, bins=40, range=(0, 2), alpha=0.55, color=color,
                        label=f"{kind}: {len(vals)}, {sum(x > delta for x in vals) / len(vals):.0%} admitted")
        ax.axvline(delta, color="k", linestyle="--", label=f"delta = {delta}")
        ax.set_title(f"peer {s.upper()} -> receiver {r.upper()}")
        ax.set_xlabel("compatibility score s (Eq. 7), clipped at 2 for display")
        ax.legend(fontsize=8)
    axes[0].set_ylabel("peer responses scored")
    fig.suptitle(f"Compatibility of peer responses {label}")
    plots._save(fig, paths[1])
    which = [w for w in ("eq4_candidates", "all_peer_responses")
             if any(v[w] is not None for v in report["directions"].values())]
    fig, axes = plots.plt.subplots(1, len(which), figsize=(6 * len(which), 4), sharey=True, squeeze=False)
    for ax, w in zip(axes[0], which):
        for (s, r), color in zip(DIRECTIONS, ("tab:orange", "tab:blue")):
            g = report["directions"][f"{s}_to_{r}"][w]
            for kind, style in (("all", "-"), ("correct", "--"), ("wrong", ":")):
                xs = [float(x) for x, y in g["admitted"][kind].items() if y is not None]
                if xs:
                    ax.plot(xs, [g["admitted"][kind][str(x)] for x in xs], style, marker="o", color=color,
                            label=f"{s.upper()} -> {r.upper()}, {kind} ({_count(g, kind)})")
        if not any(report["directions"][f"{s}_to_{r}"][w]["responses"] for s, r in DIRECTIONS):
            ax.text(0.5, 0.5, "none in either direction", ha="center", transform=ax.transAxes)
        ax.axvline(0.8, color="k", linestyle="--", lw=0.8, label="paper's delta 0.8")
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("delta")
        ax.set_title("Eq. 4 candidates' responses" if w == "eq4_candidates" else "all peer responses")
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("share admitted (s > delta)")
    fig.suptitle(f"Admitted share vs delta {label}")
    plots._save(fig, paths[2])
    return paths


# ---------------------------------------------------------------- the run

def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Fig. 1 and Eq. 7-8's gate on a real pair: sample, grade, score, report.")
    a = p.add_argument
    a("--model-a", required=True, help="model A: a local folder (e.g. cache/real/qwen2.5-coder-0.5b-instruct) or hub id")
    a("--model-b", required=True, help="model B: a local folder or hub id")
    a("--data", default="gsm8k", choices=sorted(tasks.FETCHED), help="data set: gsm8k = GSM8K test; math = MATH train")
    a("--data-file", default=None,
      help="its JSONL file (default: the one `python -m machinery.pairs fetch` wrote under the cache, tasks.data_files)")
    a("--cache-dir", default=None, help="cache folder of the fetched data (default ./cache or $GRAFT_MIN_CACHE)")
    a("--math-levels", default=None, help="only MATH problems of these levels, e.g. 1,2 (--data math or math500)")
    a("--k", type=int, default=50, help="problems, drawn from the data set by --seed")
    a("--n", type=int, default=8, help="responses per problem and model (paper: 8)")
    a("--temperature", type=float, default=1.0, help="sampling and scoring temperature (paper: 1.0)")
    a("--max-new-tokens", type=int, default=256, help="response length limit")
    a("--seed", type=int, default=0, help="which problems, and the sampling seeds")
    a("--plain-prompt", action="store_true", help="bare question + suffix, no chat template (as graft_min.py's)")
    a("--lenient-answers", action="store_true", help="also grade unboxed final answers (as graft_min.py's)")
    a("--score", default="candidates", choices=["candidates", "all"],
      help="Eq. 7 for the peer responses of Eq. 4's candidates only, or for every peer response")
    a("--delta", type=float, default=0.8, help="the gate's threshold marked in the report (paper: 0.8)")
    a("--chunk", type=int, default=4, help="problems per generate call and per resumable append")
    a("--gen-batch", type=int, default=None, help="sequences per generate call (default: the whole chunk)")
    a("--score-batch", type=int, default=4, help="sequences per scoring forward (bounds the [B, T, vocab] log-probs)")
    a("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    a("--device", default="cpu", help="cpu or cuda")
    a("--out", default="results/real_complementarity",
      help="folder of the samples and scores (resumable); the report goes to <out>.json and <out>_*.png")
    cfg = p.parse_args(argv)
    if cfg.math_levels:
        try:
            cfg.math_levels = sorted({int(x) for x in cfg.math_levels.split(",")})
        except ValueError:
            p.error(f"--math-levels {cfg.math_levels!r}: give levels as integers, e.g. 1,2")
    for flag in ("k", "n", "max_new_tokens", "chunk"):
        if getattr(cfg, flag) < (2 if flag == "n" else 1):
            p.error(f"--{flag.replace('_', '-')} {getattr(cfg, flag)}: must be at least {2 if flag == 'n' else 1}")
    cfg.out = os.path.normpath(cfg.out)
    if cfg.data_file is None:
        folder = os.path.join(cfg.cache_dir or pairs.default_cache_dir(), "data", "pypi")
        cfg.data_file = tasks.data_files(folder)[tasks.FETCHED[cfg.data]]
        if not os.path.exists(cfg.data_file):
            p.error(f"{cfg.data_file}: not found; run `python -m machinery.pairs fetch` (or set GRAFT_MIN_CACHE / --cache-dir "
                    f"to its cache), or give the file with --data-file")
    cfg.data_file = os.path.abspath(cfg.data_file)
    for m in MODELS:  # folders by absolute path, so a resume from another directory compares equal
        path = getattr(cfg, f"model_{m}")
        setattr(cfg, f"model_{m}", os.path.abspath(path) if os.path.isdir(path) else path)
    return cfg


def check_folder(cfg):
    """Check that the samples and scores in <out> were made with this measurement's settings (config.json),
    or (re)write config.json where <out> holds none yet (so a run that stopped before its first chunk, e.g. on
    a wrong model path, can be started again with other settings)."""
    path = os.path.join(cfg.out, "config.json")
    config = {key: getattr(cfg, key) for key in MUST_MATCH}
    started = os.path.isdir(cfg.out) and any(f.endswith(".jsonl") for f in os.listdir(cfg.out))
    if started and not os.path.exists(path):
        raise UsageError(f"{cfg.out}: holds samples or scores but no config.json, so their settings cannot be "
                         f"checked; measure into another folder (--out)")
    if started:
        runlog.check_config(runlog.read_json(path), config, path, keys=MUST_MATCH,
                            fix="resume with the saved values, or measure into another folder (--out)")
    else:
        runlog.write_json(path, config)


def run(cfg, sampler=rollout.sample_groups):
    """The three phases (each skipping what <out> already holds), then the report. Returns it."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    problems = select_problems(cfg.data, cfg.data_file, cfg.k, cfg.seed, cfg.math_levels)
    check_folder(cfg)
    loaded, load_seconds = {}, {}

    def policy(m):
        def load():
            if m not in loaded:
                t0 = time.time()
                model, tok = pairs.load_policy(getattr(cfg, f"model_{m}"), cfg.device, torch.float32)
                if cfg.plain_prompt:
                    tok.chat_template = None
                loaded[m], load_seconds[m] = (model, tok), time.time() - t0
            return loaded[m]
        return load

    samples = {m: sample_model(m, policy(m), problems, cfg, os.path.join(cfg.out, f"samples_{m}.jsonl"), sampler)
               for m in MODELS}
    scores = {f"{s}_to_{r}": score_direction(f"{s.upper()} -> {r.upper()}", samples[s], samples[r], policy(r),
                                             problems, cfg, os.path.join(cfg.out, f"scores_{s}_to_{r}.jsonl"))
              for s, r in DIRECTIONS}
    report = make_report(problems, samples, scores, cfg)
    report["seconds"].update({f"load_{m} (this run)": t for m, t in load_seconds.items()})
    runlog.write_json(cfg.out + ".json", report)
    print_report(report)
    paths = plot_report(report, scores, cfg.out)
    print(f"report: {cfg.out}.json   plots: {', '.join(paths)}   samples and scores: {cfg.out}/")
    return report


def main(argv=None):
    cfg = parse_args(argv)
    try:
        return run(cfg)
    except (UsageError, runlog.ConfigMismatch, pairs.ModelNotAvailable, FileNotFoundError) as e:
        raise SystemExit(f"experiments/complementarity.py: {e}") from None


if __name__ == "__main__":
    main()
