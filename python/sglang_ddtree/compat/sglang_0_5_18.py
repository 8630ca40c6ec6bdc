"""Adapter of the SGLang 0.5.18 family (0.5.18): hooked functions read the published server args.

``spec_info.create_dummy_verify_input``, ``allocation_sizing.get_alloc_len_per_decode`` and
``get_req_to_token_extra_context_len`` lose their ``server_args`` parameter (they read the process-wide
config), and ``ServerArgs.override`` is gone: a resolved copy is written through the resolution
pipeline's own field writer.
"""

from __future__ import annotations

from typing import Callable, Dict

from sglang_ddtree.compat import sglang_0_5_17

_DUMMY = "sglang.srt.speculative.spec_info.create_dummy_verify_input"
_ALLOC_LEN = "sglang.srt.mem_cache.allocation_sizing.get_alloc_len_per_decode"
_EXTRA_CTX = "sglang.srt.mem_cache.allocation_sizing.get_req_to_token_extra_context_len"


def _published_server_args():
    from sglang.srt.runtime_context import get_server_args

    return get_server_args()


def _dummy_without_server_args(hook: Callable) -> Callable:
    def adapted(original, spec_algorithm, custom_mask, num_tokens_per_req, is_draft_worker):
        def original_0516(spec_algorithm, server_args, custom_mask, num_tokens_per_req, is_draft_worker):
            return original(spec_algorithm, custom_mask, num_tokens_per_req, is_draft_worker)

        return hook(original_0516, spec_algorithm, _published_server_args(), custom_mask, num_tokens_per_req,
                    is_draft_worker)

    return adapted


def _sizing_without_server_args(hook: Callable) -> Callable:
    def adapted(original):
        return hook(lambda server_args=None: original(), _published_server_args())

    return adapted


class Adapter(sglang_0_5_17.Adapter):
    family = "0.5.18"
    _WITHOUT_SERVER_ARGS = {_DUMMY: _dummy_without_server_args, _ALLOC_LEN: _sizing_without_server_args,
                            _EXTRA_CTX: _sizing_without_server_args}

    def adapt_hook(self, target: str, hook: Callable) -> Callable:
        wrap = self._WITHOUT_SERVER_ARGS.get(target)
        return hook if wrap is None else wrap(hook)

    def write_fields(self, server_args, source: str, fields: Dict[str, object]) -> None:
        from sglang.srt.arg_groups.overrides import _apply_fields

        _apply_fields(server_args, dict(fields))
