#!/usr/bin/env python3
"""The conformance run's plan and its report (scripts/conformance.sh, docs/conformance.md).

    conformance_report.py runs MANIFEST            one line per verify run: ADAPTER RECIPE
    conformance_report.py recipes MANIFEST         the manifest's own recipes as a recipe file (JSON)
    conformance_report.py captures MANIFEST        one line per capture script: NAME SCRIPT TOKENS RECIPE,...
    conformance_report.py peers MANIFEST            one line per peer timing: key RECIPE ADAPTER... |
                                                    topk ROWS LENGTH K ADAPTER...
    conformance_report.py report MANIFEST RESULTS   docs/conformance.md on stdout
    conformance_report.py bundle RESULTS            every result of the folder as one JSON on stdout
                                                    (bench/results/*-conformance.json)

MANIFEST is conformance/kernels.json; RESULTS the folder conformance.sh filled, or a bundle:
verify-<adapter>-<preset>.json (dsa-fidelity verify --json), compare-<capture>-<recipe>.json
and detect-<capture>.json (dsa-fidelity compare / detect --json on a capture script's file),
capture-<capture>.txt (the script's output), peer-*.json (bench/peer_bench),
ncu-*.csv (kernel times), torch-*.json (bench/torch_*.py), run.json (date, commit, GPU,
the lock's releases). Standard library only (the GPU host has no pip).
"""
import csv
import json
import os
import statistics
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


class Results:
    """The run's files by name: from conformance.sh's folder, or from a bundle (one JSON
    object: file name -> parsed JSON, or the text of a .txt / .csv file)."""

    def __init__(self, path):
        if os.path.isdir(path):
            self.files = {}
            for name in sorted(os.listdir(path)):
                full = os.path.join(path, name)
                if name.endswith(".json"):
                    self.files[name] = load(full)
                elif name.endswith((".txt", ".csv")):
                    with open(full, errors="replace") as f:
                        self.files[name] = f.read()
        else:
            self.files = load(path)

    def get(self, name):
        return self.files.get(name)

    def names(self):
        return sorted(self.files)


def runs(manifest):
    for a in manifest["adapters"]:
        for preset in a.get("verify", []):
            yield a["adapter"], preset


def captures(manifest):
    for c in manifest.get("captures", []):
        yield c["capture"], c["script"], str(c["tokens"]), ",".join(c["compare"])


def compare_cells(c, detect):
    """(verdict, detail) of one compare JSON, with the presets detect found exact."""
    if c is None:
        return "not run", ""
    v = c["verdict"]
    if v["pass"]:
        detail = f"capture byte-exact, {v['written_tokens']:,} written tokens ({v['bytes_compared']:,} bytes)"
    else:
        detail = (f"capture mismatch: {v['mismatched_bytes']:,} of {v['bytes_compared']:,} bytes, "
                  f"{v['mismatched_tokens']:,} of {v['written_tokens']:,} tokens; "
                  + v["text"].strip().replace("\n", " "))
        explaining = [e["change"] for e in c.get("explaining", [])]
        if explaining:
            detail += "; explained by: " + ", ".join(explaining)
    if detect is not None:
        matches = detect.get("detection", {}).get("matches", [])
        detail += "; detect: " + (", ".join(f"`{m}`" for m in matches) + " exact" if matches else "no recipe exact")
    return ("pass" if v["pass"] else "FAIL"), detail


def peers(manifest):
    key = {}
    for a in manifest["adapters"]:
        for recipe in a.get("peer_key", []):
            key.setdefault(recipe, []).append(a["adapter"])
    for recipe, adapters in key.items():
        yield ["key", recipe] + adapters
    topk = [a["adapter"] for a in manifest["adapters"] if a.get("peer_topk")]
    t = manifest.get("peer_topk")
    if t and topk:
        for k in t["k"]:
            yield ["topk", str(t["rows"]), str(t["length"]), str(k)] + topk


def peer_file(line):
    return "peer-" + "-".join(line[:2] if line[0] == "key" else [line[0], line[3]]) + ".json"


def verdict_cells(v):
    """(verdict, detail) of one verify JSON."""
    if v is None:
        return "not run", ""
    stages = v.get("stages", [])
    parts, verdict = [], "pass" if v.get("pass") else "FAIL"
    for s in stages:
        name = s["stage"]
        if name == "key cache":
            if s.get("pass"):
                parts.append(f"key cache byte-exact, {s['tokens']:,} tokens / {s['batches']} batches")
            else:
                diagnosis = s.get("diagnosis", "").strip().replace("\n", " ")
                parts.append(f"key cache mismatch: {diagnosis}")
        elif name == "top-K":
            failing = s.get("failing_rows", [])
            held = "exact on" if s["pass"] else f"{len(failing)} of"
            text = (f"top-K {s['contract']}: {held} {s['rows']} rows{'' if s['pass'] else ' FAIL'} "
                    f"({s['identical']} identical, {s['order_only']} order only, "
                    f"{s['rows_with_tie_swaps']} with tie swaps)")
            if failing:
                by_batch = {}
                for f in failing:
                    by_batch[f.get("batch_rows", 16)] = by_batch.get(f.get("batch_rows", 16), 0) + 1
                text += "; failing rows by batch: " + ", ".join(
                    f"{n} in batches of {rows}" for rows, n in sorted(by_batch.items()))
                f = failing[0]
                batch = f", batch of {f['batch_rows']}" if "batch_rows" in f else ""
                text += (f"; first failing row: K {f['k']}{batch}, row {f['row']}, length {f['length']:,}: "
                         f"{f['misses']} keys above the cut missing, {f['intruders']} below it selected")
            parts.append(text)
        elif name in ("q codes", "q scales", "head weights"):
            if name == "q codes":
                query = [t for t in stages if t["stage"] in ("q codes", "q scales", "head weights")]
                if all(t.get("pass") for t in query):
                    heads = f", {s['heads']:,} heads" if "heads" in s else ""
                    folded = any(t.get("written") is False for t in query)
                    parts.append("query byte-exact (codes, " +
                                 ("scales folded into the head weights, " if folded else "scales, ") +
                                 f"head weights){heads}")
                else:
                    parts.append("query mismatch: " + ", ".join(
                        f"{t['stage']} {'pass' if t.get('pass') else 'FAIL'}" for t in query))
        else:
            parts.append(f"{name}: {'pass' if s.get('pass') else 'FAIL'}")
    gaps = v.get("coverage", {}).get("not_covered", [])
    if gaps:
        parts.append("not covered: " + "; ".join(gaps))
    return verdict, "; ".join(parts)


# The names peer_bench gives our calls (bench/peer_bench.cu): "builtin", what verify runs
# (top-K by score, a call that checks every row's status before it returns); for top-K also
# "builtin:by-index" and "builtin:by-index:async". Ours beside the upstream calls is the
# first of OURS_PREFERRED a measurement has: the call that does what theirs do (the set as
# positions, no final sort, returning once queued), else by index, else the default.
OURS = "builtin"
OURS_PREFERRED = ("builtin:by-index:async", "builtin:by-index", OURS)


def is_ours(kernel):
    """Whether a peer_bench kernel spec names one of our calls (not a plug-in's path)."""
    return kernel == OURS or kernel.startswith(OURS + ":")


def ours_of(kernels):
    """The spec among `kernels` that stands for ours (OURS_PREFERRED), or None."""
    return next((k for k in OURS_PREFERRED if k in kernels), None)


def kernel_name(demangled):
    """A demangled kernel name without its parameter list and leading 'void': the '(' of
    the parameters is the first one outside template brackets ('<unnamed>' included)."""
    depth = 0
    for i, ch in enumerate(demangled):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            demangled = demangled[:i]
            break
    return demangled.removeprefix("void ").strip()


def short_name(name):
    """The name with template arguments dropped (cub's policy lists are long), except
    '<unnamed>' namespaces."""
    out, depth = [], 0
    i = 0
    while i < len(name):
        if name.startswith("<unnamed>", i):
            out.append("<unnamed>") if depth == 0 else None
            i += len("<unnamed>")
            continue
        ch = name[i]
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
        i += 1
    return "".join(out)


def ncu_medians(text):
    """Kernel name -> median gpu__time_duration (ms) over its launches, from ncu --csv output."""
    times = {}
    if not text:
        return times
    rows = [r for r in csv.reader(line for line in text.splitlines() if line.startswith('"'))]
    if not rows:
        return times
    header = rows[0]
    try:
        name_col, metric_col, unit_col, value_col = (header.index(h) for h in
                                                     ("Kernel Name", "Metric Name", "Metric Unit", "Metric Value"))
    except ValueError:
        return times
    scale = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0}
    for r in rows[1:]:
        if len(r) <= value_col or r[metric_col] != "gpu__time_duration.sum":
            continue
        value = float(r[value_col].replace(",", "")) * scale.get(r[unit_col], 1e-6)
        times.setdefault(kernel_name(r[name_col]), []).append(value)
    return {k: statistics.median(v) for k, v in times.items()}


def report(manifest, results):
    out = []
    w = out.append
    run = results.get("run.json") or {}
    w("# Conformance: the presets against the production kernels they name\n")
    w("Generated by `scripts/conformance.sh` (do not edit by hand): every upstream kernel of "
      "`conformance/kernels.json`, built from the pinned releases of `conformance/upstream.lock` "
      "through its adapter in `conformance/`, run by `dsa-fidelity verify` against its presets, and "
      "timed beside our kernels by `bench/peer_bench` through the same ABI call.\n")
    w(f"- date: {run.get('date', '?')}; commit: {run.get('commit', '?')}; GPU: {run.get('gpu', '?')}")
    if run.get("tree"):
        w(f"- tree: {run['tree']}")
    w(f"- upstream releases: {', '.join(run.get('releases', [])) or '?'}")
    w(f"- verify: `--cases {run.get('cases', '?')}` tokens per run (at least), every page size, "
      "layout and input dtype the adapter declares\n")
    w("## Verdicts\n")
    w("| adapter | upstream kernel | preset | verdict | detail |")
    w("|---|---|---|---|---|")
    for a in manifest["adapters"]:
        for preset in a.get("verify", []):
            verdict, detail = verdict_cells(results.get(f"verify-{a['adapter']}-{preset}.json"))
            w(f"| `{a['adapter']}` | {a['upstream']}: {a['kernel']} | `{preset}` | {verdict} | {detail} |")
    for c in manifest.get("captures", []):
        for recipe in c["compare"]:
            verdict, detail = compare_cells(results.get(f"compare-{c['capture']}-{recipe}.json"),
                                            results.get(f"detect-{c['capture']}.json"))
            w(f"| `{c['capture']}` (capture, {c['script']}) | {c['upstream']}: {c['kernel']} | `{recipe}` | "
              f"{verdict} | {detail} |")
    w("")
    notes = [(a["adapter"], a["note"]) for a in manifest["adapters"] if a.get("note")]
    notes += [(c["capture"], c["note"]) for c in manifest.get("captures", []) if c.get("note")]
    if notes:
        w("Notes:\n")
        for name, note in notes:
            w(f"- `{name}`: {note}")
        w("")
    w("## Peers\n")
    w("Median of 21 ABI calls (CUDA events), and the kernels alone from Nsight Compute "
      "(`gpu__time_duration.sum`, median over the profiled launches, where that part ran). "
      "Ratio: the time over ours (> 1: ours is faster), where ours is our call that does what "
      "the upstream calls do: for top-K `builtin:by-index:async` where the run has it (the set "
      "as positions, no final sort, the call returning once queued, as every adapter's does), "
      "else `builtin:by-index`, else `builtin` (the column's header names it). `builtin` is what `verify` runs: top-K rows by score, and a call that "
      "waits for the kernel to check every row's status (a NaN score, a length outside the "
      "row) before it returns. Fraction: of the measured device-to-device copy bandwidth, of "
      "the bytes the stage must move. An ABI call is more than its kernel on both sides: an "
      "adapter builds the upstream kernel's slots and tables (the glue kernels in the ncu "
      "lines), our key store its tile order (a kernel before the key kernel's).\n")
    for line in peers(manifest):
        p = results.get(peer_file(line))
        if p is None:
            w(f"- {' '.join(line[:4])}: not run\n")
            continue
        title = (f"key store, `{p['recipe']}`, {p['tokens']:,} tokens" if p["stage"] == "key_store"
                 else f"top-K, [{p['rows']} x {p['length']:,}], K = {p['k']}")
        w(f"### {title}\n")
        ncu = ncu_medians(results.get(peer_file(line).replace("peer-", "ncu-").replace(".json", ".csv")))
        by_spec = {c["kernel"]: c["ms"] for c in p["cases"]}
        ours_spec = ours_of(by_spec)
        ours = by_spec.get(ours_spec)
        first = p["cases"][0]["kernel"] if p["cases"] else "-"
        w(f"| kernel | ABI call ms | fraction of copy | ratio to ours (`{ours_spec}`) | "
          f"same result as `{first}` |")
        w("|---|---|---|---|---|")
        for c in p["cases"]:
            ratio = f"{c['ms'] / ours:.2f}" if ours else "-"
            name = f"ours, `{c['kernel']}`" if is_ours(c["kernel"]) else c["name"]
            same = {None: "(reference)", True: "yes", False: "NO"}[c["same_as_first"]]
            if c.get("exact_rows_wrong"):
                same += (f" (against the exact sets: {c['exact_rows_wrong']} of {p['rows']} rows wrong, "
                         f"{c['exact_keys_missing']:,} keys missing)")
            w(f"| {name} | {c['ms']:.4f} | {c['fraction_of_copy']:.2f} | {ratio} | {same} |")
        txt = results.get(peer_file(line).replace(".json", ".txt")) or ""
        for left_out in (l.strip() for l in txt.splitlines() if " refused " in l or "skipped" in l):
            w(f"- {left_out}")
        if ncu:
            w("\nKernels alone (ncu, median of the profiled launches): " +
              "; ".join(f"`{short_name(k)}` {v:.4f} ms" for k, v in sorted(ncu.items(), key=lambda kv: -kv[1])))
        w("")
    torch_files = [f for f in results.names() if f.startswith("torch-") and f.endswith(".json")]
    if torch_files:
        w("### PyTorch eager, same shapes\n")
        for f in torch_files:
            t = results.get(f)
            cells = ", ".join(f"{k} {v:.4f}" for k, v in sorted(t.items()) if k.endswith("_ms"))
            w(f"- `{f[len('torch-'):-len('.json')]}` (torch {t.get('torch', '?')}): {cells}")
        w("")
    return "\n".join(out) + "\n"


def main(argv):
    if len(argv) < 3 or argv[1] not in ("runs", "recipes", "captures", "peers", "report", "bundle"):
        sys.exit(__doc__)
    if argv[1] == "bundle":
        json.dump(Results(argv[2]).files, sys.stdout, indent=1, sort_keys=True)
        sys.stdout.write("\n")
        return
    manifest = load(argv[2])
    if argv[1] == "runs":
        for adapter, preset in runs(manifest):
            print(adapter, preset)
    elif argv[1] == "recipes":
        json.dump(manifest.get("recipes", []), sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif argv[1] == "captures":
        for line in captures(manifest):
            print(" ".join(line))
    elif argv[1] == "peers":
        for line in peers(manifest):
            print(" ".join(line))
    else:
        if len(argv) != 4:
            sys.exit(__doc__)
        sys.stdout.write(report(manifest, Results(argv[3])))


if __name__ == "__main__":
    main(sys.argv)
