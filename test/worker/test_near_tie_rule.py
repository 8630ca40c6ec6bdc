"""CPU: the float32 near-tie rule of the GPU tests (``_features_helpers.near_tie_failures``) on a fake target:
each distinct first divergence is analysed once however many outputs share it, and its verdict covers them all."""

import types

import torch

import _features_helpers as H

VOCAB = 16


class FakeTarget:
    """Logits that depend only on the last input token t: token (t + 1) % VOCAB leads, (t + 2) % VOCAB trails it
    by ``gap``; every other token is far behind. Counts its forwards."""

    def __init__(self, gap, third=None):
        self.gap, self.third, self.calls = gap, third, 0

    def __call__(self, ids, positions):
        self.calls += 1
        t = int(ids[0, -1])
        logits = torch.full((ids.shape[1], VOCAB), -10.0)
        logits[-1, (t + 1) % VOCAB] = 5.0
        logits[-1, (t + 2) % VOCAB] = 5.0 - self.gap
        if self.third is not None:  # a third token, (t + 3) % VOCAB, ``third`` behind the leader
            logits[-1, (t + 3) % VOCAB] = 5.0 - self.third
        return types.SimpleNamespace(logits=logits[None])


def _items(n_copies):
    prompt, ref = [3], [4, 5, 6, 7]
    near = [4, 5, 7, 8]  # leaves ref at position 2: token 7 where 6 leads, the runner-up
    far = [4, 12, 13, 14]  # leaves ref at position 1: token 12, far behind
    return ([(f"near{i}", prompt, ref, near) for i in range(n_copies)]
            + [(f"far{i}", prompt, ref, far) for i in range(n_copies)])


def test_each_distinct_divergence_is_analysed_once_and_counted_for_all():
    target = FakeTarget(gap=0.01)
    failures, near_ties = H.near_tie_failures(target, _items(50), epsilon=0.05)
    assert target.calls == 2, target.calls  # 100 items, 2 distinct first divergences
    assert near_ties == 100  # every item analysed, through its representative
    assert len(failures) == 1 and failures[0].startswith("far0 (and 49 more items with the same first divergence)")


def test_a_near_tie_shared_by_many_items_is_no_failure_and_a_wide_margin_is():
    failures, near_ties = H.near_tie_failures(FakeTarget(gap=0.01), _items(3)[:3], epsilon=0.05)
    assert failures == [] and near_ties == 3
    failures, _ = H.near_tie_failures(FakeTarget(gap=0.5), _items(3)[:3], epsilon=0.05)
    assert len(failures) == 1 and "near0 (and 2 more" in failures[0]


def test_same_tokens_of_another_length_fail_and_nothing_divergent_needs_no_forward():
    target = FakeTarget(gap=0.01)
    failures, near_ties = H.near_tie_failures(target, [("short", [3], [4, 5, 6], [4, 5])], epsilon=0.05)
    assert target.calls == 0 and near_ties == 0
    assert failures == ["short: same tokens but lengths 3 (reference) vs 2"]


def test_a_third_ranked_token_passes_only_within_epsilon_of_the_best():
    """After token 5, 6 leads, 7 trails and 8 is third. The reference took the runner-up 7 and the got token is
    8: within epsilon of the reference either way, a near-tie only where 8 also lies within epsilon of 6."""
    items = [("third", [3], [4, 5, 7, 8], [4, 5, 8, 9])]  # at position 2: reference 7 (runner-up), got 8 (third)
    failures, near_ties = H.near_tie_failures(FakeTarget(gap=0.01, third=0.03), items, epsilon=0.05)
    assert failures == [] and near_ties == 1
    failures, _ = H.near_tie_failures(FakeTarget(gap=0.04, third=0.07), items, epsilon=0.05)
    assert len(failures) == 1 and "'speculative_token_rank': 2" in failures[0]  # 0.03 from the reference, 0.07 from the best
