"""The DDTREE worker: SGLang's spec-v2 worker that runs one DDTree round per decode step.

Modules, one concern each (the round is draft -> build tree -> verify -> accept -> commit):
  worker      ``DDTreeWorker`` (a ``DFlashWorkerV2``), orchestrates the round
  draft_view  the drafter's view of the server args (block size L, topk 1)
  draft_head  top-K draft log-probs from the target's (vocab-parallel) LM head
  tree_api    the door to ``sglang_ddtree.tree``: tree construction and verify topology
  info        the draft-state and verify SpecInput dataclasses
  kv_commit   KV moves and drafter context of the accepted path
  hybrid      hybrid Mamba/GDN targets (experimental): the tree fed to SGLang's hybrid backend, the last
              accepted node's conv + SSM state committed (argument rules: ``sglang_ddtree.hybrid_args``)
  hooks       upstream hooks: CUDA-graph capture with a tree mask, KV reservation sizing, and the
              targets of metrics / request_checks (``HOOK_TARGETS``)
  metrics     accept-length histogram and depth-based accept rate in the decode log and /metrics
  request_checks  per-request refusal of features DDTREE does not support yet
Static shapes come from ``sglang_ddtree.config.DDTreeConfig``. Tests plug in from outside (a test-only
SGLang plugin under test/ hooks ``DDTreeWorker._draft`` / ``_verify`` / ``hybrid.last_accepted_rows``); the round
has no test code.
Importing this package is cheap; ``DDTreeWorker`` pulls in SGLang's GPU stack on first access.
"""

from __future__ import annotations

__all__ = ["DDTreeWorker", "install_hooks"]


def install_hooks() -> None:
    from sglang_ddtree.worker.hooks import install_hooks as _install

    _install()


def __getattr__(name):
    if name == "DDTreeWorker":
        from sglang_ddtree.worker.worker import DDTreeWorker

        return DDTreeWorker
    raise AttributeError(name)
