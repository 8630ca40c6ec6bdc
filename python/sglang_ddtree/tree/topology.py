"""``build_verify_topology``: what SGLang's tree verify needs from a built tree, without host syncs.

Serves the verify step (draft -> build tree -> VERIFY -> accept -> commit): the FULL_MASK custom mask
in SGLang's flattened layout, positions, and the ``retrieve_index / retrieve_next_token /
retrieve_next_sibling`` links exactly as ``sgl_kernel.reconstruct_indices_from_tree_mask`` derives them
from the mask. Triton on CUDA (``kernels/topology.py``), ``reference.build_verify_topology_torch`` elsewhere;
both write the same bytes.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang_ddtree.tree._common import (TOPOLOGY_NUM_WARPS, bit_words_out, cdiv, check, check_tree, next_pow2,
                                        use_triton)
from sglang_ddtree.tree.metadata import Tree, VerifyTopology
from sglang_ddtree.tree.reference import build_verify_topology_torch


__all__ = ["build_verify_topology", "full_mask_numel"]


def full_mask_numel(seq_lens_sum: int, bs: int, num_rows: int) -> int:
    """Elements (bytes) of the FULL_MASK custom mask: sum_b N * (seq_lens[b] + N)."""
    return seq_lens_sum * num_rows + bs * num_rows * num_rows


def build_verify_topology(
    tree: Tree,
    seq_lens: torch.Tensor,
    seq_lens_sum: Optional[int] = None,
    *,
    with_tree_mask: bool = True,
    custom_mask_out: Optional[torch.Tensor] = None,
    bits_out: Optional[torch.Tensor] = None,
    backend: str = "auto",
) -> VerifyTopology:
    """Verify inputs for a tree: masks, positions and retrieve links.

    Shape: seq_lens [bs] int32/int64 (tokens already in the KV cache; the root sits at position
    seq_lens[b]); seq_lens_sum a host int >= seq_lens.sum() (the exact sum gives the exact mask; a larger
    bound sizes the mask and leaves its tail unspecified), or None to skip the FULL_MASK.
    ``custom_mask_out``: optional preallocated 1-D bool buffer with at least :func:`full_mask_numel`
    elements (e.g. a CUDA-graph buffer); only its head (the requests' rows) is written.
    Memory: the FULL_MASK costs N * (prefix + N) bytes per request (N = 513, prefix 4096: 2.4 MB);
    the compact tree mask N * N bytes per request. ``bits_out``: optional [>= bs*N, NW] int32 buffer (NW =
    cdiv(N, 32), unit column stride, e.g. a CUDA-graph buffer of fa3's fused tree attention): its first bs*N rows
    receive the tree mask's rows as bit words (bit j % 32 of word j // 32 of row b*N + i: j is i or one of its
    ancestors; bits past N zero), in the same launch, returned as ``tree_bits``.
    Returns :class:`VerifyTopology` (pads: positions seq_lens[b], no links, mask rows that see the prefix and
    themselves). No host sync.
    The Triton path writes the FULL_MASK rows as 16-byte-aligned int32 words (16-byte vectors when the
    buffer is 16-byte aligned) and each row part's edges byte by byte (``kernels/topology.py``).
    """
    check_tree(tree)
    dev = tree.parents.device
    bs, n = tree.parents.shape
    if seq_lens.dim() != 1 or seq_lens.shape[0] != bs or seq_lens.device != dev:
        raise ValueError(
            f"seq_lens must be [bs={bs}] on {dev}, got {tuple(seq_lens.shape)} on {seq_lens.device}"
        )
    if seq_lens.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"seq_lens must be int32 or int64, got {seq_lens.dtype}")
    if custom_mask_out is not None and seq_lens_sum is None:
        raise ValueError("custom_mask_out needs seq_lens_sum")
    numel = None if seq_lens_sum is None else full_mask_numel(int(seq_lens_sum), bs, n)
    if custom_mask_out is not None:
        check(custom_mask_out, "custom_mask_out", torch.bool, 1, dev)
        if custom_mask_out.numel() < numel:
            raise ValueError(f"custom_mask_out has {custom_mask_out.numel()} elements, needs {numel}")
    if bits_out is not None:
        bits_out = bit_words_out(bits_out, "bits_out", bs * n, cdiv(n, 32), dev)
    if not use_triton("build_verify_topology", dev, backend):
        topo = build_verify_topology_torch(tree, seq_lens, seq_lens_sum, with_tree_mask,
                                           with_tree_bits=bits_out is not None)
        if custom_mask_out is not None:
            custom_mask_out[:numel].copy_(topo.custom_mask)
            topo.custom_mask = custom_mask_out[:numel]
        if bits_out is not None:
            topo.tree_bits = bits_out.copy_(topo.tree_bits)
        return topo
    return _topology_triton(tree, seq_lens, numel, with_tree_mask, custom_mask_out, bits_out)


def _topology_triton(tree, seq_lens, numel, with_tree_mask, custom_mask_out, bits_out) -> VerifyTopology:
    from sglang_ddtree.tree.kernels.topology import ddtree_topology_kernel

    dev = tree.parents.device
    bs, n = tree.parents.shape
    seq_lens = seq_lens if seq_lens.is_contiguous() else seq_lens.contiguous()
    topo = VerifyTopology(
        positions=torch.empty(bs * n, dtype=torch.int64, device=dev),
        retrieve_index=torch.empty(bs, n, dtype=torch.int64, device=dev),
        retrieve_next_token=torch.empty(bs, n, dtype=torch.int64, device=dev),
        retrieve_next_sibling=torch.empty(bs, n, dtype=torch.int64, device=dev),
        tree_mask=torch.empty(bs, n, n, dtype=torch.bool, device=dev) if with_tree_mask else None,
        custom_mask=None,
        tree_bits=bits_out,
    )
    if numel is not None:
        topo.custom_mask = (
            custom_mask_out[:numel]
            if custom_mask_out is not None
            else torch.empty(numel, dtype=torch.bool, device=dev)
        )
    if bs == 0:
        return topo
    write_full = numel is not None
    block_r = 16
    ddtree_topology_kernel[(bs, cdiv(n, block_r))](
        tree.parents,
        tree.depths,
        seq_lens,
        topo.positions,
        topo.retrieve_index,
        topo.retrieve_next_token,
        topo.retrieve_next_sibling,
        topo.tree_mask if with_tree_mask else topo.retrieve_index,
        topo.custom_mask if write_full else topo.retrieve_index,
        bits_out if bits_out is not None else topo.retrieve_index,
        n,
        tree.max_depth,
        topo.custom_mask.data_ptr() % 16 if write_full else 0,
        bits_out.stride(0) if bits_out is not None else 0,
        cdiv(n, 32),
        WRITE_TREE_MASK=with_tree_mask,
        WRITE_FULL_MASK=write_full,
        WRITE_BITS=bits_out is not None,
        BLOCK_R=block_r,
        BLOCK_W=4,  # 128 tree columns per chunk
        BLOCK_PC=256,
        BLOCK_L=next_pow2(tree.max_depth + 1),
        BLOCK_S=256,
        num_warps=TOPOLOGY_NUM_WARPS,
    )
    return topo
