"""DDTree core: build the draft tree, derive its verify topology, accept greedily - on the GPU, no host syncs.

Round: draft -> BUILD TREE (:func:`build_tree`) -> VERIFY (:func:`build_verify_topology` feeds SGLang's
tree verify) -> ACCEPT (:func:`accept_greedy`) -> commit. Paper: Ringel & Romano, "Accelerating
Speculative Decoding with Block Diffusion Draft Trees", arXiv 2604.12989 (Algorithm 1 is
:func:`sglang_ddtree.tree.reference.build_tree_reference`).

Vocabulary
- **root**: row 0 of a request's tree, the last token already decided (the previous round's bonus
  token); its KV is computed in this verify pass at position ``seq_lens[b]``.
- **node**: one drafted token at **depth** d >= 1 (1 = the position right after the root), one of the
  **top-K** tokens the drafter proposes for that position; its **parent** is the node (or root) before it.
- **score**: float32 sum of the draft log-probs on the root path (added root to leaf); never increases
  along a path, so the best prefixes always form a tree.
- **budget** B: the number of nodes; the tree is the B highest-scoring prefixes of depth <= L-1, and
  every request has ``N = B + 1`` rows (root + B). Fewer real prefixes (e.g. K = 1, B > L-1) -> pads.
- **ancestor mask**: row i may attend column j iff j is i or an ancestor of i (plus the whole prefix).
- **accepted drafts** (``num_accepted``, 0..max depth): how many nodes, walking from the root, match
  the target's choice at their parent; the **bonus token** is the target's choice at the last accepted
  node (root if none).
- **accept length** = accepted drafts + 1 (the bonus): the tokens a round commits (1..max depth + 1), the
  paper's tau and SGLang's ``accept_lens`` / ``spec_accept_length``. One name each, everywhere (code,
  metrics, docs): ``num_accepted`` never includes the bonus, ``accept_len(s)`` / accept length always does.

Row order: by depth, then within a depth best first - higher score, then lower parent row, then lower
rank k among the top-K (the tie-breaks below). So every parent row < child row, and a node's children
appear in ascending rank (non-increasing score) with the first child at the lowest row; siblings need not be
contiguous. That is what SGLang's ``reconstruct_indices_from_tree_mask``, ``verify_tree_greedy`` and the
hybrid (Mamba/GDN) conv kernels need: they follow ``retrieve_next_token`` (lowest child row) and
``retrieve_next_sibling`` (next higher row with the same parent) and assume parent < child. It is also
the order the fused kernel produces for free (each depth's kept frontier is sorted).

Ties: among equal scores a lower depth wins, then higher ancestor scores (compared leaf to root), then
the lexicographically smaller rank path. This total order puts every node after its parent and after
its lower-rank siblings, so the heap and the batched per-depth formulation pick the same node set, and
within one depth it is exactly (higher score, lower parent row, lower rank).

Pads (rows ``num_nodes .. N-1``): token 0, parent -1, depth 0, score -inf, valid False. They are
unreachable (no retrieve link points at them), see the prefix and themselves, sit at position
``seq_lens[b]`` and are never accepted.

Sampling at T > 0 (``worker.sampling.node_samples``): one independent draw x_r from the target's
distribution p_r at every row r, then the greedy walk with x in place of the argmax: from the root, move to
the child whose token is x at the current node; the first x that matches no child is the bonus token. The
draw at a node follows p given that node's path whatever happened elsewhere, so each emitted token is one
exact draw from the target's conditional, and child i is accepted with probability p(x_i), as in upstream's
target-only tree sampling (``tree_speculative_sampling_target_only`` with zero draft probs and thresholds
1; ``reference.sample_target_only_reference`` is that algorithm, the same distribution). The draft only
decides how many steps one verify pass covers (sibling tokens must be distinct, which top-K guarantees).
"""

from sglang_ddtree.tree.accept import accept_greedy
from sglang_ddtree.tree.build import build_tree
from sglang_ddtree.tree.metadata import AcceptResult, Tree, VerifyTopology
from sglang_ddtree.tree.topology import build_verify_topology, full_mask_numel

__all__ = [
    "AcceptResult",
    "Tree",
    "VerifyTopology",
    "accept_greedy",
    "build_tree",
    "build_verify_topology",
    "full_mask_numel",
]
