"""The device parity harness's passes (``scripts/device/ddtree_parity.py``) against a stand-in engine: a
``_continuous`` config decodes every prompt again with 16 requests in flight (the admission window's pass, session
49), in prompt order, and the comparison covers it like any batch size."""

import asyncio
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


class _Engine:
    """``sglang.Engine``'s calls the harness makes; each output is a function of its prompt alone (a lossless
    engine), and the async path records how many requests were in flight at once."""

    in_flight_seen = []

    def __init__(self, model_path, **kwargs):
        self.loop = asyncio.new_event_loop()
        self.kwargs = kwargs
        self._in_flight = 0

    @staticmethod
    def _out(prompt, params):
        return {"output_ids": [sum(prompt) % 97 + t for t in range(params["max_new_tokens"])], "meta_info": {}}

    def generate(self, input_ids, sampling_params):
        return [self._out(p, sampling_params) for p in input_ids]

    async def async_generate(self, input_ids, sampling_params):
        self._in_flight += 1
        _Engine.in_flight_seen.append(self._in_flight)
        await asyncio.sleep(0.001 * (sum(input_ids) % 5))  # requests end out of order, as a speculative engine's do
        self._in_flight -= 1
        return self._out(input_ids, sampling_params)

    def shutdown(self):
        self.loop.close()


def _harness(monkeypatch):
    import sglang

    sys.path.insert(0, os.path.join(ROOT, "scripts", "device"))
    import ddtree_parity

    monkeypatch.setattr(sglang, "Engine", _Engine, raising=False)
    return ddtree_parity


def test_a_continuous_config_decodes_every_prompt_again_with_16_in_flight(monkeypatch):
    hp = _harness(monkeypatch)
    assert hp.CONFIGS["dd_fa3_auto_cycle_window"]["_continuous"] is True
    assert hp.CONFIGS["dd_triton_auto_cycle_window"]["_continuous"] is True
    prompts = [[i, i + 1, 3 * i] for i in range(48)]
    _Engine.in_flight_seen.clear()
    ref = hp.run_config("plain_triton", "t", "d", prompts, 6)
    assert hp.CONTINUOUS not in ref["outputs"] and not _Engine.in_flight_seen  # only configs that ask for it
    got = hp.run_config("dd_triton_auto_cycle_window", "t", "d", prompts, 6)
    assert list(got["outputs"]) == [1, 4, 16, 48, hp.CONTINUOUS]
    assert got["outputs"][hp.CONTINUOUS] == ref["outputs"][16]  # every prompt, in prompt order
    assert max(_Engine.in_flight_seen) == hp.CONTINUOUS_IN_FLIGHT == 16 and len(_Engine.in_flight_seen) == 48
    report = hp.compare(ref, got)
    assert report[hp.CONTINUOUS] == dict(equal=48, total=48, first_mismatch=None, diverge_at=[])
    bad = dict(got, outputs=dict(got["outputs"]))
    bad["outputs"][hp.CONTINUOUS] = [list(o) for o in got["outputs"][hp.CONTINUOUS]]
    bad["outputs"][hp.CONTINUOUS][5][2] += 1  # one token off in prompt 5
    assert hp.compare(ref, bad)[hp.CONTINUOUS]["equal"] == 47
    assert hp.compare(ref, bad)[hp.CONTINUOUS]["first_mismatch"]["prompt"] == 5
