"""benchmark/accept_calibration.py on CPU: the restricted walk (one verify of the largest tree standing for every
bucket's tree) equals the greedy walk over the tree actually built at that budget, and the script runs end to end
on the packaged tiny pair."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmark", "accept_calibration.py")
_spec = importlib.util.spec_from_file_location("accept_calibration", SCRIPT)
cal = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cal)

from sglang_ddtree.tree.reference import accept_greedy_torch, build_tree_reference  # noqa: E402


def _paths(tree):
    """Token path (root excluded) of every row of a one-request tree; pads None."""
    parents, tokens = tree.parents[0].tolist(), tree.token_ids[0].tolist()
    out = []
    for r in range(tree.num_rows):
        if not bool(tree.valid[0, r]):
            out.append(None)
            continue
        path, cur = [], r
        while cur > 0:
            path.append(tokens[cur])
            cur = parents[cur]
        out.append(tuple(reversed(path)))
    return out


def _target_next(tree, oracle):
    return torch.tensor([oracle(p) if p is not None else 0 for p in _paths(tree)])


@pytest.mark.parametrize("seed", range(6))
def test_restricted_walk_equals_the_smaller_tree(seed):
    g = torch.Generator().manual_seed(seed)
    depth, vocab, k = 6, 7, 3
    lp, ids = torch.log_softmax(torch.randn(depth, vocab, generator=g) * 2, -1).topk(k, dim=-1)
    best = {d: int(ids[d, 0]) for d in range(depth)}

    def oracle(path):  # the target mostly continues with the drafter's first choice at the next depth
        d = len(path)
        if d >= depth:
            return 0
        return best[d] if (hash((seed,) + path) % 5) else int(ids[d, 1])

    big = build_tree_reference(lp, ids, 31, root_token_id=3)
    tn = _target_next(big, oracle)
    for b in (1, 3, 7, 15, 31):
        small = build_tree_reference(lp, ids, b, root_token_id=3)
        want = int(accept_greedy_torch(small, _target_next(small, oracle)[None]).num_accepted[0])
        assert cal.sub_tree_accepts(big, tn, b) == want, (seed, b)


def test_script_runs_on_the_tiny_pair(tmp_path):
    out = tmp_path / "cal.json"
    proc = subprocess.run([sys.executable, SCRIPT, "--prompts", "1", "--prompt-len", "16", "--new-tokens", "12",
                           "--max-budget", "15", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rep = json.loads(out.read_text())
    assert list(rep["by_budget"]) == ["1", "3", "7", "15"] and rep["rounds"] >= 1
    for m in rep["by_budget"].values():
        assert m["rounds"] == rep["rounds"] and m["observed_mean"] >= 0 and m["predicted_mean"] > 0
    obs = [rep["by_budget"][b]["observed_mean"] for b in ("1", "3", "7", "15")]
    assert obs == sorted(obs)  # a larger tree contains the smaller: it never accepts less
    bad = subprocess.run([sys.executable, SCRIPT, "--prompts", "0", "--out", str(out)], capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and "--prompts must be >= 1" in bad.stderr
