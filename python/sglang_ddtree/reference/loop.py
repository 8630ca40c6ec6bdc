"""The whole DDTree decoding loop for ONE request, on the reference models: the executable spec.

A round: DRAFT (one DFlash block forward -> per-depth log-softmax top-K) -> BUILD TREE (the
``budget`` best prefixes, best-first heap) -> VERIFY (root + all nodes in one target forward, ancestor
mask, node position = committed length + depth) -> ACCEPT (walk from the root while the target's next
token, argmax or a sample at T > 0, is a child's token; the first unmatched target token is the BONUS
token) -> COMMIT (target KV and drafter context of the root + accepted path). DFLASH is the same round
with a chain of per-depth argmaxes instead of a tree. Tree building, masks and acceptance are the
shared references of ``sglang_ddtree.tree``. Host syncs everywhere: this is a reference.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence

import torch

from sglang_ddtree.reference.dflash import DFlashDraftModel, draft_block_logits
from sglang_ddtree.reference.qwen3 import KVCache, Qwen3ForCausalLM
from sglang_ddtree.tree.metadata import Tree
from sglang_ddtree.tree.reference import accept_greedy_torch, build_tree_reference, tree_mask_torch


@dataclass
class RoundStats:
    tree_size: int  # draft nodes verified (root excluded)
    num_accepted: int  # accepted drafts (bonus excluded); the round's accept length is num_accepted + 1


@dataclass
class Generation:
    tokens: List[int]  # new tokens, prompt excluded
    rounds: List[RoundStats] = field(default_factory=list)

    @property
    def tokens_per_round(self) -> float:
        """The paper's acceptance length tau: accepted draft tokens + the bonus token, per round."""
        return sum(r.num_accepted + 1 for r in self.rounds) / max(len(self.rounds), 1)


def next_tokens(logits: torch.Tensor, temperature: float, generator: Optional[torch.Generator]) -> torch.Tensor:
    """logits [N, V] -> [N] int64: argmax at temperature 0, else one independent sample per row
    (target-only tree sampling: walking the tree with per-node samples emits exact target samples)."""
    if temperature == 0.0:
        return logits.argmax(-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def propose_tree(draft_logits: torch.Tensor, root_token: int, budget: int, topk: int) -> Tree:
    """DDTree: the ``budget`` best prefixes over the per-depth top-``topk`` tokens (paper Algorithm 1).
    draft_logits [L-1, V] -> Tree with budget + 1 rows (root = ``root_token``, then nodes, then pads)."""
    top = draft_logits.float().log_softmax(-1).topk(min(topk, draft_logits.shape[-1]), dim=-1)
    return build_tree_reference(top.values, top.indices, budget, root_token_id=root_token)


def propose_chain(draft_logits: torch.Tensor, root_token: int) -> Tree:
    """DFLASH: the argmax at every depth, as a chain (row d = depth d)."""
    n = draft_logits.shape[0] + 1
    rows = torch.arange(n)[None]
    best = draft_logits.float().log_softmax(-1).max(-1)
    tokens = torch.cat([torch.tensor([root_token]), best.indices])[None]
    scores = torch.cat([torch.zeros(1), best.values.cumsum(0)])[None]
    return Tree(token_ids=tokens, parents=rows - 1, depths=rows.clone(), scores=scores,
                valid=torch.ones(1, n, dtype=torch.bool), num_nodes=torch.tensor([n], dtype=torch.int32),
                max_depth=n - 1)


def tree_verify_inputs(tree: Tree, start: int):
    """Verify inputs for the tree's N rows (root, nodes, pads): input_ids [1, N] int64, positions
    [1, N] int64 (start + depth) and mask [1, N, start+N] bool: all of the committed prefix, then the
    ancestors-or-self only (pads see only themselves and are never accepted)."""
    n = tree.num_rows
    mask = torch.cat([torch.ones(1, n, start, dtype=torch.bool), tree_mask_torch(tree)], dim=2)
    return tree.token_ids, start + tree.depths, mask


@torch.no_grad()
def prefill(target: Qwen3ForCausalLM, drafter: DFlashDraftModel, prompt_ids: Sequence[int], temperature: float = 0.0,
            generator: Optional[torch.Generator] = None):
    """The prompt's target KV and drafter context, and the first bonus token -> (cache, context, bonus)."""
    cache, context = KVCache(target.config.num_hidden_layers), KVCache(drafter.config.num_hidden_layers)
    prompt = torch.tensor([list(prompt_ids)])
    positions = torch.arange(prompt.shape[1])[None]
    out = target(prompt, positions, capture_layer_ids=drafter.config.target_layer_ids)
    cache.append(out.kv)
    context.append(drafter.context_kv(out.features, positions))
    return cache, context, int(next_tokens(out.logits[0, -1:], temperature, generator)[0])


@torch.no_grad()
def speculative_generate(target: Qwen3ForCausalLM, drafter: DFlashDraftModel, prompt_ids: Sequence[int],
                         max_new_tokens: int, propose: Callable[[torch.Tensor, int], Tree],
                         temperature: float = 0.0, generator: Optional[torch.Generator] = None,
                         eos_token_id: Optional[int] = None) -> Generation:
    """Decode ``prompt_ids`` with draft/verify rounds; ``propose(draft_logits [L-1, V], bonus)`` makes
    each round's tree. Output tokens are exactly the target's greedy tokens at temperature 0 (exact
    target samples at T > 0), cut at ``max_new_tokens`` or after ``eos_token_id``."""
    layer_ids = drafter.config.target_layer_ids
    cache, context, bonus = prefill(target, drafter, prompt_ids, temperature, generator)
    gen = Generation([bonus])
    while len(gen.tokens) < max_new_tokens and bonus != eos_token_id:
        start = cache.length  # committed tokens; the bonus sits at position `start`
        tree = propose(draft_block_logits(target, drafter, torch.tensor([bonus]), start, context)[0], bonus)
        input_ids, positions, mask = tree_verify_inputs(tree, start)
        out = target(input_ids, positions, cache, mask, capture_layer_ids=layer_ids)
        accepted = accept_greedy_torch(tree, next_tokens(out.logits[0], temperature, generator)[None])
        path = accepted.accepted_node_idx[0, : int(accepted.num_accepted[0]) + 1].long()  # root first
        cache.append(out.kv, path)
        context.append(drafter.context_kv(out.features[:, path], positions[:, path]))
        bonus = int(accepted.bonus_token[0])
        gen.tokens += input_ids[0, path[1:]].tolist() + [bonus]
        gen.rounds.append(RoundStats(tree_size=int(tree.num_nodes[0]) - 1, num_accepted=len(path) - 1))
    gen.tokens = _truncate(gen.tokens, max_new_tokens, eos_token_id)
    return gen


def ddtree_generate(target, drafter, prompt_ids, max_new_tokens: int, *, budget: int, topk: int,
                    temperature: float = 0.0, generator=None, eos_token_id=None) -> Generation:
    if budget < 1 or topk < 1:
        raise ValueError(f"budget and topk must be >= 1, got budget={budget}, topk={topk}")
    return speculative_generate(target, drafter, prompt_ids, max_new_tokens,
                                lambda lg, root: propose_tree(lg, root, budget, topk), temperature, generator,
                                eos_token_id)


def dflash_generate(target, drafter, prompt_ids, max_new_tokens: int, *, temperature: float = 0.0,
                    generator=None, eos_token_id=None) -> Generation:
    return speculative_generate(target, drafter, prompt_ids, max_new_tokens, propose_chain,
                                temperature, generator, eos_token_id)


@torch.no_grad()
def greedy_generate(target: Qwen3ForCausalLM, prompt_ids: Sequence[int], max_new_tokens: int,
                    eos_token_id: Optional[int] = None) -> List[int]:
    """Plain autoregressive greedy decoding with a KV cache: the baseline DDTree must equal."""
    cache = KVCache(target.config.num_hidden_layers)
    ids = torch.tensor([list(prompt_ids)])
    tokens: List[int] = []
    while len(tokens) < max_new_tokens and (not tokens or tokens[-1] != eos_token_id):
        out = target(ids, cache.length + torch.arange(ids.shape[1])[None], cache)
        cache.append(out.kv)
        tokens.append(int(out.logits[0, -1].argmax()))
        ids = torch.tensor([[tokens[-1]]])
    return tokens


def _truncate(tokens: List[int], max_new_tokens: int, eos_token_id: Optional[int]) -> List[int]:
    tokens = tokens[:max_new_tokens]
    if eos_token_id is not None and eos_token_id in tokens:
        tokens = tokens[: tokens.index(eos_token_id) + 1]
    return tokens
