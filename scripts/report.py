#!/usr/bin/env python3
"""dsa-fidelity report: markdown + PNG plots of a sweep.json or needle.json.

Usage: report.py RESULTS.json OUT_DIR   (called by `dsa-fidelity report`)
Plots: sweep -> recall vs context per recipe (mean and p1), mass recall vs context,
changed-index histogram; needle -> retention vs context per recipe, one panel per margin,
and retention vs margin at the longest context.
"""
import json
import os
import shutil
import sys
import tempfile

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def context_label(n):
    return f"{n // 1024}K" if n % 1024 == 0 else str(n)


def sweep_report(res, out):
    rows = [r for r in res["rows"] if "variant_of" not in r]
    recipes = list(dict.fromkeys(r["recipe"] for r in rows))
    contexts = sorted({r["context"] for r in rows})
    get = {(r["recipe"], r["context"]): r["metrics"] for r in rows}
    figs = []
    for metric, title in (("recall", "recall@K vs exact"), ("mass_recall", "attention-mass recall")):
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for name in recipes:
            ys = [get[(name, n)][metric]["mean"] for n in contexts]
            p1 = [get[(name, n)][metric]["p1"] for n in contexts]
            line, = ax.plot(contexts, ys, marker="o", label=name)
            ax.plot(contexts, p1, ls=":", color=line.get_color())
        ax.set_xscale("log", base=2)
        ax.set_xticks(contexts, [context_label(n) for n in contexts])
        ax.set_xlabel("context length (tokens)")
        ax.set_ylabel(f"{metric} (solid: mean, dotted: p1)")
        ax.set_title(f"{title}, top-{res['topk']}, {res['activations']['generator']} activations")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = f"{metric}_vs_context.png"
        fig.savefig(os.path.join(out, path), dpi=120)
        plt.close(fig)
        figs.append(path)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    longest = contexts[-1]
    for name in recipes:
        hist = get[(name, longest)]["changed_histogram"]
        ax.plot(range(len(hist)), hist, marker=".", label=name)
    ax.set_xlabel("exact top-K indices lost per row (last bucket: that many or more)")
    ax.set_ylabel("rows")
    ax.set_title(f"changed indices per row at {context_label(longest)}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "changed_histogram.png"), dpi=120)
    plt.close(fig)
    figs.append("changed_histogram.png")

    if all("score_ulp_histogram" in get_row for get_row in rows):
        fig, ax = plt.subplots(figsize=(7, 4.2))
        hist_of = {(r["recipe"], r["context"]): r["score_ulp_histogram"] for r in rows}
        for name in recipes:
            hist = hist_of[(name, longest)]
            total = sum(hist) or 1
            ax.plot(range(len(hist)), [h / total for h in hist], marker=".", label=name)
        ax.set_xlabel("score error vs exact: bucket b = [2^(b-1), 2^b) fp32 ulps (0: exact)")
        ax.set_ylabel("fraction of scores")
        ax.set_title(f"score ulp histogram at {context_label(longest)}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "score_ulp_histogram.png"), dpi=120)
        plt.close(fig)
        figs.append("score_ulp_histogram.png")

    lines = ["# Sweep report", "", f"Command: `{res.get('command', '?')}`", "",
             f"Generator: `{json.dumps(res['activations'])}`", "",
             f"top-{res['topk']}; {res['queries_per_context_and_seed']} query rows per context and seed "
             f"({res['query_positions']}); seeds {res['seeds']}.", "",
             "| recipe | " + " | ".join(context_label(n) for n in contexts) + " |",
             "|---|" + "---|" * len(contexts)]
    for name in recipes:
        cells = [f"{get[(name, n)]['recall']['mean']:.4f} (p1 {get[(name, n)]['recall']['p1']:.4f})"
                 for n in contexts]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if res.get("attribution"):
        lines += ["", "## Stage attribution (recall loss accounted for)", "",
                  "| recipe | context | stage | accounted | of loss |", "|---|---|---|---|---|"]
        for a in res["attribution"]:
            lines.append(f"| {a['recipe']} | {context_label(a['context'])} | {a['stage']} | "
                         f"{a['accounted']:+.5f} | {a['recall_loss']:.5f} |")
    lines += [""] + [f"![{f}]({f})" for f in figs]
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def oracle_rows(res):
    """Planted-fact mode: the exact oracle's own retention (exact rank <= K) per model group,
    as summary rows named "oracle of A, B": a longer context can push a planted needle out
    of the exact top-K too, and a recipe's loss is read against its oracle's."""
    cells = {}
    for c in res["cases"]:
        key = ("oracle of " + ", ".join(c["model_recipes"]), c["context"], c["margin"])
        kept, n = cells.get(key, (0, 0))
        if c["reachable"]:  # unreachable needles count nowhere, as in the summary
            kept, n = kept + (c["exact_rank"] <= res["topk"]), n + 1
        cells[key] = (kept, n)
    return [{"recipe": k[0], "context": k[1], "margin": k[2], "cases": n, "retention": kept / n if n else 0.0}
            for k, (kept, n) in cells.items()]


def lost_beyond_oracle(res):
    """Planted-fact mode, per (recipe, context) over depths, trials and margins: needles the
    exact oracle keeps (exact rank <= K) that the recipe loses, the cases the oracle keeps,
    and needles the recipe keeps that the oracle loses."""
    cells = {}
    for c in res["cases"]:
        if not c["reachable"]:
            continue
        kept_exact = c["exact_rank"] <= res["topk"]
        for name, outcome in c["recipes"].items():
            lost, kept, gained = cells.get((name, c["context"]), (0, 0, 0))
            cells[(name, c["context"])] = (lost + (kept_exact and not outcome["retained"]),
                                           kept + kept_exact,
                                           gained + (not kept_exact and outcome["retained"]))
    return cells


def crossover(get, name, contexts, margin, below=0.5):
    """The first context at which `name` keeps fewer than `below` of the needles."""
    for n in contexts:
        row = get.get((name, n, margin))
        if row is not None and row["cases"] > 0 and row["retention"] < below:
            return context_label(n)
    return f"> {context_label(contexts[-1])}"


def needle_report(res, out):
    planted = "reference_context" in res
    summary = res["summary"] + (oracle_rows(res) if planted else [])
    recipes = list(dict.fromkeys(r["recipe"] for r in summary))
    contexts = sorted({r["context"] for r in summary})
    margins = sorted({r["margin"] for r in summary})
    get = {(r["recipe"], r["context"], r["margin"]): r for r in summary}
    fig, axes = plt.subplots(1, len(margins), figsize=(4.2 * len(margins), 4), sharey=True,
                             squeeze=False)
    for ax, m in zip(axes[0], margins):
        for name in recipes:
            ax.plot(contexts, [100 * get[(name, n, m)]["retention"] for n in contexts],
                    marker="o", label=name, linestyle="--" if name.startswith("oracle of ") else "-")
        ax.set_xscale("log", base=2)
        ax.set_xticks(contexts, [context_label(n) for n in contexts])
        ax.set_title(f"margin {m} sigma")
        ax.set_xlabel("context length (tokens)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"needle kept in top-{res['topk']} (%)")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "needle_retention_vs_context.png"), dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 4))
    longest = contexts[-1]
    for name in recipes:
        ax.plot(margins, [100 * get[(name, longest, m)]["retention"] for m in margins],
                marker="o", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("needle margin above the K-th exact score (sigma)")
    ax.set_ylabel("needle kept (%)")
    ax.set_title(f"retention vs margin at {context_label(longest)}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "needle_retention_vs_margin.png"), dpi=120)
    plt.close(fig)

    lines = ["# Needle report", "", f"Command: `{res.get('command', '?')}`", "",
             f"Generator: `{json.dumps(res['activations'])}`", "",
             f"top-{res['topk']}; query: {res['query']}; depths {res['depths']}; "
             f"{res['trials']} trials; margins in sigma {res['margins_in_sigma']} "
             "(definition: docs/needle.md).", ""]
    if planted:
        lines += [f"Planted fact: one query, margins measured among its last {res['reference_context']} keys "
                  "at every context; `oracle of ...` rows are the exact oracle's own retention "
                  "(exact rank <= K).", "",
                  "### crossover: the first context keeping fewer than half of the needles", "",
                  "| recipe | " + " | ".join(f"{m} sigma" for m in margins) + " |",
                  "|---|" + "---|" * len(margins)]
        for name in recipes:
            lines.append(f"| {name} | " + " | ".join(crossover(get, name, contexts, m) for m in margins) + " |")
        lines.append("")
        cells = lost_beyond_oracle(res)
        names = [n for n in recipes if not n.startswith("oracle of ")]
        lines += ["### lost beyond the oracle: needles the exact oracle keeps and the recipe loses", "",
                  "Per context, over every depth, trial and margin: lost / kept by the oracle "
                  "(+ kept by the recipe though the oracle loses them).", "",
                  "| recipe | " + " | ".join(context_label(n) for n in contexts) + " | all |",
                  "|---|" + "---|" * (len(contexts) + 1)]
        for name in names:
            row = [cells.get((name, n), (0, 0, 0)) for n in contexts]
            total = [sum(x[i] for x in row) for i in range(3)]
            lines.append(f"| {name} | " + " | ".join(f"{a}/{b} (+{g})" for a, b, g in row) +
                         f" | {total[0]}/{total[1]} (+{total[2]}) |")
        lines.append("")
    for m in margins:
        lines += [f"### margin {m} sigma: needle kept (% of cases)", "",
                  "| recipe | " + " | ".join(context_label(n) for n in contexts) + " |",
                  "|---|" + "---|" * len(contexts)]
        for name in recipes:
            cells = [f"{100 * get[(name, n, m)]['retention']:.0f}% ({get[(name, n, m)]['cases']})"
                     for n in contexts]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["![retention vs context](needle_retention_vs_context.png)",
              "![retention vs margin](needle_retention_vs_margin.png)"]
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: report.py RESULTS.json OUT_DIR")
    path, out = sys.argv[1], sys.argv[2]
    try:
        with open(path, encoding="utf-8") as f:
            res = json.load(f)
        kind = res.get("kind") if isinstance(res, dict) else None
        if kind not in ("sweep", "needle"):
            raise ValueError(f"not a sweep or needle result (kind={kind!r})")
        # Drawn into a temporary folder beside OUT_DIR, then moved in file by file (each
        # move a rename on one file system): a failure half-way leaves OUT_DIR as it was.
        parent = os.path.dirname(os.path.abspath(out))
        os.makedirs(parent, exist_ok=True)
        staging = tempfile.mkdtemp(prefix=".report-", dir=parent)
        try:
            (sweep_report if kind == "sweep" else needle_report)(res, staging)
            os.makedirs(out, exist_ok=True)
            for name in sorted(os.listdir(staging)):
                os.replace(os.path.join(staging, name), os.path.join(out, name))
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError, ZeroDivisionError,
            RecursionError) as e:
        # One line, exit 2 (dsa-fidelity report prints it): a results file this script
        # cannot read is bad input, not a crash.
        what = f"{type(e).__name__}: {e}" if isinstance(e, (KeyError, TypeError, IndexError, AttributeError)) else str(e)
        print(f"report: {path}: {what}"[:300].replace("\n", " "), file=sys.stderr)
        sys.exit(2)
    print(f"wrote {os.path.join(out, 'report.md')}")


if __name__ == "__main__":
    main()
