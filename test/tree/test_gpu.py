"""GPU: the fused kernels on CUDA equal the PyTorch path and the heap, survive CUDA-graph replay, and
agree with sgl_kernel's ``reconstruct_indices_from_tree_mask`` and ``verify_tree_greedy``.

Budgets are drawn from a few power-of-two classes (16, 64, 512) so the Triton compiles stay few.
"""

import importlib
import random

import pytest
import torch

from sglang_ddtree.tree import Tree, accept_greedy, build_tree, build_verify_topology, full_mask_numel
from sglang_ddtree.tree.reference import (
    accept_greedy_torch,
    build_tree_reference,
    build_tree_torch,
    build_verify_topology_torch,
    reconstruct_indices_reference,
    tree_bits_torch,
)
from tree_cases import assert_trees_equal, import_or_skip, random_inputs, tree_row

pytestmark = pytest.mark.gpu

TOPO_FIELDS = (
    "positions", "retrieve_index", "retrieve_next_token", "retrieve_next_sibling", "tree_mask", "custom_mask"
)
DEV = "cuda"


def _cases(seed, n):
    """(bs, L-1, K, budget, style) within few kernel-compile classes, plus a few odd shapes."""
    rnd = random.Random(seed)
    fixed = [(1, 15, 8, 64, "softmax"), (8, 15, 8, 512, "softmax"), (3, 15, 8, 16, "ties"), (2, 4, 3, 16, "special")]
    out = list(fixed)
    for _ in range(n):
        budget = rnd.choice([rnd.randint(9, 16), rnd.randint(33, 64), rnd.randint(257, 512)])
        style = rnd.choice(["softmax", "ties", "wide"])
        out.append((rnd.randint(1, 6), rnd.randint(9, 15), rnd.randint(5, 8), budget, style))
    return out


def _inputs(case, gen):
    bs, depth_limit, k, budget, style = case
    lp, ids = random_inputs(bs, depth_limit, k, gen, style)
    roots = torch.randint(0, 1000, (bs,), generator=gen)
    return lp.to(DEV), ids.to(DEV), roots.to(DEV)


def _planted_targets(tree, gen, deepest=False):
    """Target tokens that follow a random (or the last row's) root path of every request, noise elsewhere."""
    bs, n = tree.parents.shape
    parents, tokens, num = tree.parents.cpu(), tree.token_ids.cpu(), tree.num_nodes.cpu()
    target = torch.randint(0, 50, (bs, n), generator=gen)
    for b in range(bs):
        row = int(num[b]) - 1 if deepest else int(torch.randint(0, int(num[b]), (1,), generator=gen))
        while row > 0:
            target[b, int(parents[b, row])] = tokens[b, row]
            row = int(parents[b, row])
    return target.to(DEV)


def test_build_cuda_equals_torch_and_heap():
    gen = torch.Generator().manual_seed(0)
    for i, case in enumerate(_cases(0, 40)):
        lp, ids, roots = _inputs(case, gen)
        got = build_tree(lp, ids, case[3], roots)  # CUDA: the Triton kernel
        want = build_tree_torch(lp, ids, case[3], roots)  # PyTorch ops on CUDA
        assert_trees_equal(got, want, str(case))
        if i < 12:  # the heap on CPU for a subset
            for b in range(case[0]):
                ref = build_tree_reference(lp[b].cpu(), ids[b].cpu(), case[3], int(roots[b]))
                assert_trees_equal(tree_row(got, b), ref, f"{case} b={b}")


@pytest.mark.parametrize("strategy", ["bitonic", "merge"])
def test_build_cuda_both_strategies_equal_torch(strategy):
    """Each phase-1 strategy of the fused builder, pinned, on every budget class (auto picks one)."""
    from sglang_ddtree.tree.build import build_tree_triton

    gen = torch.Generator().manual_seed(1)
    for case in _cases(1, 12):
        lp, ids, roots = _inputs(case, gen)
        got = build_tree_triton(lp, ids, case[3], roots, strategy=strategy)
        assert_trees_equal(got, build_tree_torch(lp, ids, case[3], roots), f"{case} {strategy}")


@pytest.mark.parametrize("strategy", ["bitonic", "merge"])
def test_build_cuda_reads_nan_positions_as_minus_inf(strategy):
    """A drafter's NaN logits make whole positions NaN: the kernel builds what the PyTorch path builds with -inf
    there (a valid tree, no NaN score; test_triton_interp.py has the same case under the interpreter)."""
    from sglang_ddtree.tree.build import build_tree_triton

    gen = torch.Generator().manual_seed(5)
    for budget in (16, 64, 512):
        lp, ids = random_inputs(4, 15, 8, gen, "softmax")
        lp[1] = float("nan")
        lp[2, 3:5] = float("nan")
        lp[3, 0] = float("nan")
        want = build_tree_torch(lp, ids, budget)
        got = build_tree_triton(lp.to(DEV), ids.to(DEV), budget, strategy=strategy)
        assert_trees_equal(got, want, f"budget {budget} {strategy}")
        assert not bool(got.scores.isnan().any())


def test_topology_and_accept_cuda_equal_torch():
    gen = torch.Generator().manual_seed(1)
    for case in _cases(1, 12):
        lp, ids, roots = _inputs(case, gen)
        tree = build_tree(lp, ids, case[3], roots)
        seq = torch.randint(1, 2000, (case[0],), generator=gen).to(DEV)
        got = build_verify_topology(tree, seq, int(seq.sum()))
        want = build_verify_topology_torch(tree, seq, int(seq.sum()))
        for f in TOPO_FIELDS:
            assert torch.equal(getattr(got, f), getattr(want, f)), (case, f)
        bounded = build_verify_topology(tree, seq, int(seq.sum()) + 100).custom_mask  # a host upper bound
        assert torch.equal(bounded[: want.custom_mask.numel()], want.custom_mask), case
        # the ancestor bits fa3's fused tree attention reads, from the same launch, into a taller buffer's head
        bs, n = tree.parents.shape
        buf = torch.full((bs * n + 5, (n + 31) // 32), 7, dtype=torch.int32, device=DEV)
        bits = build_verify_topology(tree, seq, int(seq.sum()), with_tree_mask=False, bits_out=buf).tree_bits
        assert torch.equal(bits.cpu(), tree_bits_torch(want.tree_mask.cpu())), case
        assert bits.data_ptr() == buf.data_ptr() and bool((buf[bs * n:] == 7).all()), case
        for _ in range(3):
            target = _planted_targets(tree, gen)
            for x, y in zip(accept_greedy(tree, target), accept_greedy_torch(tree, target)):
                assert torch.equal(x, y), case


def test_full_mask_cuda_equals_torch():
    """The FULL_MASK writer on CUDA: the PyTorch path's bytes for prefixes 0 / unaligned / long, into
    buffers at several addresses mod 16 (16-byte vector stores only at 0), nothing written outside."""
    gen = torch.Generator().manual_seed(6)
    cases = _cases(6, 8) + [(1, 15, 8, 1, "softmax"), (64, 15, 8, 512, "softmax")]
    for i, case in enumerate(cases):
        lp, ids, roots = _inputs(case, gen)
        tree = build_tree(lp, ids, case[3], roots)
        bs, n = tree.parents.shape
        seq = torch.randint(0, 2000, (bs,), generator=gen)
        seq[0] = [0, 1, 15, 1024][i % 4]
        seq = seq.to(DEV)
        want = build_verify_topology_torch(tree, seq, int(seq.sum()))
        for off, extra in ((0, 0), (0, 100), (1, 0), (7, 3), (12, 0)):
            numel = full_mask_numel(int(seq.sum()) + extra, bs, n)
            base = torch.zeros(off + numel + 32, dtype=torch.bool, device=DEV)
            got = build_verify_topology(
                tree, seq, int(seq.sum()) + extra, with_tree_mask=False, custom_mask_out=base[off:],
            )
            msg = (case, off, extra)
            assert torch.equal(got.custom_mask[: want.custom_mask.numel()], want.custom_mask), msg
            assert not base[:off].any() and not base[off + numel :].any(), msg
            assert torch.equal(got.retrieve_next_sibling, want.retrieve_next_sibling), msg
        own = build_verify_topology(tree, seq, int(seq.sum()))  # fresh buffer
        for f in TOPO_FIELDS:
            assert torch.equal(getattr(own, f), getattr(want, f)), (case, f)


def _sgl_reconstruct():
    """sgl_kernel's reconstruct_indices_from_tree_mask (in ``sgl_kernel.speculative`` or at the top level,
    by version); skips only when sgl_kernel is not installed."""
    import_or_skip("sgl_kernel")
    for where in ("sgl_kernel.speculative", "sgl_kernel"):
        try:
            mod = importlib.import_module(where)
        except ModuleNotFoundError as exc:
            if exc.name != where:
                raise
            continue
        if hasattr(mod, "reconstruct_indices_from_tree_mask"):
            return mod.reconstruct_indices_from_tree_mask
    raise AssertionError("sgl_kernel is installed but has no reconstruct_indices_from_tree_mask")


def _sgl_verify():
    """sgl_kernel.verify_tree_greedy; skips only when sgl_kernel is not installed."""
    return import_or_skip("sgl_kernel").verify_tree_greedy


def test_topology_equals_sgl_kernel_reconstruct_indices():
    reconstruct = _sgl_reconstruct()
    gen = torch.Generator().manual_seed(2)
    for case in _cases(2, 10):  # N <= 513: the upstream kernel runs one thread per row (<= 1024)
        lp, ids, roots = _inputs(case, gen)
        tree = build_tree(lp, ids, case[3], roots)
        bs, n = tree.parents.shape
        seq = torch.randint(0, 3000, (bs,), generator=gen).to(DEV)
        topo = build_verify_topology(tree, seq)
        positions = torch.empty(bs * n, dtype=torch.int64, device=DEV)
        ridx, rnext, rsib = (torch.full((bs, n), -7, dtype=torch.int64, device=DEV) for _ in range(3))
        reconstruct(topo.tree_mask.flatten(), seq, positions, ridx, rnext, rsib, bs, n)
        assert torch.equal(positions, topo.positions), case
        assert torch.equal(ridx, topo.retrieve_index), case
        assert torch.equal(rnext, topo.retrieve_next_token), case
        assert torch.equal(rsib, topo.retrieve_next_sibling), case
        ref = reconstruct_indices_reference(topo.tree_mask, seq)
        assert all(torch.equal(a, b) for a, b in zip(ref, (positions, ridx, rnext, rsib)))


def _upstream_triton_verify():
    spec_tree = import_or_skip("sglang.kernels.ops.speculative.spec_tree")

    def verify(predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
               retrive_next_sibling, target_predict):
        bs, n = candidates.shape
        spec_tree.verify_tree_greedy_kernel_triton[(bs,)](
            predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
            retrive_next_sibling, target_predict,
            batch_size=bs, num_speculative_tokens=accept_index.shape[1], num_draft_tokens=n,
        )

    return verify


@pytest.mark.parametrize("which", ["sgl_kernel", "sglang_triton"])
def test_accept_equals_upstream_verify_tree_greedy(which):
    verify = _sgl_verify() if which == "sgl_kernel" else _upstream_triton_verify()
    gen = torch.Generator().manual_seed(3)
    for case in _cases(3, 10):
        lp, ids, roots = _inputs(case, gen)
        tree = build_tree(lp, ids, case[3], roots)
        bs, n = tree.parents.shape
        topo = build_verify_topology(tree, torch.zeros(bs, dtype=torch.int64, device=DEV), with_tree_mask=False)
        width = tree.max_depth + 1
        for _ in range(3):
            target = _planted_targets(tree, gen)
            predicts = torch.full((bs * n,), -1, dtype=torch.int32, device=DEV)
            accept_index = torch.full((bs, width), -1, dtype=torch.int32, device=DEV)
            accept_num = torch.zeros(bs, dtype=torch.int32, device=DEV)
            verify(
                predicts=predicts,
                accept_index=accept_index,
                accept_token_num=accept_num,
                candidates=tree.token_ids,
                retrive_index=topo.retrieve_index,
                retrive_next_token=topo.retrieve_next_token,
                retrive_next_sibling=topo.retrieve_next_sibling,
                target_predict=target,
            )
            ours = accept_greedy(tree, target)
            assert torch.equal(ours.num_accepted, accept_num), case
            offs = torch.arange(bs, device=DEV)[:, None] * n
            glob = torch.where(ours.accepted_node_idx >= 0, ours.accepted_node_idx + offs, -1).to(torch.int32)
            assert torch.equal(glob, accept_index), case
            last = accept_index.gather(1, accept_num.long()[:, None]).squeeze(1).long()
            assert torch.equal(predicts.long()[last], ours.bonus_token), case


@pytest.mark.parametrize("bs,budget,backend", [(1, 64, "auto"), (8, 512, "auto"), (4, 64, "torch")])
def test_cuda_graph_capture_and_replay(bs, budget, backend):
    """build + topology + accept captured once, replayed on new inputs == eager on those inputs."""
    depth_limit, k = 15, 8
    gen = torch.Generator().manual_seed(4)
    lp, ids = (t.to(DEV) for t in random_inputs(bs, depth_limit, k, gen))
    roots = torch.randint(0, 1000, (bs,), generator=gen).to(DEV)
    seq = torch.full((bs,), 300, dtype=torch.int64, device=DEV)
    seq_sum = 300 * bs  # replays keep the sum (the mask size), not the lengths
    target = torch.zeros(bs, budget + 1, dtype=torch.int64, device=DEV)

    def step():
        tree = build_tree(lp, ids, budget, roots, backend=backend)
        topo = build_verify_topology(tree, seq, seq_sum, backend=backend)
        return tree, topo, accept_greedy(tree, target, backend=backend)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step()  # compile + warm up
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        g_tree, g_topo, g_acc = step()

    for trial in range(3):
        new_lp, new_ids = random_inputs(bs, depth_limit, k, gen, ["softmax", "ties", "wide"][trial])
        lp.copy_(new_lp)
        ids.copy_(new_ids)
        roots.copy_(torch.randint(0, 1000, (bs,), generator=gen))
        new_seq = torch.randint(0, 600, (bs,), generator=gen)
        new_seq[-1] = seq_sum - new_seq[:-1].sum()
        if new_seq[-1] < 0:
            new_seq = torch.full((bs,), 300)
        seq.copy_(new_seq)
        eager_tree = build_tree(lp, ids, budget, roots)
        target.copy_(_planted_targets(eager_tree, gen, deepest=True))
        graph.replay()
        torch.cuda.synchronize()
        e_tree, e_topo, e_acc = step()
        assert_trees_equal(g_tree, e_tree, f"replay {trial}")
        assert_trees_equal(g_tree, build_tree_torch(lp, ids, budget, roots), f"replay {trial} vs torch")
        for f in TOPO_FIELDS:
            assert torch.equal(getattr(g_topo, f), getattr(e_topo, f)), (trial, f)
        for x, y in zip(g_acc, e_acc):
            assert torch.equal(x, y), trial
        assert int(g_acc.num_accepted.min()) > 0  # the planted paths were accepted


def test_dummy_tree_topology_and_accept_on_cuda():
    tree = Tree.make_dummy(4, 64, DEV, max_depth=15)
    seq = torch.arange(4, device=DEV) * 10
    topo = build_verify_topology(tree, seq, int(seq.sum()))
    want = build_verify_topology_torch(tree, seq, int(seq.sum()))
    for f in TOPO_FIELDS:
        assert torch.equal(getattr(topo, f), getattr(want, f)), f
    acc = accept_greedy(tree, torch.zeros(4, 65, dtype=torch.int64, device=DEV))
    assert acc.num_accepted.tolist() == [0] * 4 and acc.bonus_token.tolist() == [0] * 4
