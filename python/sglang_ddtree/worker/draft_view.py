"""The drafter's view of the server args (DRAFT step): what the DFlash draft runner must see.

The target's server args say verify width ``budget + 1`` and fan-out ``topk``; the draft runner's CUDA
graphs, attention backend and block buffers must instead see the block size L and topk 1 (what DFLASH
gives its drafter). The DDTREE fields are kept, so ``DDTreeConfig.from_server_args`` of the view is the
same config as of the target's args. Imports neither torch nor SGLang (the release's adapter may).
"""

from __future__ import annotations

import copy


def draft_server_args_view(server_args, config):
    """A copy of the target's server args as the DFlash draft runner must see them (``config``: the
    server's ``DDTreeConfig``). The copy drops the cached ``max_speculative_num_draft_tokens`` so it is
    recomputed from the new width."""
    view = copy.deepcopy(server_args)
    view.__dict__.pop("max_speculative_num_draft_tokens", None)
    fields = dict(speculative_num_draft_tokens=config.block_size, speculative_eagle_topk=1)
    from sglang_ddtree.compat import adapter

    adapter().write_fields(view, "ddtree.draft_view", fields)
    return view
