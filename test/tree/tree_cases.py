"""Random and hand-made inputs shared by the tree-op tests (seeded, CPU tensors), and ``import_or_skip``."""

from __future__ import annotations

import importlib

import pytest
import torch

from sglang_ddtree.tree import Tree

FIELDS = ("token_ids", "parents", "depths", "scores", "valid", "num_nodes")


def random_inputs(bs: int, depth_limit: int, k: int, gen: torch.Generator, style: str = "softmax"):
    """top-K log-probs [bs, L-1, K] float32 sorted descending, distinct token ids [bs, L-1, K] int64.

    style: "softmax" (realistic), "ties" (few distinct values: many exact ties), "wide" (magnitudes
    from 1e-8 to 1e2: float32 sums that round onto each other), "special" (-inf, -0.0, 0, >0).
    """
    if style == "softmax":
        vocab = max(k, 32)
        lp = torch.log_softmax(torch.randn(bs, depth_limit, vocab, generator=gen) * 3, -1)[..., :k]
    elif style == "ties":
        lp = -torch.randint(0, 3, (bs, depth_limit, k), generator=gen).float() * 0.75
    elif style == "wide":
        mag = 10.0 ** (torch.rand(bs, depth_limit, k, generator=gen) * 10 - 8)
        lp = -mag * torch.rand(bs, depth_limit, k, generator=gen)
    elif style == "special":
        choices = torch.tensor([float("-inf"), -0.0, 0.0, 0.25, -1.0, -1.0, -2.5, -30.0])
        lp = choices[torch.randint(0, len(choices), (bs, depth_limit, k), generator=gen)]
    else:
        raise ValueError(style)
    lp = lp.float().sort(-1, descending=True).values.contiguous()
    ids = torch.argsort(torch.rand(bs * depth_limit, 4 * k + 8, generator=gen), dim=1)[:, :k]
    return lp, ids.reshape(bs, depth_limit, k).to(torch.int64).contiguous()


def tree_row(tree: Tree, b: int) -> Tree:
    """Request b of a batched tree as a batch of one (CPU)."""
    return Tree(**{f: getattr(tree, f)[b : b + 1].cpu() for f in FIELDS}, max_depth=tree.max_depth)


def assert_trees_equal(a: Tree, b: Tree, msg: str = "") -> None:
    assert a.max_depth == b.max_depth, msg
    for f in FIELDS:
        x, y = getattr(a, f).cpu(), getattr(b, f).cpu()
        assert torch.equal(x, y), f"{msg} field {f} differs:\n{x}\n{y}"


def make_tree(parents: list[int], tokens: list[int], budget: int, max_depth: int) -> Tree:
    """A hand-made single-request tree (rows in the package's order); rows past len(parents) are pads."""
    n = budget + 1
    num = len(parents)
    depth = [0] * num
    for r in range(1, num):
        depth[r] = depth[parents[r]] + 1
    pad = n - num
    return Tree(
        token_ids=torch.tensor([tokens + [0] * pad]),
        parents=torch.tensor([parents + [-1] * pad]),
        depths=torch.tensor([depth + [0] * pad]),
        scores=torch.tensor([[0.0] + [-1.0] * (num - 1) + [float("-inf")] * pad]),
        valid=torch.tensor([[r < num for r in range(n)]]),
        num_nodes=torch.tensor([num], dtype=torch.int32),
        max_depth=max_depth,
    )


def import_or_skip(module: str):
    """Import ``module``; skip the test only when it (or a package above it) is not installed.

    Unlike ``pytest.importorskip``, any other import failure - a missing dependency inside the module, a
    broken extension, a missing name - fails the test instead of hiding behind a skip.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module == exc.name or module.startswith(exc.name + ".")):
            pytest.skip(f"{module} is not installed ({exc})")
        raise
