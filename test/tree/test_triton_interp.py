"""Triton kernels == the PyTorch path, run on CPU by the Triton interpreter (small sizes).

Also holds our acceptance against upstream's Triton ``verify_tree_greedy`` kernel, interpreted.
TRITON_INTERPRET only works if set before Triton is first imported, and setting it in this process would
leak into every later test, so unless it is already set this module re-runs itself in a subprocess with
it. Skipped on CUDA machines, where ``test_gpu.py`` runs the same kernels natively.
"""

import random

import pytest
import torch

from _interp_rerun import interpreter_active, make_rerun_test

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA present: see test_gpu.py")

_CHILD_ENV = "SGLANG_DDTREE_TEST_INTERP_CHILD"


if not torch.cuda.is_available() and not interpreter_active():
    test_rerun_in_interpreter_subprocess = make_rerun_test(__file__, _CHILD_ENV)

else:
    from sglang_ddtree.tree import accept_greedy, build_tree, build_verify_topology, full_mask_numel
    from sglang_ddtree.tree.reference import accept_greedy_torch, build_tree_torch, build_verify_topology_torch
    from tree_cases import assert_trees_equal, import_or_skip, random_inputs

    TOPO_FIELDS = (
        "positions", "retrieve_index", "retrieve_next_token", "retrieve_next_sibling", "tree_mask", "custom_mask"
    )
    CONFIGS = [  # (bs, L-1, K, budget, style)
        (1, 1, 1, 1, "softmax"),
        (2, 1, 3, 1, "softmax"),
        (1, 3, 1, 5, "softmax"),  # chain with pads
        (2, 4, 2, 3, "ties"),
        (3, 5, 3, 8, "ties"),
        (2, 6, 4, 16, "softmax"),
        (2, 6, 4, 16, "special"),
        (1, 5, 3, 32, "wide"),
        (2, 3, 5, 17, "ties"),
        (1, 8, 2, 40, "softmax"),
        (1, 2, 8, 4, "softmax"),  # K > budget
        (1, 15, 8, 64, "softmax"),  # the bs 1 / budget 64 benchmark shape
    ]

    def _trees():
        gen = torch.Generator().manual_seed(21)
        for bs, depth_limit, k, budget, style in CONFIGS:
            lp, ids = random_inputs(bs, depth_limit, k, gen, style)
            roots = torch.randint(0, 9, (bs,), generator=gen)
            yield (bs, depth_limit, k, budget, style), lp, ids, roots, gen

    def test_build_kernel_equals_torch():
        for cfg, lp, ids, roots, _ in _trees():
            want = build_tree_torch(lp, ids, cfg[3], roots)
            assert_trees_equal(build_tree(lp, ids, cfg[3], roots, backend="triton"), want, str(cfg))
            assert_trees_equal(build_tree(lp, ids, cfg[3], None, backend="triton"), build_tree_torch(lp, ids, cfg[3]))

    def test_build_kernel_merge_strategy_equals_torch():
        """Phase 1 by merge paths (the large-budget default) on every shape, plus budget 512, bs 2."""
        from sglang_ddtree.tree.build import build_tree_triton

        for cfg, lp, ids, roots, _ in _trees():
            want = build_tree_torch(lp, ids, cfg[3], roots)
            assert_trees_equal(build_tree_triton(lp, ids, cfg[3], roots, strategy="merge"), want, str(cfg))
        gen = torch.Generator().manual_seed(8)
        for style, budget in (("softmax", 512), ("ties", 300)):
            lp, ids = random_inputs(2, 15, 8, gen, style)
            want = build_tree_torch(lp, ids, budget)
            assert_trees_equal(build_tree_triton(lp, ids, budget, strategy="merge"), want, style)

    def test_build_kernel_nan_positions_count_as_impossible_drafts():
        """A drafter whose logits hold a NaN has a NaN logsumexp, so a whole position of its log-probs is NaN
        (one position, several, or a whole request). Both strategies build what the PyTorch path builds, with
        NaN read as -inf: a valid tree (every parent an earlier row), NaN drafts below every real one. (Before:
        NaN's float bits ranked above every real score and a row could be its own parent.)"""
        from sglang_ddtree.tree.build import build_tree_triton

        gen = torch.Generator().manual_seed(5)
        for budget in (7, 15, 64):
            lp, ids = random_inputs(4, 15, 8, gen, "softmax")
            lp[1] = float("nan")  # every position
            lp[2, 3:5] = float("nan")  # two positions
            lp[3, 0] = float("nan")  # the first position: everything below it is unreachable
            want = build_tree_torch(lp, ids, budget)
            for strategy in ("bitonic", "merge"):
                got = build_tree_triton(lp, ids, budget, strategy=strategy)
                assert_trees_equal(got, want, f"budget {budget} {strategy}")
            n = budget + 1
            rows = torch.arange(n)
            live = want.valid & (rows > 0)
            assert bool(((want.parents >= 0) & (want.parents < rows)).masked_select(live).all())
            assert not bool(want.scores.isnan().any())
            finite = lp[0].clone()
            sane = build_tree_torch(finite.unsqueeze(0), ids[:1], budget)
            assert_trees_equal(build_tree_torch(lp[:1], ids[:1], budget), sane, "a NaN-free request is unchanged")
            # request 2: every node at depth >= 4 (below the NaN positions 3-4) scores -inf; rows with a finite
            # score come first
            finite_rows = torch.isfinite(want.scores[2]) & want.valid[2]
            assert bool((want.depths[2][finite_rows] <= 3).all())

    def test_build_kernel_strided_inputs():
        gen = torch.Generator().manual_seed(2)
        lp, ids = random_inputs(2, 4, 6, gen)
        lp_s, ids_s = lp[:, :, :3], ids[:, :, :3]  # non-contiguous views of the first 3 ranks
        want = build_tree_torch(lp_s.contiguous(), ids_s.contiguous(), 9)
        assert_trees_equal(build_tree(lp_s, ids_s, 9, backend="triton"), want)

    def test_topology_kernel_equals_torch():
        for cfg, lp, ids, roots, gen in _trees():
            tree = build_tree_torch(lp, ids, cfg[3], roots)
            seq = torch.randint(0, 300, (cfg[0],), generator=gen)
            for seq_t in (seq, seq.to(torch.int32)):
                got = build_verify_topology(tree, seq_t, int(seq.sum()), backend="triton")
                want = build_verify_topology_torch(tree, seq, int(seq.sum()))
                for f in TOPO_FIELDS:
                    assert torch.equal(getattr(got, f), getattr(want, f)), (cfg, f)
            bounded = build_verify_topology(tree, seq, int(seq.sum()) + 5, backend="triton").custom_mask
            assert torch.equal(bounded[: want.custom_mask.numel()], want.custom_mask), cfg
            lean = build_verify_topology(tree, seq, with_tree_mask=False, backend="triton")
            assert lean.tree_mask is None and lean.custom_mask is None and lean.tree_bits is None
            assert torch.equal(lean.retrieve_next_token, want.retrieve_next_token)
            _assert_bits_written(tree, seq, cfg)

    def _assert_bits_written(tree, seq, msg):
        """``bits_out`` receives the tree mask's rows as bit words (the PyTorch path's bytes), with and without
        the masks, into a fresh buffer and into the head of a wider, taller one (other bytes untouched)."""
        from sglang_ddtree.tree.reference import tree_bits_torch

        bs, n = tree.parents.shape
        nw = (n + 31) // 32
        want = tree_bits_torch(build_verify_topology_torch(tree, seq, None).tree_mask)
        for with_mask, bound in ((False, None), (True, int(seq.sum()))):
            got = build_verify_topology(tree, seq, bound, with_tree_mask=with_mask, backend="triton",
                                        bits_out=torch.empty(bs * n, nw, dtype=torch.int32))
            assert torch.equal(got.tree_bits, want), (msg, with_mask)
            wide = torch.full((bs * n + 3, nw + 2), 7, dtype=torch.int32)
            got = build_verify_topology(tree, seq, bound, with_tree_mask=with_mask, backend="triton",
                                        bits_out=wide[:, :nw])
            assert torch.equal(wide[: bs * n, :nw], want), (msg, with_mask)
            assert got.tree_bits.data_ptr() == wide.data_ptr()
            assert (wide[bs * n:] == 7).all() and (wide[:, nw:] == 7).all(), (msg, with_mask)

    def _assert_topology_equal(tree, seq, msg):
        got = build_verify_topology(tree, seq, int(seq.sum()), backend="triton")
        want = build_verify_topology_torch(tree, seq, int(seq.sum()))
        for f in TOPO_FIELDS:
            assert torch.equal(getattr(got, f), getattr(want, f)), (msg, f)

    def test_topology_kernel_budget_512():
        """N = 513: several 128-column chunks and row blocks, the last ones partial."""
        gen = torch.Generator().manual_seed(5)
        lp, ids = random_inputs(2, 15, 8, gen)
        tree = build_tree_torch(lp, ids, 512)
        _assert_topology_equal(tree, torch.tensor([3, 70]), "budget 512")
        _assert_bits_written(tree, torch.tensor([3, 70]), "budget 512")

    # (bs, budget, prefixes): budgets 1..520, prefixes 0 / unaligned / 16-aligned, one or several requests
    FULL_MASK_CASES = [
        (1, 1, [0]), (1, 2, [1]), (1, 3, [13]), (2, 7, [0, 5]), (3, 15, [16, 17, 3]), (2, 16, [15, 1]),
        (1, 17, [33]), (2, 31, [2, 100]), (2, 33, [7, 0]), (1, 63, [31]), (2, 64, [0, 0]), (1, 127, [9]),
        (1, 128, [250]), (2, 129, [14, 1]), (1, 300, [1023]), (2, 256, [1, 1024]), (1, 520, [1037]),
    ]

    def test_topology_full_mask_into_unaligned_buffers_equals_torch():
        """The FULL_MASK writer (16-byte-aligned word stores, byte edges) writes the PyTorch path's bytes:
        buffers at every address mod 16, exact and larger host bounds, nothing written outside the buffer."""
        gen = torch.Generator().manual_seed(9)
        for i, (bs, budget, prefixes) in enumerate(FULL_MASK_CASES):
            lp, ids = random_inputs(bs, 15, 8, gen)
            tree = build_tree_torch(lp, ids, budget)
            seq = torch.tensor(prefixes)
            want = build_verify_topology_torch(tree, seq, int(seq.sum()))
            bound = int(seq.sum()) + (7 if i % 3 == 1 else 0)
            numel = full_mask_numel(bound, bs, budget + 1)
            off = (5 * i + 3) % 16
            base = torch.zeros(off + numel + 16, dtype=torch.bool)
            got = build_verify_topology(
                tree, seq, bound, with_tree_mask=i % 2 == 0, custom_mask_out=base[off:],
                backend="triton",
            )
            msg = (bs, budget, prefixes, off, bound)
            assert torch.equal(got.custom_mask[: want.custom_mask.numel()], want.custom_mask), msg
            assert not base[:off].any() and not base[off + numel :].any(), msg
            for f in TOPO_FIELDS[:-1]:
                if getattr(got, f) is not None:
                    assert torch.equal(getattr(got, f), getattr(want, f)), (msg, f)

    def _general_tree(n, num, max_depth, rnd):
        """Random parents (depth <= max_depth), rows relabelled so parents may follow children and
        siblings interleave; the root stays row 0, rows >= num are pads."""
        par, dep = [-1], [0]
        for _ in range(1, num):
            p = rnd.choice([r for r in range(len(par)) if dep[r] < max_depth])
            par.append(p)
            dep.append(dep[p] + 1)
        perm = [0] + rnd.sample(range(1, num), num - 1)  # old row -> new row
        parents, depths = [-1] * n, [0] * n
        for old in range(1, num):
            parents[perm[old]], depths[perm[old]] = perm[par[old]], dep[old]
        return parents, depths

    def test_topology_kernel_general_trees():
        """Links and masks follow `parents` for any tree, not only build_tree's row order."""
        from sglang_ddtree.tree import Tree

        rnd = random.Random(6)
        for n, bs, max_depth in ((9, 3, 3), (40, 2, 6), (200, 2, 15)):
            rows = [_general_tree(n, rnd.randint(1, n), max_depth, rnd) for _ in range(bs)]
            tree = Tree(
                token_ids=torch.zeros(bs, n, dtype=torch.int64),
                parents=torch.tensor([r[0] for r in rows]),
                depths=torch.tensor([r[1] for r in rows]),
                scores=torch.zeros(bs, n),
                valid=torch.ones(bs, n, dtype=torch.bool),
                num_nodes=torch.full((bs,), n, dtype=torch.int32),
                max_depth=max_depth,
            )
            _assert_topology_equal(tree, torch.randint(0, 40, (bs,)), (n, bs))

    def _planted_targets(tree, rnd, extra_vocab=3):
        bs, n = tree.parents.shape
        target = torch.randint(0, extra_vocab, (bs, n))
        for b in range(bs):
            row = rnd.randrange(int(tree.num_nodes[b]))
            while row > 0:  # plant the path root -> row
                parent = int(tree.parents[b, row])
                target[b, parent] = tree.token_ids[b, row]
                row = parent
        return target

    def test_accept_kernel_equals_torch():
        rnd = random.Random(3)
        for cfg, lp, ids, roots, _ in _trees():
            tree = build_tree_torch(lp, ids, cfg[3], roots)
            for _ in range(3):
                target = _planted_targets(tree, rnd)
                got = accept_greedy(tree, target, backend="triton")
                want = accept_greedy_torch(tree, target)
                for x, y in zip(got, want):
                    assert torch.equal(x, y), cfg
                got32 = accept_greedy(tree, target.to(torch.int32), backend="triton")
                assert torch.equal(got32.bonus_token, want.bonus_token)

    def test_accept_equals_upstream_verify_tree_greedy_triton():
        """Same accept lengths / indices / bonus as SGLang's own Triton verify_tree_greedy kernel."""
        spec_tree = import_or_skip("sglang.kernels.ops.speculative.spec_tree")
        rnd = random.Random(4)
        for cfg, lp, ids, roots, gen in _trees():
            tree = build_tree_torch(lp, ids, cfg[3], roots)
            topo = build_verify_topology_torch(tree, torch.zeros(cfg[0], dtype=torch.int64))
            bs, n = tree.parents.shape
            width = tree.max_depth + 1
            for _ in range(3):
                target = _planted_targets(tree, rnd)
                predicts = torch.full((bs * n,), -1, dtype=torch.int32)
                accept_index = torch.full((bs, width), -1, dtype=torch.int32)
                accept_num = torch.zeros(bs, dtype=torch.int32)
                spec_tree.verify_tree_greedy_kernel_triton[(bs,)](
                    predicts, accept_index, accept_num, tree.token_ids, topo.retrieve_index,
                    topo.retrieve_next_token, topo.retrieve_next_sibling, target,
                    batch_size=bs, num_speculative_tokens=width, num_draft_tokens=n,
                )
                ours = accept_greedy(tree, target, backend="triton")
                assert torch.equal(ours.num_accepted, accept_num), cfg
                offs = torch.arange(bs)[:, None] * n
                glob = torch.where(ours.accepted_node_idx >= 0, ours.accepted_node_idx + offs, -1)
                assert torch.equal(glob.to(torch.int32), accept_index), cfg
                last = accept_index.gather(1, accept_num.long()[:, None]).squeeze(1).long()
                assert torch.equal(predicts.long()[last], ours.bonus_token), cfg
