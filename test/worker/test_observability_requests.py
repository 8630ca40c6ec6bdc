"""Per-request refusals for DDTREE (``request_checks``) on upstream's own ``Req`` / ``SamplingParams``,
through the ``validate_dflash_request`` hook; other algorithms keep upstream's verdicts."""

import types

import pytest

from sglang_ddtree.worker import request_checks


def _req(return_logprob=False, return_hidden_states=False, custom_logit_processor=None, **params):
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    return Req("rid", "", [1, 2, 3], SamplingParams(**params), return_logprob=return_logprob,
               return_hidden_states=return_hidden_states, custom_logit_processor=custom_logit_processor)


@pytest.mark.parametrize("kwargs,error", [
    (dict(), None),
    (dict(temperature=0.0), None),
    (dict(temperature=0.7, top_p=0.9), None),
    (dict(temperature=0.7, top_k=20), None),
    (dict(temperature=0.7, top_p=0.9, top_k=-1), None),
    (dict(temperature=0.0, top_p=0.9, top_k=20), None),  # greedy: the filters cannot change the argmax
    (dict(temperature=0.7, top_p=0.9, top_k=20), None),  # tree sampling filters like plain (sampling.py)
    (dict(temperature=0.7, frequency_penalty=0.5, logit_bias={"5": 1.0}), None),  # applied by eagle_sample
    (dict(temperature=0.0, min_p=0.1), None),  # greedy: min_p cannot change the argmax
    (dict(return_logprob=True), "return_logprob"),
    (dict(return_hidden_states=True), "return_hidden_states"),
    (dict(json_schema='{"type": "object"}'), "grammar-constrained decoding (json_schema)"),
    (dict(regex="[a-z]+"), "grammar-constrained decoding (regex)"),
    (dict(ebnf='root ::= "a"'), "grammar-constrained decoding (ebnf)"),
    (dict(custom_logit_processor="serialized"), "custom logit processors"),
    (dict(temperature=0.7, min_p=0.05), "min_p sampling"),
])
def test_ddtree_request_error(kwargs, error):
    message = request_checks.ddtree_request_error(_req(**kwargs))
    if error is None:
        assert message is None
    else:
        assert message.startswith("DDTREE speculative decoding does not support ") and error in message


def _hook(monkeypatch, algo, req, enable_overlap=True):
    import sglang.srt.runtime_context as rc
    from sglang.srt.speculative.dflash_utils import validate_dflash_request

    dd = algo == "DDTREE"
    args = types.SimpleNamespace(speculative_algorithm=algo, speculative_ddtree_budget=64 if dd else None,
                                 speculative_ddtree_topk=8 if dd else None,
                                 speculative_dflash_block_size=16 if dd else None)
    monkeypatch.setattr(rc, "get_server_args", lambda: args)
    return request_checks.validate_dflash_request(validate_dflash_request, req, enable_overlap)


def test_hook_uses_ddtree_checks_for_ddtree(monkeypatch):
    assert "DDTREE" in _hook(monkeypatch, "DDTREE", _req(return_logprob=True))
    # stricter than DFLASH: hidden states without overlap, custom logit processors, min_p
    assert "return_hidden_states" in _hook(monkeypatch, "DDTREE", _req(return_hidden_states=True), False)
    assert "custom logit" in _hook(monkeypatch, "DDTREE", _req(custom_logit_processor="x"))
    assert _hook(monkeypatch, "DDTREE", _req(temperature=0.0)) is None


def test_hook_keeps_upstream_for_dflash(monkeypatch):
    from sglang.srt.speculative.dflash_utils import validate_dflash_request

    # Upstream's own answer, whatever its release refuses (0.5.18 dropped its return_logprob refusal).
    assert _hook(monkeypatch, "DFLASH", _req(return_hidden_states=True), True).startswith("DFLASH ")
    req = _req(return_logprob=True)
    assert _hook(monkeypatch, "DFLASH", req) == validate_dflash_request(req, True)
    assert _hook(monkeypatch, "DFLASH", _req(return_hidden_states=True), False) is None
    assert _hook(monkeypatch, "DFLASH", _req(custom_logit_processor="x")) is None
    assert _hook(monkeypatch, "DFLASH", _req(temperature=0.7, min_p=0.05)) is None


def test_hook_without_published_server_args_is_upstreams(monkeypatch):
    import sglang.srt.runtime_context as rc
    from sglang.srt.speculative.dflash_utils import validate_dflash_request

    def unset():
        raise ValueError("Global server args is not set yet!")

    monkeypatch.setattr(rc, "get_server_args", unset)
    message = request_checks.validate_dflash_request(validate_dflash_request, _req(return_hidden_states=True), True)
    assert message.startswith("DFLASH ")


def test_scheduler_sees_the_hook_after_plugin_loading(monkeypatch):
    """Through SGLang's own plugin loading: the name the scheduler module imported is wrapped."""
    import sglang.srt.managers.scheduler as scheduler
    import sglang.srt.runtime_context as rc
    from sglang.srt.plugins import load_plugins

    load_plugins()
    args = types.SimpleNamespace(speculative_algorithm="DDTREE", speculative_ddtree_budget=64,
                                 speculative_ddtree_topk=8, speculative_dflash_block_size=16)
    monkeypatch.setattr(rc, "get_server_args", lambda: args)
    message = scheduler.validate_dflash_request(_req(custom_logit_processor="x"), True)
    assert message == "DDTREE speculative decoding does not support custom logit processors yet."
    args.speculative_algorithm = "DFLASH"
    assert scheduler.validate_dflash_request(_req(custom_logit_processor="x"), True) is None
