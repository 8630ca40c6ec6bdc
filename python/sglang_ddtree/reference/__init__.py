"""Pure-PyTorch reference of DDTree on CPU: the executable specification the GPU worker must match.

- ``qwen3``: a minimal Qwen3 target (HF checkpoints) with KV cache, arbitrary positions and masks,
  and DFlash context-feature capture.
- ``dflash``: the DFlash drafter in SGLang 0.5.16's checkpoint format, plus training helpers.
- ``loop``: one request's decoding loop: DDTree (draft -> build tree -> verify -> accept -> commit),
  DFLASH (chain) and plain greedy.
Heavy imports (torch) live here; ``import sglang_ddtree`` itself stays cheap.
"""
