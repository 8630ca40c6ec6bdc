"""Side-by-side table of the ``+phases`` engines' phase times (``ddtree_test_hooks.phase_times``): microseconds per
decode iteration of each timed function, and the decode period, per config.

    python3 benchmark/phase_times_summary.py /tmp/ddtree_phases [--json out.json]

Each engine's scheduler wrote ``<config>.<pid>.json`` (``bench_e2e.phases_path``); a config with several files (one
per scheduler process: tp > 1) shows the first rank's (the lowest pid). Times are inclusive (``run_batch`` holds the
worker's round) and wall-clock, so a function that waits for the GPU shows the wait.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
from typing import Dict


def load(folder: str) -> Dict[str, dict]:
    """{config name: its scheduler's summary} from ``folder``'s ``<config>.<pid>.json`` files."""
    out: Dict[str, tuple] = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        m = re.fullmatch(r"(.+)\.(\d+)\.json", os.path.basename(path))
        if not m:
            continue
        with open(path) as f:
            data = json.load(f)
        name, pid = m.group(1), int(m.group(2))
        if name not in out or pid < out[name][0]:
            out[name] = (pid, data)
    return {name: data for name, (_, data) in out.items()}


def table(runs: Dict[str, dict]) -> str:
    """The printed table: one column per config, rows by the first config's largest times."""
    names = list(runs)
    if not names:
        return "no phase-times files"
    labels = []
    for name in names:
        for label in runs[name]["targets"]:
            if label not in labels:
                labels.append(label)
    width = max(12, *(len(n) for n in names))

    def row(label, cells):
        return f"{label:<40}" + "".join(f"{c:>{width + 2}}" for c in cells)

    def numbers(label, values, digits=1):
        return row(label, ["-" if v is None else f"{v:.{digits}f}" for v in values])

    def decode_iterations(n):
        return runs[n]["iterations"].get("decode", 0)

    rows = [row("us per decode iteration", names),
            numbers("period (median)", [runs[n]["period_us"]["median"] for n in names]),
            numbers("period (mean)", [runs[n]["period_us"]["mean"] for n in names]),
            numbers("loop steps (sum)", [runs[n].get("loop_steps_us_per_decode_iteration") for n in names]),
            numbers("span, first to last run_batch (us)", [runs[n].get("span_us") for n in names], 0)]
    keys = []
    for n in names:
        keys += [k for k in runs[n].get("transitions_us", {}) if k not in keys]
    rows += [numbers(f"  {key} (us, total)", [runs[n].get("transitions_us", {}).get(key) for n in names], 0)
             for key in keys]
    rows.append(row("decode iterations", [decode_iterations(n) for n in names]))
    for label in labels:
        cells = []
        for n in names:
            t = runs[n]["targets"].get(label)
            cells.append("-" if t is None or t["us_per_decode_iteration"] is None
                         else f"{t['us_per_decode_iteration']:.1f} ({t['calls'] / max(1, decode_iterations(n)):.2g}x)")
        rows.append(row(label, cells))
    rows += other_mode_rows(runs)
    rows += sync_rows(runs)
    return "\n".join(rows)


def other_mode_rows(runs: Dict[str, dict], top: int = 12) -> list:
    """Each config's non-decode iterations (``other_modes``: a prefill with the scheduling of the decode batch after
    it): its largest timed functions, microseconds per iteration of that mode, and the longest call."""
    out = []
    for name, run in runs.items():
        for mode, labels in run.get("other_modes", {}).items():
            n = run["iterations"].get(mode, 0)
            out.append(f"\n{name}: {n} {mode} iterations, us per {mode} iteration (longest call)")
            for label, t in list(labels.items())[:top]:
                out.append(f"  {label:<38}{t['us_per_iteration']:>12.1f}  ({t['max_us']:.1f})")
    return out


def sync_rows(runs: Dict[str, dict], top: int = 8) -> list:
    """The ``+syncwatch`` engines' synchronizing CUDA calls: per watched decode iteration, the allocator's device
    allocations over the window, and each config's most frequent call sites."""
    out = []
    for name, run in runs.items():
        watch = run.get("sync_watch")
        if not watch:
            continue
        n = max(1, watch["watched_decode_iterations"])
        out.append(f"\n{name}: {watch['syncs']} synchronizing CUDA calls in {watch['watched_decode_iterations']} "
                   f"watched decode iterations ({watch['syncs'] / n:.2f} per iteration); allocator "
                   f"{watch.get('allocator')}; clocks {watch.get('clocks')}; threads {watch.get('threads')}")
        for site, count in list(watch["sites"].items())[:top]:
            out.append(f"  {count / n:8.2f}/it  {site}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder")
    ap.add_argument("--json", default=None, help="also write {config: summary} here")
    args = ap.parse_args(argv)
    runs = load(args.folder)
    print(table(runs))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)
    return 0 if runs else 1


if __name__ == "__main__":
    sys.exit(main())
