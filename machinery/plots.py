"""
Plots of a run folder (or of a GRPO-vs-GRAFT comparison folder), as PNG files.

    complementarity.png   paper Fig. 1 (right): per step, of the receiver's all-fail prompts,
                          the share where the peer has at least one success, and the share where
                          the peer's group is mixed (Eq. 4's candidates), both directions;
                          dotted lines are the run means
    success_heatmap.png   k_A x k_B: how many prompts had k_A successes for A and k_B for B
    accuracy.png          held-out pass@1 over steps, per model and family, one line per run
    training.png          training reward (T = 1) per model and family over steps, and the entropy of
                          the sampled tokens: is RL learning?
    learning.png          one model with no peer (--pair coder): per family, held-out pass@1, finished share and
                          pass@1 among finished responses over steps, and the training reward (in place of
                          complementarity.png and success_heatmap.png, which need a peer)
    plot_seed_bands       held-out accuracy over steps as mean +- std over seeds (experiments/reproduce.py)
    plot_regimes          experiments/regimes.py's map: GRAFT's edge against the receiver's start, and the gate
    compatibility.png     histogram of the compatibility score s per direction, with delta (Eq. 8)
    clipping.png          share of clipped tokens, self vs peer, over steps (paper Table 9)
    exchange.png          groups exchanged and peer responses admitted per step

    python -m machinery.plots runs/tiny              # a comparison folder (grpo/ and graft/ inside)
    python -m machinery.plots runs/a runs/b --out X  # any run folders; PNGs go to --out (default: the first)
    python -m machinery.plots runs/tiny --table      # print the training reward per family, every 10 steps
"""

import argparse
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from machinery import runlog  # noqa: E402

DIRECTION = {"a": "B -> A", "b": "A -> B"}  # metrics are logged per receiver


def _series(metrics, model, key):
    rows = [m for m in metrics if m["model"] == model and m.get(key) is not None]
    return [m["step"] for m in rows], [m[key] for m in rows]


def _smooth(y, k=5):
    return [sum(y[max(0, i - k + 1):i + 1]) / len(y[max(0, i - k + 1):i + 1]) for i in range(len(y))]


def plot_complementarity(metrics, path, title=""):
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, key, label in ((axes[0], "peer_any_success_on_all_fail", "peer has >= 1 success"),
                           (axes[1], "peer_mixed_on_all_fail", "peer group mixed (passes Eq. 4)")):
        for model, color in (("a", "tab:blue"), ("b", "tab:orange")):
            x, y = _series(metrics, model, key)
            if not y:
                continue
            ax.plot(x, _smooth(y), color=color, label=f"{DIRECTION[model]} (5-step mean)")
            mean = sum(y) / len(y)
            ax.axhline(mean, color=color, linestyle=":", label=f"{DIRECTION[model]} run mean {mean:.1%}")
        ax.set_title(f"receiver all-fail prompts: {label}")
        ax.set_xlabel("training step")
        ax.set_ylim(0, 1)
        ax.legend(fontsize=8)
    axes[0].set_ylabel("share of the receiver's all-fail prompts")
    fig.suptitle(f"Complementarity (paper Fig. 1, right) {title}")
    _save(fig, path)


def plot_heatmap(trajectories, n, path, title=""):
    """A run's prompts by success counts, k_A x k_B over all steps (paper Fig. 1, left)."""
    k = {}
    for t in trajectories:
        k.setdefault((t["step"], t["prompt_id"]), {})[t["model"]] = int(sum(t["rewards"]))
    grid = [[0] * (n + 1) for _ in range(n + 1)]  # [k_B][k_A]
    for pair in k.values():
        if "a" in pair and "b" in pair:
            grid[pair["b"]][pair["a"]] += 1
    plot_success_grid(grid, path, "Prompts by success counts" + (f"\n{title}" if title else ""), "prompts (all steps)")


def plot_success_grid(grid, path, title, unit):
    """Draw a [k_B][k_A] grid of counts with each count written in its cell, under `title` (lines split by \\n)."""
    n = len(grid) - 1
    fig, ax = plt.subplots(figsize=(6, 5))
    im = ax.imshow(grid, origin="lower", cmap="viridis")
    for i in range(n + 1):
        for j in range(n + 1):
            ax.text(j, i, grid[i][j], ha="center", va="center", color="w" if grid[i][j] < max(map(max, grid)) / 2 else "k",
                    fontsize=7)
    ax.set_xticks(range(n + 1))
    ax.set_yticks(range(n + 1))
    ax.set_xlabel("k_A: successes of model A (of n)")
    ax.set_ylabel("k_B: successes of model B (of n)")
    ax.set_title(title + "\n(bottom row: B all-fail; left column: A all-fail)", fontsize=9)
    fig.colorbar(im, ax=ax, label=unit)
    _save(fig, path)


def plot_accuracy(runs, path):
    """runs: {label: evals records}."""
    models = sorted({e["model"] for evals in runs.values() for e in evals})
    families = sorted({k for evals in runs.values() for e in evals for k in runlog.eval_families(e)})
    fig, axes = plt.subplots(len(models), len(families), figsize=(5 * len(families), 3.6 * len(models)), squeeze=False)
    for i, model in enumerate(models):
        for j, fam in enumerate(families):
            ax = axes[i][j]
            for label, evals in runs.items():
                rows = [e for e in evals if e["model"] == model and fam in e]
                if rows:
                    ax.plot([e["step"] for e in rows], [e[fam] for e in rows], marker="o", ms=3, label=label)
            ax.set_title(f"model {model.upper()}: {fam}")
            ax.set_xlabel("training step")
            ax.set_ylabel("held-out pass@1")
            ax.legend(fontsize=8)
    fig.suptitle("Held-out accuracy")
    _save(fig, path)


def plot_seed_bands(runs, path, title="Held-out accuracy over training"):
    """runs: {label: {seed: evals records}}. Per model and family, each label's mean over seeds
    at each evaluated step, with a band of +- one standard deviation across seeds."""
    import statistics

    records = [e for seeds in runs.values() for evals in seeds.values() for e in evals]
    models = sorted({e["model"] for e in records})
    families = sorted({k for e in records for k in runlog.eval_families(e)})
    fig, axes = plt.subplots(len(models), len(families), figsize=(5 * len(families), 3.6 * len(models)), squeeze=False)
    for i, model in enumerate(models):
        for j, fam in enumerate(families):
            ax = axes[i][j]
            for label, seeds in runs.items():
                at = {}  # step -> values over seeds
                for evals in seeds.values():
                    for e in evals:
                        if e["model"] == model and fam in e:
                            at.setdefault(e["step"], []).append(e[fam])
                steps = sorted(at)
                if not steps:
                    continue
                mean = [statistics.mean(at[s]) for s in steps]
                sd = [statistics.stdev(at[s]) if len(at[s]) > 1 else 0.0 for s in steps]
                line, = ax.plot(steps, mean, marker="o", ms=3, label=f"{label} ({len(seeds)} seeds)")
                ax.fill_between(steps, [m - d for m, d in zip(mean, sd)], [m + d for m, d in zip(mean, sd)],
                                color=line.get_color(), alpha=0.15)
            ax.set_title(f"model {model.upper()}: {fam}")
            ax.set_xlabel("training step")
            ax.set_ylabel("held-out pass@1 (mean +- std over seeds)")
            ax.legend(fontsize=8)
    fig.suptitle(title)
    _save(fig, path)


def plot_training(runs, path):
    """runs: {label: metrics records}. Rows: models; columns: families' training reward, then entropy."""
    models = sorted({m["model"] for ms in runs.values() for m in ms})
    families = sorted({f for ms in runs.values() for m in ms for f in m["families"]})
    fig, axes = plt.subplots(len(models), len(families) + 1, figsize=(4.5 * (len(families) + 1), 3.4 * len(models)),
                             squeeze=False)
    for i, model in enumerate(models):
        for label, ms in runs.items():
            rows = [m for m in ms if m["model"] == model]
            steps = [m["step"] for m in rows]
            for j, fam in enumerate(families):
                axes[i][j].plot(steps, _smooth([m["families"][fam]["reward"] for m in rows], 10), label=label)
            axes[i][-1].plot(steps, _smooth([m["entropy"] for m in rows], 10), label=label)
        for j, fam in enumerate(families):
            axes[i][j].set_title(f"model {model.upper()}: {fam}, training reward (T = 1)")
        axes[i][-1].set_title(f"model {model.upper()}: entropy of sampled tokens (nats)")
        for ax in axes[i]:
            ax.set_xlabel("training step")
            ax.legend(fontsize=8)
    fig.suptitle("Training curves (10-step means)")
    _save(fig, path)


def plot_learning(evals, metrics, path, title=""):
    """One model's run (e.g. --pair coder): per family, held-out pass@1, the share of samples that finished within
    the token budget and pass@1 among those (graft_min.evaluate) over steps; last panel, the training reward and
    finished share of the sampled responses (T = 1). Did it learn the task, or to finish?"""
    rows = [e for e in evals if "finished" in e]
    families = runlog.eval_families(rows[0]) if rows else []
    fig, axes = plt.subplots(1, len(families) + 1, figsize=(4.2 * (len(families) + 1), 3.6), squeeze=False)
    steps = [e["step"] for e in rows]
    for ax, fam in zip(axes[0], families):
        ax.plot(steps, [e[fam] for e in rows], marker="o", ms=3, label="pass@1")
        ax.plot(steps, [e["finished"][fam] for e in rows], "--", marker="s", ms=3, label="finished")
        among = [(e["step"], e["pass_finished"][fam]) for e in rows if e["pass_finished"][fam] is not None]
        ax.plot([x for x, _ in among], [y for _, y in among], ":", marker="^", ms=3, label="pass@1 among finished")
        ax.set_title(f"held-out {fam}")
    ms = [m for m in metrics if "finished_share" in m]
    axes[0][-1].plot([m["step"] for m in ms], _smooth([m["reward_mean"] for m in ms]), label="reward (5-step mean)")
    axes[0][-1].plot([m["step"] for m in ms], _smooth([m["finished_share"] for m in ms]), "--", label="finished")
    axes[0][-1].set_title("training samples (T = 1)")
    for ax in axes[0]:
        ax.set_xlabel("training step")
        ax.set_ylim(0, 1)
        ax.legend(fontsize=8)
    fig.suptitle(f"Held-out pass@1, finished share and pass@1 among finished {title}")
    _save(fig, path)


def training_table(metrics, every=10):
    """Lines of text: per block of `every` steps and per model, the mean training reward and all-fail
    share of each family, the reward over all of them, the share of samples that finished within the budget
    ("-" for runs that predate it), the entropy of the sampled tokens, and the groups received from the peer."""
    families = sorted({f for m in metrics for f in m["families"]})
    lines = [f"{'steps':>9s} {'model':5s} " + " ".join(f"{f + ' reward':>11s} {f + ' all-fail':>13s}" for f in families)
             + f" {'reward':>7s} {'finished':>8s} {'entropy':>8s} {'received':>9s}"]
    last = max(m["step"] for m in metrics)
    for start in range(0, last + 1, every):
        for model in sorted({m["model"] for m in metrics}):
            rows = [m for m in metrics if m["model"] == model and start <= m["step"] < start + every]
            if not rows:
                continue
            mean = lambda f: sum(map(f, rows)) / len(rows)  # noqa: E731
            lines.append(f"{start:4d}-{rows[-1]['step']:<4d} {model:5s} " + " ".join(
                f"{mean(lambda m: m['families'][f]['reward']):11.3f} {mean(lambda m: m['families'][f]['all_fail']):13.3f}"
                for f in families) + f" {mean(lambda m: m['reward_mean']):7.3f} "
                + (f"{mean(lambda m: m['finished_share']):8.3f}" if all("finished_share" in m for m in rows) else f"{'-':>8s}")
                + f" {mean(lambda m: m['entropy']):8.3f} {mean(lambda m: m['selected']):9.1f}")
    return lines


def eval_table(evals):
    """Lines of a markdown table: per evaluation and model, held-out pass@1, the finished share and pass@1 among
    finished samples (graft_min.evaluate), each as `a / b / ...` over the families; [] for runs that predate them."""
    rows = [e for e in evals if "finished" in e]
    if not rows:
        return []
    families = runlog.eval_families(rows[0])
    cell = lambda d: " / ".join(f"{d[f]:.3f}" if d.get(f) is not None else "-" for f in families)  # noqa: E731
    return [f"| step | model | pass@1 ({' / '.join(families)}) | finished | pass@1 among finished |", "|---|---|---|---|---|"] + [
        f"| {e['step']} | {e['model']} | {cell(e)} | {cell(e['finished'])} | {cell(e['pass_finished'])} |" for e in rows]


def plot_compatibility(metrics, delta, path, title=""):
    fig, ax = plt.subplots(figsize=(7, 4))
    for model, color in (("a", "tab:blue"), ("b", "tab:orange")):
        s = [x for m in metrics if m["model"] == model for x in m.get("s_values", [])]
        if s:
            ax.hist([min(x, 2.0) for x in s], bins=40, range=(0, 2), alpha=0.55, color=color,
                    label=f"{DIRECTION[model]}: {len(s)} responses, {sum(x > delta for x in s) / len(s):.0%} admitted")
    ax.axvline(delta, color="k", linestyle="--", label=f"delta = {delta}")
    ax.set_xlabel("compatibility score s (Eq. 7), clipped at 2 for display")
    ax.set_ylabel("peer responses")
    ax.set_title(f"Compatibility of peer responses {title}")
    ax.legend(fontsize=8)
    _save(fig, path)


def plot_clipping(metrics, path, title=""):
    fig, ax = plt.subplots(figsize=(7, 4))
    for model, color in (("a", "tab:blue"), ("b", "tab:orange")):
        for key, style in (("clip_self", "-"), ("clip_peer", "--")):
            rows = [m for m in metrics if m["model"] == model and m["tokens_" + key[5:]] > 0]
            if rows:
                ax.plot([m["step"] for m in rows], [100 * m[key] for m in rows], style, color=color, alpha=0.8,
                        label=f"model {model.upper()} {key[5:]} tokens")
    ax.set_xlabel("training step")
    ax.set_ylabel("clipped tokens (%)")
    ax.set_title(f"Clipped-token share, self vs peer (paper Table 9) {title}")
    ax.legend(fontsize=8)
    _save(fig, path)


def plot_exchange(metrics, path, title=""):
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for model, color in (("a", "tab:blue"), ("b", "tab:orange")):
        x, sel = _series(metrics, model, "selected")
        _, adm = _series(metrics, model, "admitted")
        _, tot = _series(metrics, model, "peer_responses")
        axes[0].plot(x, sel, color=color, label=f"{DIRECTION[model]}: groups replaced")
        axes[1].plot(x, adm, color=color, label=f"{DIRECTION[model]}: admitted (s > delta)")
        axes[1].plot(x, tot, color=color, linestyle=":", label=f"{DIRECTION[model]}: considered")
    for ax, label in zip(axes, ("groups per step", "peer responses per step")):
        ax.set_xlabel("training step")
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    fig.suptitle(f"Exchange volume {title}")
    _save(fig, path)


def plot_regimes(results, path, eval_every, steps):
    """experiments/regimes.py's map. results: {point: {receiver: point_result}}. x: the receiver's own T = 1
    training reward on its weak sub-skill over the first 20% of GRPO (n)'s steps
    (docs/decisions.md#the-x-axis-of-the-regime-map). Top: GRAFT - GRPO (n) (filled) and GRPO (2n) - GRPO (n)
    (open) held-out pass@1 on that sub-skill, at the first evaluation and at the end, mean +- std over seeds;
    circles terse, squares narrated traces. Bottom: the share of peer responses the gate admitted, and the correct
    share of the groups sent vs admitted."""
    import statistics

    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    colors = {"a": "tab:blue", "b": "tab:orange"}
    for name, res in results.items():
        marker = "s" if "narrated" in name else "o"
        for m, r in res.items():
            c = colors[m]
            habit = name.split("_")[0].replace("habit", "h ")  # the knob's level, next to the GRAFT marker
            for ax, when in ((axes[0][0], "first"), (axes[0][1], "end")):
                for key, fill in (("graft", c), ("grpo2n", "none")):
                    ys = r[f"{key}_{when}"]
                    ax.errorbar(r["own_reward"], statistics.mean(ys), yerr=statistics.stdev(ys) if len(ys) > 1 else 0,
                                marker=marker, color=c, mfc=fill, ms=7, capsize=3, ls="none")
                ax.annotate(habit, (r["own_reward"], statistics.mean(r[f"graft_{when}"])), textcoords="offset points",
                            xytext=(6, 4), fontsize=7, color=c)
            axes[1][0].plot(r["own_reward"], r["admitted"], marker=marker, color=c, ls="none", ms=7)
            axes[1][1].plot(r["own_reward"], r["correct_sent"], marker=marker, color=c, mfc="none", ls="none", ms=7)
            axes[1][1].plot(r["own_reward"], r["correct_admitted"], marker=marker, color=c, ls="none", ms=7)
    for ax, title in ((axes[0][0], f"at step {eval_every} (first evaluation)"), (axes[0][1], f"at step {steps} (end)")):
        ax.axhline(0, color="gray", lw=0.8)
        ax.set_title(f"difference to GRPO (n) on the weak sub-skill, {title}")
        ax.set_ylabel("held-out pass@1 difference (T 0.6)")
    axes[1][0].set_title("gate: share of peer responses admitted (s > delta)")
    axes[1][1].set_title("correct share of the groups sent (open) vs admitted (filled)")
    axes[1][0].set_ylim(0, 1.02)
    axes[1][1].set_ylim(0, 1.02)
    from matplotlib.lines import Line2D

    legend = [Line2D([], [], color=colors["a"], marker="o", ls="none", label="receiver A (addc)"),
              Line2D([], [], color=colors["b"], marker="o", ls="none", label="receiver B (mulc)"),
              Line2D([], [], color="k", marker="o", ls="none", label="GRAFT - GRPO (n) (filled)"),
              Line2D([], [], color="k", marker="o", mfc="none", ls="none", label="GRPO (2n) - GRPO (n) (open)"),
              Line2D([], [], color="k", marker="o", ls="none", mfc="none", label="terse traces: circles"),
              Line2D([], [], color="k", marker="s", ls="none", mfc="none", label="narrated traces: squares")]
    axes[0][0].legend(handles=legend, fontsize=8)
    for ax in axes.flat:  # linear below 0.01, logarithmic above: rewards near 0 stay apart
        ax.set_xscale("symlog", linthresh=0.01)
        ax.set_xlim(0, 1)
        ax.set_xlabel("receiver's own T = 1 reward on its weak sub-skill, first 20% of GRPO (n)'s steps")
    fig.suptitle("Where GRAFT's rescue shows: the tiny world's regime map (experiments/regimes.py)")
    _save(fig, path)


def _save(fig, path):
    fig.tight_layout()
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)


def _run_folders(folders):
    """Run folders, a comparison folder expanded to its grpo/ and graft/ runs."""
    found = []
    for folder in folders:
        subs = [os.path.join(folder, s) for s in ("grpo", "graft") if os.path.isdir(os.path.join(folder, s))]
        found += subs or [folder]
    return found


def plot_runs(folders, out=None):
    """Write every plot for these run folders (a comparison folder expands to grpo/ and graft/)."""
    found = _run_folders(folders)
    names = [os.path.basename(os.path.normpath(f)) for f in found]
    runs = {(n if names.count(n) == 1 else os.path.normpath(f).replace(os.sep, "_")): f for n, f in zip(names, found)}
    out = out or folders[0]
    os.makedirs(out, exist_ok=True)
    written = []
    plot_accuracy({label: runlog.read_jsonl(os.path.join(f, "evals.jsonl")) for label, f in runs.items()},
                  os.path.join(out, "accuracy.png"))
    plot_training({label: runlog.read_jsonl(os.path.join(f, "metrics.jsonl")) for label, f in runs.items()},
                  os.path.join(out, "training.png"))
    written += ["accuracy.png", "training.png"]
    for label, f in runs.items():
        metrics = runlog.read_jsonl(os.path.join(f, "metrics.jsonl"))
        config = runlog.read_json(os.path.join(f, "config.json"))
        prefix = "" if len(runs) == 1 else label + "_"
        if not any("peer_mixed_on_all_fail" in m for m in metrics):  # one model, no peer (pairs.SOLO)
            plot_learning(runlog.read_jsonl(os.path.join(f, "evals.jsonl")), metrics,
                          os.path.join(out, prefix + "learning.png"), f"[{label}]")
            written.append(prefix + "learning.png")
            continue
        files = ["complementarity.png", "success_heatmap.png"]
        plot_complementarity(metrics, os.path.join(out, prefix + files[0]), f"[{label}]")
        plot_heatmap(runlog.read_jsonl(os.path.join(f, "trajectories.jsonl")), config["n"],
                     os.path.join(out, prefix + files[1]), f"[{label}]")
        if any(m["peer_responses"] for m in metrics):
            files += ["compatibility.png", "clipping.png", "exchange.png"]
            plot_compatibility(metrics, config["delta"], os.path.join(out, prefix + files[2]), f"[{label}]")
            plot_clipping(metrics, os.path.join(out, prefix + files[3]), f"[{label}]")
            plot_exchange(metrics, os.path.join(out, prefix + files[4]), f"[{label}]")
        written += [prefix + n for n in files]
    return [os.path.join(out, w) for w in written]


def main():
    p = argparse.ArgumentParser(description="Plot run folders written by graft_min.py.")
    p.add_argument("folders", nargs="+", help="run folders, or a comparison folder holding grpo/ and graft/")
    p.add_argument("--out", default=None, help="where the PNGs go (default: the first folder)")
    p.add_argument("--table", action="store_true", help="print the training reward per family (and, where the "
                   "evaluations record them, held-out pass@1 / finished share / pass@1 among finished) instead of plotting")
    p.add_argument("--every", type=int, default=10, help="--table: steps per printed row")
    args = p.parse_args()
    for folder in args.folders:
        if not os.path.isdir(folder):
            p.error(f"{folder}: no such run folder")
    if args.table:
        for folder in _run_folders(args.folders):
            print(f"{folder}:")
            print("\n".join(training_table(runlog.read_jsonl(os.path.join(folder, "metrics.jsonl")), args.every)))
            evals = os.path.join(folder, "evals.jsonl")
            print("\n".join(eval_table(runlog.read_jsonl(evals) if os.path.exists(evals) else [])))
        return
    for path in plot_runs(args.folders, args.out):
        print(path)


if __name__ == "__main__":
    main()
