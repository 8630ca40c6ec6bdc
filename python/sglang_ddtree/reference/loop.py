"""The whole DDTree decoding loop for ONE request, on the reference models: the executable spec.

A round: DRAFT (one DFlash block forward -> per-depth log-softmax top-K) -> BUILD TREE (the
``budget`` best prefixes, best-first heap) -> VERIFY (root + all nodes in one target forward, ancestor
mask, node position = committed length + depth) -> ACCEPT (walk from the root while the target's next
token, argmax or a sample at T > 0, is a child's token; the first unmatched target token is the BONUS
token) -> COMMIT (target KV and drafter context of the root + accepted path). DFLASH is the same round
with a chain of per-depth argmaxes instead of a tree. Host syncs everywhere: this is a reference.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence, Tuple

import torch

from sglang_ddtree.reference.dflash import DFlashDraftModel, draft_block_logits
from sglang_ddtree.reference.qwen3 import KVCache, Qwen3ForCausalLM

try:  # the shared builder (sglang_ddtree.tree); a private copy until it lands
    from sglang_ddtree.tree.reference import build_tree_reference
except ImportError:
    from sglang_ddtree.reference._heap import build_tree_reference

# A draft proposal: node tokens [n], parents [n] (-1 = child of the root, else an earlier node), depths [n].
Proposal = Tuple[torch.Tensor, torch.Tensor, torch.Tensor]


@dataclass
class RoundStats:
    tree_size: int  # draft nodes verified (root excluded)
    accept_len: int  # draft tokens accepted (bonus excluded)


@dataclass
class Generation:
    tokens: List[int]  # new tokens, prompt excluded
    rounds: List[RoundStats] = field(default_factory=list)

    @property
    def tokens_per_round(self) -> float:
        """The paper's acceptance length tau: accepted draft tokens + the bonus token, per round."""
        return sum(r.accept_len + 1 for r in self.rounds) / max(len(self.rounds), 1)


def next_tokens(logits: torch.Tensor, temperature: float, generator: Optional[torch.Generator]) -> torch.Tensor:
    """logits [N, V] -> [N] int64: argmax at temperature 0, else one sample per row."""
    if temperature == 0.0:
        return logits.argmax(-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def propose_tree(draft_logits: torch.Tensor, budget: int, topk: int) -> Proposal:
    """DDTree: the ``budget`` best prefixes over the per-depth top-``topk`` tokens. draft_logits [L-1, V]."""
    top = draft_logits.float().log_softmax(-1).topk(min(topk, draft_logits.shape[-1]), dim=-1)
    return build_tree_reference(top.values, top.indices, budget)


def propose_chain(draft_logits: torch.Tensor) -> Proposal:
    """DFLASH: the argmax at every depth, as a chain."""
    n = draft_logits.shape[0]
    return draft_logits.argmax(-1), torch.arange(n) - 1, torch.arange(1, n + 1)


def tree_verify_inputs(root_token: int, proposal: Proposal, start: int):
    """Verify inputs for root (index 0) + nodes (index 1..n). Returns input_ids [1, n+1] int64,
    positions [1, n+1] int64 (start + depth), parents [n+1] int64 (verify indices, -1 for the root)
    and mask [1, n+1, start+n+1] bool: all of the committed prefix, then ancestors-or-self only."""
    tokens, parents, depths = proposal
    n = tokens.shape[0]
    input_ids = torch.cat([torch.tensor([root_token]), tokens.long()])[None]
    positions = start + torch.cat([torch.zeros(1, dtype=torch.long), depths.long()])[None]
    parents_v = torch.cat([torch.tensor([-1]), parents.long() + 1])
    tree_mask = torch.eye(n + 1, dtype=torch.bool)
    for i in range(1, n + 1):
        assert 0 <= parents_v[i] < i, "parents must come before children"
        tree_mask[i] |= tree_mask[parents_v[i]]
    mask = torch.cat([torch.ones(n + 1, start, dtype=torch.bool), tree_mask], dim=1)[None]
    return input_ids, positions, parents_v, mask


def accept_walk(tokens: Sequence[int], parents: Sequence[int], target_next: Sequence[int]) -> Tuple[List[int], int]:
    """Greedy/target-only acceptance over a verified tree (verify indices, root = 0).
    Returns the accepted path (root first) and the bonus token."""
    node, path = 0, [0]
    while True:
        want = target_next[node]
        child = next((c for c in range(1, len(tokens)) if parents[c] == node and tokens[c] == want), None)
        if child is None:
            return path, want
        node = child
        path.append(node)


@torch.no_grad()
def speculative_generate(target: Qwen3ForCausalLM, drafter: DFlashDraftModel, prompt_ids: Sequence[int],
                         max_new_tokens: int, propose: Callable[[torch.Tensor], Proposal],
                         temperature: float = 0.0, generator: Optional[torch.Generator] = None,
                         eos_token_id: Optional[int] = None) -> Generation:
    layer_ids = drafter.config.target_layer_ids
    cache, context = KVCache(target.config.num_hidden_layers), KVCache(drafter.config.num_hidden_layers)
    # Prefill: target KV and drafter context of the prompt; the first bonus token.
    prompt = torch.tensor([list(prompt_ids)])
    positions = torch.arange(prompt.shape[1])[None]
    out = target(prompt, positions, capture_layer_ids=layer_ids)
    cache.append(out.kv)
    context.append(drafter.context_kv(out.features, positions))
    bonus = int(next_tokens(out.logits[0, -1:], temperature, generator)[0])
    gen = Generation([bonus])
    while len(gen.tokens) < max_new_tokens and bonus != eos_token_id:
        start = cache.length  # committed tokens; the bonus sits at position `start`
        proposal = propose(draft_block_logits(target, drafter, torch.tensor([bonus]), start, context)[0])
        input_ids, positions, parents, mask = tree_verify_inputs(bonus, proposal, start)
        out = target(input_ids, positions, cache, mask, capture_layer_ids=layer_ids)
        target_next = next_tokens(out.logits[0], temperature, generator)
        path, bonus = accept_walk(input_ids[0].tolist(), parents.tolist(), target_next.tolist())
        keep = torch.tensor(path)
        cache.append(out.kv, keep)
        context.append(drafter.context_kv(out.features[:, keep], positions[:, keep]))
        gen.tokens += input_ids[0, keep[1:]].tolist() + [bonus]
        gen.rounds.append(RoundStats(tree_size=len(proposal[0]), accept_len=len(path) - 1))
    gen.tokens = _truncate(gen.tokens, max_new_tokens, eos_token_id)
    return gen


def ddtree_generate(target, drafter, prompt_ids, max_new_tokens: int, *, budget: int, topk: int,
                    temperature: float = 0.0, generator=None, eos_token_id=None) -> Generation:
    if budget < 1 or topk < 1:
        raise ValueError(f"budget and topk must be >= 1, got budget={budget}, topk={topk}")
    return speculative_generate(target, drafter, prompt_ids, max_new_tokens,
                                lambda lg: propose_tree(lg, budget, topk), temperature, generator, eos_token_id)


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
