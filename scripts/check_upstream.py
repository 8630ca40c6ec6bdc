"""Static compatibility scan of SGLang releases against ``sglang_ddtree.compat``'s symbol list.

    python scripts/check_upstream.py 0.5.16 0.5.17 [...] [--out FILE] [--cache DIR]

For each release: fetch its wheel (``pip download --no-deps``; the sdist when there is none), unpack
its ``.py`` files to a temp dir and read every ``compat.symbols_for(release)`` entry from the source with ``ast``
(no import: a release needs its own torch). Statuses: ok | moved (not at its path, but a def / class
of that name is elsewhere; for an attribute, a top-level def of that name or another class of the
owner's module has it) | missing | signature-changed (a PARAMS entry: a keyword name that is no
parameter, or, where its purpose says "positional", names that no longer lead the signature in that
order) | not-checked (a package outside the sglang wheel: sgl_kernel). Names resolve through
``from x import y`` re-exports, star imports and ``X = Y`` aliases; classes through their upstream
bases, and a struct that its module rebuilds (ServerArgs since 0.5.20) through the classes it takes.
The first version is the baseline: the report notes every callable on the list whose parameters
differ from it, and a missing attribute lists what its owner gained since (a rename shows there).
Prints a table, writes one JSON report (``--out``); exits 1 when a release has missing or changed
entries.

    python scripts/check_upstream.py 0.5.17 --run-suite --suite-out FILE [--keep-env] [--keep-version-gate]

Instead runs the CPU suite of HEAD (``git archive``, so not the work tree's edits; ``--commit REV``) against the release:
a venv under /tmp holding that sglang wheel and our wheel (``--no-deps``), over a hard-linked copy of
the base venv's site-packages (``--base-venv``, default .venv, only read) for torch, transformers and
the rest. The snapshot's ``version.py`` range is raised past a release outside it (unless --keep-version-gate),
so the suite shows what breaks beyond the gate; a supported release runs the snapshot as it is. The result records the release's pins (torch,
transformers, ...) against what that environment has: a mismatch is a caveat of the run, stated there.
It counts pass / fail / error from pytest's closing line and groups each failure (junit XML) by cause:
``CAUSES`` below, else by its root error line. ``--reclassify FILE`` re-groups a written result.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
from typing import Optional, Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # scripts/: the upstream_check package
from upstream_check.release import (  # noqa: E402,F401  (re-exported: the tests read them from here)
    DEFAULT_CACHE, PINNED, fetch_release, read_pins, scan_release, unpack)
from upstream_check.source import (  # noqa: E402,F401
    CHANGED, MISSING, MOVED, OK, REPO, STATUSES, UNCHECKED, SourceTree, _slim, analyse, check_symbol, compat, counts,
    signature_notes)
from upstream_check.suite import (  # noqa: E402,F401
    CAUSES, SUITE_PYTEST, classify, compare_requirements, lift_version_gate, make_suite_env, parse_junit,
    parse_pytest_summary, requirements, root_error, run_suite, suite_summary, unpack_metadata)


# ---- report ---------------------------------------------------------------------------------------
def _describe(r: dict) -> str:
    if r["status"] == MOVED:
        others = [c for c in r.get("candidates", []) if c != r["moved_to"]]
        return f"-> {r['moved_to']} ({r.get('at', '')})" + (f"; also {', '.join(others)}" if others else "")
    if r["status"] == CHANGED:
        where = f" at {r['moved_to']}" if "moved_to" in r else ""
        return f"expected ({', '.join(r['expected'])}){where}; now ({', '.join(r['params'])})"
    new = r.get("new_on_owner", [])  # a rename shows here; a long list is only noise in the table
    new = f"; new on the owner since the baseline: {', '.join(new)}" if 0 < len(new) <= 6 else ""
    return r.get("detail", "") + new


def summary(report: dict) -> str:
    lines = []
    for version, rel in report["releases"].items():
        pins = ", ".join(f"{k} {v}" for k, v in sorted(rel["pins"].items()))
        c = rel["counts"]
        lines.append(f"{version}  [{pins}]  ok {c[OK]}  moved {c[MOVED]}  missing {c[MISSING]}  "
                     f"changed {c[CHANGED]}  not-checked {c[UNCHECKED]}")
        for r in rel["symbols"]:
            if r["status"] not in (OK, UNCHECKED):
                lines.append(f"    {r['status']:<17} {r['path']}  {_describe(r)}")
        for path, note in rel.get("signature_notes", {}).items():
            added = [n + (" (required)" if n in note["added_required"] else "") for n in note["added"]]
            added = added if len(added) <= 8 else added[:8] + [f"... {len(added) - 8} more"]
            lines.append(f"    params-differ     {path}  +[{', '.join(added)}] -[{', '.join(note['removed'])}]")
    return "\n".join(lines)


def to_json(obj, depth: int = 0) -> str:
    """JSON with one line per symbol entry (and per list of names): a diff of two scans reads by symbol."""
    flat = not isinstance(obj, (dict, list)) or "path" in obj or all(
        not isinstance(v, (dict, list)) for v in (obj.values() if isinstance(obj, dict) else obj))
    if flat or not obj:
        return json.dumps(obj)
    pad, end = " " * (depth + 1), " " * depth
    items = ([f"{json.dumps(k)}: {to_json(v, depth + 1)}" for k, v in obj.items()] if isinstance(obj, dict)
             else [to_json(v, depth + 1) for v in obj])
    o, c = "{}" if isinstance(obj, dict) else "[]"
    return o + "\n" + ",\n".join(pad + i for i in items) + "\n" + end + c


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("versions", nargs="*", help="SGLang releases, e.g. 0.5.16 0.5.17 (the first is the baseline "
                                                "for the parameter-list notes)")
    ap.add_argument("--out", help="write the JSON report here")
    ap.add_argument("--cache", default=DEFAULT_CACHE, help=f"where releases are downloaded (default {DEFAULT_CACHE})")
    ap.add_argument("--run-suite", action="store_true",
                    help="instead of the static scan: run the CPU suite (HEAD) against each release in a venv under "
                         "/tmp (the release's sglang + our wheel over the base venv's packages)")
    ap.add_argument("--suite-out", help="with --run-suite: write the result here ('{version}' is replaced; needed "
                                        "for more than one release)")
    ap.add_argument("--base-venv", default=os.path.join(REPO, ".venv"),
                    help="with --run-suite: the venv whose packages (torch, transformers, pytest ...) it uses, read only")
    ap.add_argument("--keep-version-gate", action="store_true",
                    help="with --run-suite: leave version.py's range as it is (the plugin then refuses the release)")
    ap.add_argument("--commit", default="HEAD", help="with --run-suite: the revision whose suite runs (default HEAD)")
    ap.add_argument("--keep-env", action="store_true", help="with --run-suite: keep the /tmp environment and log")
    ap.add_argument("--pytest-args", default="", help="with --run-suite: extra pytest arguments, one string")
    ap.add_argument("--reclassify", metavar="RESULT_JSON",
                    help="re-group a written --run-suite result's failures by the current CAUSES and rewrite it")
    ap.add_argument("--junit", help="with --reclassify: re-read the failures from this junit.xml (a --keep-env run's)")
    args = ap.parse_args(argv)
    command = "python scripts/check_upstream.py " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.reclassify:
        return _reclassify(args.reclassify, args.junit, command)
    if not args.versions:
        ap.error("give at least one release")
    if args.run_suite:
        return _main_suite(args, command)
    symbols = compat.symbols()
    report = {"command": command, "date": datetime.date.today().isoformat(), "symbols": len(symbols),
              "baseline": args.versions[0],
              "statuses": list(STATUSES), "releases": {}}
    with tempfile.TemporaryDirectory(prefix="sglang-releases-") as workdir:
        baseline_root = None
        for version in args.versions:
            rel, root = scan_release(version, args.cache, symbols, workdir, baseline_root)
            base = report["releases"].get(args.versions[0])
            rel["signature_notes"] = signature_notes(rel["symbols"], base["symbols"]) if base else {}
            report["releases"][version] = rel
            baseline_root = baseline_root or root
    for rel in report["releases"].values():
        _slim(rel["symbols"])
    print(summary(report))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(to_json(report) + "\n")
    return 0 if all(r["counts"][MISSING] + r["counts"][CHANGED] == 0 for r in report["releases"].values()) else 1


def _reclassify(path: str, junit: Optional[str], command: str) -> int:
    with open(path, encoding="utf-8") as f:
        result = json.load(f)
    if junit:
        result["failures"] = parse_junit(open(junit, encoding="utf-8").read())
    result["failure_classes"] = classify(result["failures"])
    result["reclassified"] = {"command": command, "date": datetime.date.today().isoformat()}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print(suite_summary(result))
    return 0


def _main_suite(args, command: str) -> int:
    if len(args.versions) > 1 and args.suite_out and "{version}" not in args.suite_out:
        raise SystemExit("--suite-out needs '{version}' in it for more than one release")
    base_python = os.path.join(args.base_venv, "bin", "python")
    rc = 0
    for version in args.versions:
        result = dict(command=command, **run_suite(version, args.cache, base_python, not args.keep_version_gate,
                                                   args.keep_env, args.pytest_args.split(), args.commit))
        print(suite_summary(result))
        if args.suite_out:
            with open(args.suite_out.replace("{version}", version), "w", encoding="utf-8") as f:
                json.dump(result, f, indent=1)
                f.write("\n")
        rc |= result["pytest"]["rc"] != 0
    return int(rc)


if __name__ == "__main__":
    sys.exit(main())
