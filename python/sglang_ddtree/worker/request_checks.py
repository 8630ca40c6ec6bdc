"""Per-request admission checks for DDTREE: features the round cannot honour fail that request only.

SGLang's scheduler calls ``validate_dflash_request(req, enable_overlap)`` for every DFLASH-family
algorithm (DDTREE included) when a request arrives and aborts the request with the returned message
(HTTP 400) instead of letting the decode round crash or silently change the output. DDTREE refuses what
DFLASH refuses, plus what its verify (``sampling``) does not apply:
  return_logprob          the round returns no per-token log-probs
  return_hidden_states    the verify's hidden states feed the drafter and are not returned (any mode)
  grammar constraints     json_schema / regex / ebnf / structural_tag: no vocab mask in the tree verify
  custom logit processor  not applied to the verify logits
  min_p (when sampling)   tree sampling applies temperature, top-k and top-p only
Tree sampling at T > 0 filters like plain decoding (``sampling``), so top_p and top_k are accepted alone
and together.
"""

from __future__ import annotations

from typing import Optional

_PREFIX = "DDTREE speculative decoding does not support "


def ddtree_request_error(req) -> Optional[str]:
    """The reason DDTREE cannot serve ``req`` (an upstream ``Req``), or None."""
    if req.return_logprob:
        return _PREFIX + "return_logprob yet."
    if req.return_hidden_states:
        return _PREFIX + "return_hidden_states yet."
    params = req.sampling_params
    for field in ("json_schema", "regex", "ebnf", "structural_tag"):
        if getattr(params, field, None) is not None:
            return _PREFIX + f"grammar-constrained decoding ({field}) yet."
    if getattr(req, "custom_logit_processor", None) is not None:
        return _PREFIX + "custom logit processors yet."
    greedy = params.top_k is not None and params.top_k <= 1  # SGLang maps temperature 0 to top_k 1
    if not greedy and (params.min_p or 0.0) > 0.0:
        return _PREFIX + f"min_p sampling yet (min_p={params.min_p}); use top_p / top_k or temperature 0."
    return None


def validate_dflash_request(original, req, enable_overlap: bool) -> Optional[str]:
    """AROUND hook of ``sglang.srt.speculative.dflash_utils.validate_dflash_request``."""
    from sglang.srt.runtime_context import get_server_args

    from sglang_ddtree.config import is_validated_ddtree_args

    try:
        server_args = get_server_args()
    except ValueError:  # not published in this process: not a DDTREE scheduler
        server_args = None
    if not is_validated_ddtree_args(server_args):
        return original(req, enable_overlap)
    return ddtree_request_error(req)
