"""``DDTREE`` as an SGLang speculative algorithm: the predicates the scheduler and runners dispatch on.

SGLang's scheduler, model runners and CUDA-graph runners branch on ``is_*()`` predicates of the
algorithm object rather than on its class. DDTREE answers like DFLASH wherever the drafter is
concerned (``is_dflash_family``, target-verify graphs for the draft), never claims ``is_eagle``, and
adds the three methods upstream's ``CustomSpecAlgo`` lacks but the scheduler calls
(``create_future_map``, ``need_topk``, ``carries_draft_hidden_states``). Its future map never asks the scheduler
for exact host lengths before a round (``_scheduler_host_lens_needed``).
Tokens per request in a target-verify forward come from the runner's own server args: the target's
say ``budget + 1``; the draft runner gets a copy that says the DFlash block size.
"""

from __future__ import annotations

from sglang.srt.speculative.spec_registry import CustomSpecAlgo


class DDTreeSpecAlgo(CustomSpecAlgo):
    """The registered ``DDTREE`` algorithm (an instance is created by ``SpeculativeAlgorithm.register``)."""

    def __repr__(self) -> str:
        return f"DDTreeSpecAlgo({self.name!r})"

    def is_dflash_family(self) -> bool:
        return True

    def supports_target_verify_for_draft(self) -> bool:
        return True

    def has_draft_kv(self) -> bool:
        return True

    def need_topk(self) -> bool:
        # The future map's top-k slots are for EAGLE-style per-step drafts; DDTree drafts in one block.
        return False

    def carries_draft_hidden_states(self) -> bool:
        return False

    def create_future_map(
        self,
        device,
        req_to_token_pool,
        needs_cpu_seq_lens: bool = True,
        needs_confidence_relay: bool = False,
    ):
        from sglang.srt.managers.overlap_utils import FutureMap

        return FutureMap(device, self, req_to_token_pool, needs_cpu_seq_lens and _scheduler_host_lens_needed(),
                         needs_confidence_relay)

    def handle_server_args(self, server_args) -> None:
        from sglang_ddtree.validation import handle_ddtree_server_args

        handle_ddtree_server_args(server_args)


def _scheduler_host_lens_needed() -> bool:
    """Whether a DDTREE server needs the scheduler's exact host lengths before each overlapped decode round.

    Upstream asks for them when any attention backend says ``needs_cpu_seq_lens`` (flashinfer does): the
    scheduler then waits for the previous round to publish and copies its lengths to the host before it
    launches the next round (``FutureMap.resolve_seq_lens_cpu``), so the CPU cannot prepare round k + 1 while
    the GPU runs round k. A DDTREE round does not read them: it plans its forwards from the host upper bounds its
    ``prepare_for_decode`` records (``worker._host_seq_lens``, the path fa3 and triton already take), and its own
    flashinfer plan keeps no host buffer that a later round could overwrite early (``flashinfer_plan``'s pinned
    ring). At the Qwen3-8B shape on the H200 that wait was 2.1 ms of a profiled flashinfer round at concurrency 1
    (``benchmark/results/session20/shape_fiplan_analyses/``, ``resolve_seq_lens_cpu`` > ``synchronize``).
    Two-batch overlap reads the host lengths outside the backends: there upstream's answer stands."""
    from sglang.srt.runtime_context import get_server_args

    from sglang_ddtree.config import resolved_args

    return bool(getattr(resolved_args(get_server_args()), "enable_two_batch_overlap", False))


def worker_factory(server_args):
    """Return the worker class for DDTREE (imported lazily: it pulls in SGLang's GPU stack)."""
    try:
        from sglang_ddtree.worker import DDTreeWorker
    except ImportError as e:
        raise RuntimeError(
            "--speculative-algorithm DDTREE: the DDTREE worker could not be imported "
            f"({type(e).__name__}: {e}). Run `python -m sglang_ddtree doctor` to check the installation."
        ) from e
    return DDTreeWorker
