"""Hybrid (GDN) tree verify: every DDTree node gets the conv + SSM state of its own root path, and the state of the
last accepted node is what the COMMIT step keeps (``worker/hybrid.py``).

Runs SGLang 0.5.16's own Triton kernels exactly as ``GDNAttnBackend.forward_extend`` calls them in TARGET_VERIFY
with a tree (``causal_conv1d_update`` with ``retrieve_next_token`` / ``retrieve_next_sibling``, then the GDN
recurrence ``fused_sigmoid_gating_delta_rule_update`` with the ``retrieve_parent_token`` the conv kernel wrote),
fed with trees from DDTREE's builder and links from ``tree.build_verify_topology``; natively on CUDA (a ``gpu``
test there), else on CPU under the Triton interpreter (re-run in a subprocess). Every valid node's conv output,
GDN output, intermediate SSM state and conv window is held against a float64 recurrence over that node's root
path, and after a greedy ACCEPT the committed slot state against the reference state of the last accepted node.
Two deliberate faults must fail those same checks: siblings chained in descending row order, and committing
row ``accept_len - 1`` (DFLASH's chain rule) instead of the accepted node's row (the same two faults the GPU tests
inject through the test plugin, ``DDTREE_TEST_HYBRID_FAULT``).
The commit runs upstream's own ``HybridLinearAttnBackend.update_mamba_state_after_mtp_verify`` and its fused
Triton scatter over this test's pools (on CPU its wrappers' CUDA-tensor check is told yes while the interpreter
runs the kernels); the GPU engine tests (``test_hybrid_gpu.py``) run it inside a real engine.
"""

from types import SimpleNamespace

import pytest
import torch

from _interp_rerun import kernel_test_mode

from sglang_ddtree.compat import adapter as _adapter

# upstream's state commit (update_mamba_state_after_mtp_verify) changes shape after 0.5.16 (0.5.18 translates the
# track indices through the linear backend); hybrid targets are refused there (hybrid_args.check_release;
# benchmark/results/session25/hybrid_on_0.5.23.md: what a port would take)
pytestmark = pytest.mark.skipif(_adapter().family != "0.5.16",
                                reason="hybrid tree verify is verified against SGLang 0.5.16 only (refused elsewhere)")

_RUN_HERE, _CUDA, DEV = kernel_test_mode(__file__, "SGLANG_DDTREE_TEST_HYBRID_VERIFY_INTERP_CHILD", globals())
if _RUN_HERE:
    import torch.nn.functional as F

    from sglang.kernels.ops.attention.fla.fused_sigmoid_gating_recurrent import (
        fused_sigmoid_gating_delta_rule_update,
    )
    from sglang.kernels.ops.mamba.causal_conv1d_triton import causal_conv1d_update
    from sglang.srt.layers.attention.hybrid_linear_attn_backend import HybridLinearAttnBackend

    from _test_plugin_env import PLUGIN_DIR  # noqa: F401  (puts the test plugin's pure modules on sys.path)
    from ddtree_test_hooks.verify_check import reversed_sibling_links

    from sglang_ddtree.tree import build_tree, build_verify_topology
    from sglang_ddtree.worker.hybrid import HybridStateCommit, last_accepted_rows
    from sglang_ddtree.worker.kv_commit import greedy_accept_commit
    from sglang_ddtree.worker.tree_api import fill_root

    H, HV, KD, VD, KW = 1, 2, 16, 16, 4  # key heads, value heads, key / value head dims, conv kernel width
    DIM = 2 * H * KD + HV * VD  # conv channels = [q | k | v]
    SLOTS = 8
    TOL = 2e-4  # float32 kernels vs the float64 reference

    # ---- the case: trees, links, inputs ----------------------------------------------------------------------

    def _case(bs, depth, topk, budget, seed):
        g = torch.Generator().manual_seed(seed)
        vocab = 6
        lp, ids = torch.log_softmax(torch.randn(bs, depth, vocab, generator=g), -1).topk(topk, dim=-1)
        tree = build_tree(lp.to(DEV), ids.to(DEV), budget, backend="torch")
        tokens = fill_root(tree, torch.randint(vocab, (bs,), generator=g).to(DEV))
        prefix = torch.randint(5, 30, (bs,), generator=g).to(DEV)
        topo = build_verify_topology(tree, prefix, None, with_tree_mask=False, backend="torch")
        n = budget + 1
        T = bs * n
        inp = SimpleNamespace(
            tree=tree, tokens=tokens, prefix=prefix, n=n,
            next_token=topo.retrieve_next_token, next_sibling=topo.retrieve_next_sibling,
            mixed=torch.randn(T, DIM, generator=g), a=torch.randn(T, HV, generator=g),
            b=torch.randn(T, HV, generator=g), A_log=torch.randn(HV, generator=g) * 0.5,
            dt_bias=torch.randn(HV, generator=g) * 0.5, w=torch.randn(DIM, KW, generator=g) / KW,
            bias=torch.randn(DIM, generator=g) * 0.1, conv0=torch.randn(SLOTS, DIM, KW - 1, generator=g),
            ssm0=torch.randn(SLOTS, HV, VD, KD, generator=g) * 0.3,
            slots=torch.randperm(SLOTS, generator=g)[:bs].to(torch.int32),  # mamba slot != batch row
            agree=torch.rand(bs, n, generator=g),
        )
        return inp

    def _reversed_sibling_links_loop(tree):
        """The fault, spelled out: first child = the highest child row, siblings chained downwards."""
        bs, n = tree.parents.shape
        nt = torch.full((bs, n), -1, dtype=torch.int64)
        ns = torch.full((bs, n), -1, dtype=torch.int64)
        par = tree.parents.cpu()
        for b in range(bs):
            for p in range(n):
                kids = [c for c in range(n) if int(par[b, c]) == p][::-1]
                if kids:
                    nt[b, p] = kids[0]
                    for x, y in zip(kids, kids[1:]):
                        ns[b, x] = y
        return nt.to(DEV), ns.to(DEV)

    # ---- upstream's verify, as GDNAttnBackend.forward_extend runs it --------------------------------------------

    def _upstream_verify(inp, next_token, next_sibling, tree_links=True):
        bs, n = inp.tree.parents.shape
        conv_state = inp.conv0.clone().to(DEV)
        ssm_state = inp.ssm0.clone().to(DEV)
        inter_conv = torch.zeros(bs + 1, n, DIM, KW - 1, device=DEV)
        inter_ssm = torch.zeros(bs + 1, n, HV, VD, KD, device=DEV)
        inter_idx = torch.arange(bs, dtype=torch.int32, device=DEV)
        slots = inp.slots.to(DEV)
        parent = torch.empty_like(next_token) if tree_links else None
        x = inp.mixed.to(DEV).view(bs, n, DIM).transpose(1, 2)
        conv_out = causal_conv1d_update(
            x, conv_state, inp.w.to(DEV), inp.bias.to(DEV), "silu", conv_state_indices=slots,
            intermediate_conv_window=inter_conv, intermediate_state_indices=inter_idx,
            retrieve_next_token=next_token if tree_links else None,
            retrieve_next_sibling=next_sibling if tree_links else None,
            retrieve_parent_token=parent,
        ).transpose(1, 2).reshape(bs * n, DIM)
        q, k, v = torch.split(conv_out, [H * KD, H * KD, HV * VD], dim=-1)
        o = fused_sigmoid_gating_delta_rule_update(
            A_log=inp.A_log.to(DEV), a=inp.a.to(DEV), dt_bias=inp.dt_bias.to(DEV), softplus_beta=1.0,
            softplus_threshold=20.0, q=q.reshape(1, -1, H, KD), k=k.reshape(1, -1, H, KD),
            v=v.reshape(1, -1, HV, VD), b=inp.b.to(DEV), initial_state_source=ssm_state,
            initial_state_indices=slots, cu_seqlens=torch.arange(0, bs * n + 1, n, dtype=torch.int32, device=DEV),
            use_qk_l2norm_in_kernel=True, is_kda=False, disable_state_update=True,
            intermediate_states_buffer=inter_ssm, intermediate_state_indices=inter_idx, cache_steps=n,
            retrieve_parent_token=parent,
        ).reshape(bs, n, HV, VD)
        return SimpleNamespace(conv_out=conv_out.view(bs, n, DIM), o=o, inter_conv=inter_conv, inter_ssm=inter_ssm,
                               conv_state=conv_state, ssm_state=ssm_state)

    # ---- the float64 reference: a plain recurrence over each node's root path ---------------------------------

    def _path(parents_row, i):
        path = [i]
        while int(parents_row[path[-1]]) >= 0:
            path.append(int(parents_row[path[-1]]))
        return path[::-1]

    def _reference(inp):
        """Per request and valid node: conv output, GDN output, SSM state and conv window after the node."""
        d = torch.float64
        bs, n = inp.tree.parents.shape
        parents, valid = inp.tree.parents.cpu(), inp.tree.valid.cpu()
        mixed = inp.mixed.to(d).view(bs, n, DIM)
        w, bias = inp.w.to(d), inp.bias.to(d)
        A, dt = inp.A_log.to(d), inp.dt_bias.to(d)
        a, beta_in = inp.a.to(d).view(bs, n, HV), inp.b.to(d).view(bs, n, HV)
        out = {}
        for r in range(bs):
            slot = int(inp.slots[r])
            for i in range(n):
                if not bool(valid[r, i]):
                    continue
                window = [inp.conv0[slot].to(d)[:, j] for j in range(KW - 1)]  # oldest first
                h = inp.ssm0[slot].to(d).clone()  # [HV, V, K]
                for node in _path(parents[r], i):
                    window.append(mixed[r, node])
                    cx = F.silu(sum(w[:, j] * window[-KW + j] for j in range(KW)) + bias)
                    q, k, v = torch.split(cx, [H * KD, H * KD, HV * VD])
                    q, k = q.view(H, KD), k.view(H, KD)
                    q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) * KD ** -0.5
                    k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
                    o = torch.empty(HV, VD, dtype=d)
                    for hv in range(HV):
                        hk = hv // (HV // H)
                        g = -torch.exp(A[hv]) * F.softplus(a[r, node, hv] + dt[hv])
                        beta = torch.sigmoid(beta_in[r, node, hv])
                        s = h[hv] * torch.exp(g)  # [V, K]
                        vv = (v.view(HV, VD)[hv] - s @ k[hk]) * beta
                        s = s + vv[:, None] * k[hk][None, :]
                        h[hv] = s
                        o[hv] = s @ q[hk]
                out[(r, i)] = SimpleNamespace(conv_out=cx, o=o, ssm=h.clone(),
                                              window=torch.stack(window[-(KW - 1):], dim=-1))
        return out

    def _errors(inp, got, ref):
        worst = dict(conv_out=0.0, o=0.0, ssm=0.0, window=0.0)
        for (r, i), e in ref.items():
            worst["conv_out"] = max(worst["conv_out"], (got.conv_out[r, i].cpu().double() - e.conv_out).abs().max().item())
            worst["o"] = max(worst["o"], (got.o[r, i].cpu().double() - e.o).abs().max().item())
            worst["ssm"] = max(worst["ssm"], (got.inter_ssm[r, i].cpu().double() - e.ssm).abs().max().item())
            worst["window"] = max(worst["window"], (got.inter_conv[r, i].cpu().double() - e.window).abs().max().item())
        return worst

    # ---- COMMIT: our row choice through a stand-in of upstream's scatter ---------------------------------------

    class _Backend:
        """The target's hybrid backend as the COMMIT sees it: upstream's own
        ``HybridLinearAttnBackend.update_mamba_state_after_mtp_verify`` (-> ``scatter_mamba_states_after_mtp_verify``,
        the fused Triton gather-scatter) over this case's pools, with the verify's mamba slots as its
        ``forward_metadata.mamba_cache_indices`` (one layer)."""

        update_mamba_state_after_mtp_verify = HybridLinearAttnBackend.update_mamba_state_after_mtp_verify

        def __init__(self, got, slots):
            caches = SimpleNamespace(temporal=got.ssm_state[None], intermediate_ssm=got.inter_ssm[None],
                                     conv=[got.conv_state[None]], intermediate_conv_window=[got.inter_conv[None]])
            self.linear_attn_backend = SimpleNamespace(
                forward_metadata=SimpleNamespace(mamba_cache_indices=slots.to(DEV)),
                req_to_token_pool=SimpleNamespace(get_speculative_mamba2_params_all_layers=lambda: caches))

    def _cuda_checks_pass_on_cpu():
        """Upstream's scatter wrappers refuse non-CUDA tensors; under the interpreter their kernels run on CPU
        tensors, so the check is told yes for the duration of the commit (nothing else changes)."""
        import contextlib

        @contextlib.contextmanager
        def scope():
            if _CUDA:
                yield
                return
            orig = torch.Tensor.is_cuda
            torch.Tensor.is_cuda = property(lambda self: True)
            try:
                yield
            finally:
                torch.Tensor.is_cuda = orig

        return scope()

    def _accept(inp):
        """A greedy ACCEPT where the target often agrees with some child: long, branching accepted paths."""
        bs, n = inp.tree.parents.shape
        tokens = inp.tokens
        parents = inp.tree.parents
        target = torch.zeros(bs, n, dtype=torch.int64, device=DEV)
        for r in range(bs):  # the target's token at a node: the token of its last child (a non-first sibling) or a miss
            for i in range(n):
                kids = [c for c in range(n) if int(parents[r, c]) == i]
                if kids and float(inp.agree[r, i]) < 0.9:
                    target[r, i] = tokens[r, kids[-1]]
                else:
                    target[r, i] = 99  # no child has it: the bonus token
        loc = torch.arange(bs * n, device=DEV).view(bs, n) + 1
        width = inp.tree.max_depth + 1
        return greedy_accept_commit(inp.tree, tokens, target, loc, inp.prefix, width, backend="torch")

    def _commit(inp, got, commit, steps_override=None):
        backend = _Backend(got, inp.slots)
        runner = SimpleNamespace(attn_backend=backend, model=None)
        hc = HybridStateCommit(runner, track_interval=None)
        with _cuda_checks_pass_on_cpu():
            if steps_override is None:
                hc(SimpleNamespace(mamba_track_indices=None), commit, inp.n, inp.prefix)
            else:
                backend.update_mamba_state_after_mtp_verify(last_correct_step_indices=steps_override,
                                                            mamba_track_indices=None, mamba_steps_to_track=None,
                                                            model=None)
        return backend

    def _commit_errors(inp, got, commit, ref):
        """Max |committed slot state - reference state of the last accepted node| over the requests."""
        rows = last_accepted_rows(commit.ctx_rows, commit.accept_lens, inp.n).tolist()
        worst = 0.0
        for r, row in enumerate(rows):
            e, s = ref[(r, row)], int(inp.slots[r])
            worst = max(worst, (got.ssm_state[s].cpu().double() - e.ssm).abs().max().item(),
                        (got.conv_state[s].cpu().double() - e.window).abs().max().item())
        return worst

    # ---- tests ----------------------------------------------------------------------------------------------

    CASES = [  # bs, max depth, topk, budget, seed: branching at several depths, pads (budget > nodes) in the last
        (3, 5, 3, 15, 0),
        (2, 3, 2, 15, 1),
    ]

    @pytest.mark.parametrize("bs,depth,topk,budget,seed", CASES)
    def test_every_node_gets_its_root_path_state_and_the_accepted_node_is_committed(bs, depth, topk, budget, seed):
        inp = _case(bs, depth, topk, budget, seed)
        ref = _reference(inp)
        got = _upstream_verify(inp, inp.next_token, inp.next_sibling)
        err = _errors(inp, got, ref)
        assert max(err.values()) < TOL, err
        # parents the conv kernel derived from our links == the tree's parents on every valid non-root row
        # (checked through the states above; pads are unreachable and never committed)
        commit = _accept(inp)
        rows = last_accepted_rows(commit.ctx_rows, commit.accept_lens, inp.n)
        assert bool((rows >= 0).all()) and bool((rows < inp.n).all())
        assert bool(inp.tree.valid.gather(1, rows.view(-1, 1).to(DEV)).all())
        # the case exercises the tree rule: some request's last accepted row is not its depth (a chain's row)
        assert bool((rows.cpu() != commit.accept_lens.cpu().to(torch.int64) - 1).any())
        _commit(inp, got, commit)
        assert _commit_errors(inp, got, commit, ref) < TOL
        if depth == 3:  # some pads in this case: budget 15 > 2 + 4 + 8 nodes
            assert not bool(inp.tree.valid.all())

    @pytest.mark.parametrize("bs,depth,topk,budget,seed", CASES[:1])
    def test_fault_reversed_sibling_order_is_caught(bs, depth, topk, budget, seed):
        inp = _case(bs, depth, topk, budget, seed)
        ref = _reference(inp)
        # the GPU fault hook's links (test plugin, DDTREE_TEST_HYBRID_FAULT=reversed_siblings) == the loop's
        nt, ns = reversed_sibling_links(inp.tree.parents)
        lnt, lns = _reversed_sibling_links_loop(inp.tree)
        assert torch.equal(nt, lnt) and torch.equal(ns, lns)
        got = _upstream_verify(inp, nt, ns)
        err = _errors(inp, got, ref)
        assert err["ssm"] > 100 * TOL and err["o"] > 100 * TOL, err

    @pytest.mark.parametrize("bs,depth,topk,budget,seed", CASES[:1])
    def test_fault_committing_the_chain_row_is_caught(bs, depth, topk, budget, seed):
        inp = _case(bs, depth, topk, budget, seed)
        ref = _reference(inp)
        got = _upstream_verify(inp, inp.next_token, inp.next_sibling)
        commit = _accept(inp)
        chain_rule = commit.accept_lens.to(torch.int64) - 1  # DFLASH's update: the accept_len-1-th verify row
        _commit(inp, got, commit, steps_override=chain_rule)
        assert _commit_errors(inp, got, commit, ref) > 100 * TOL

    def test_topk_one_chain_runs_the_backends_chain_path_and_commits_the_same_rows():
        """With topk 1 the backend passes no links (its chain path); DDTree's chain occupies rows in depth order."""
        inp = _case(2, 6, 1, 9, 3)  # 6 chain nodes + 3 pads
        ref = _reference(inp)
        got = _upstream_verify(inp, inp.next_token, inp.next_sibling, tree_links=False)
        err = _errors(inp, got, ref)
        assert max(err.values()) < TOL, err
        commit = _accept(inp)
        rows = last_accepted_rows(commit.ctx_rows, commit.accept_lens, inp.n)
        assert torch.equal(rows.cpu(), commit.accept_lens.cpu().to(torch.int64) - 1)
        _commit(inp, got, commit)
        assert _commit_errors(inp, got, commit, ref) < TOL

    def test_radix_track_slot_gets_the_state_at_the_track_point():
        """extra_buffer strategy: a round whose commit crosses a multiple of the track interval also writes the
        state after position track_point - 1 (the accepted node at that depth) into the request's track slot."""
        inp = _case(3, 5, 3, 15, 0)
        ref = _reference(inp)
        got = _upstream_verify(inp, inp.next_token, inp.next_sibling)
        commit = _accept(inp)
        acc = commit.accept_lens.cpu().tolist()
        interval = 16  # >= N = 16 (validated)
        # request 0 crosses at its last accepted depth, request 1 does not cross, request 2 crosses at the root
        prefix = torch.tensor([16 * 3 - acc[0], 16 * 5 + 1, 16 * 7 - 1], device=DEV)
        used = set(inp.slots.tolist())
        track = torch.tensor([s for s in range(SLOTS) if s not in used][:3], dtype=torch.int64, device=DEV)
        before = (got.ssm_state.clone(), got.conv_state.clone())
        backend = _Backend(got, inp.slots)
        hc = HybridStateCommit(SimpleNamespace(attn_backend=backend, model=None), track_interval=interval)
        with _cuda_checks_pass_on_cpu():
            hc(SimpleNamespace(mamba_track_indices=track), commit, inp.n, prefix)
        rows = (commit.ctx_rows.view(3, -1) - torch.arange(3, device=DEV).view(3, 1) * inp.n).cpu()
        want_depth = [acc[0] - 1, None, 0]
        for r, depth in enumerate(want_depth):
            s = int(track[r])
            if depth is None:
                assert torch.equal(got.ssm_state[s], before[0][s]) and torch.equal(got.conv_state[s], before[1][s])
                continue
            e = ref[(r, int(rows[r, depth]))]
            assert (got.ssm_state[s].cpu().double() - e.ssm).abs().max().item() < TOL
            assert (got.conv_state[s].cpu().double() - e.window).abs().max().item() < TOL
        assert _commit_errors(inp, got, commit, ref) < TOL  # and the requests' own slots as always
