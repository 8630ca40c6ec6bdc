"""``python -m sglang_ddtree demo`` (its ``main``): exit 0 when DDTree equals greedy, 1 when not."""

import pytest

from sglang_ddtree import demo
from sglang_ddtree.config import BUDGET_FLAG, MAX_BUDGET, MAX_TOPK, MIN_BUDGET, MIN_TOPK, TOPK_FLAG


def test_demo_random_pair(capsys):
    assert demo.main(["--random", "--max-new-tokens", "24", "--num-prompts", "2", "--budget", "8"]) == 0
    out = capsys.readouterr().out
    assert "mean accept length" in out and "OK" in out


def test_demo_default_pair(capsys):  # the trained tiny pair when the fixtures provide one
    assert demo.main(["--max-new-tokens", "12", "--num-prompts", "1"]) == 0


def test_demo_reports_a_mismatch(monkeypatch, capsys):
    from sglang_ddtree.reference import loop

    real = loop.ddtree_generate

    def broken(*args, **kwargs):
        gen = real(*args, **kwargs)
        gen.tokens[-1] += 1
        return gen

    monkeypatch.setattr(loop, "ddtree_generate", broken)
    assert demo.main(["--random", "--max-new-tokens", "8", "--num-prompts", "1"]) == 1
    assert "MISMATCH" in capsys.readouterr().out


def test_demo_pair_dir(tmp_path):
    """A pair saved by the reference models (HF target + SGLang-format drafter, bf16) runs from disk."""
    import torch

    from sglang_ddtree.reference.toy import random_drafter, random_target

    target = random_target(1)
    target.save_pretrained(str(tmp_path / "target"))
    random_drafter(target, 1, block_size=6).save_pretrained(str(tmp_path / "draft"), dtype=torch.bfloat16)
    assert demo.main(["--pair-dir", str(tmp_path), "--max-new-tokens", "16", "--num-prompts", "2"]) == 0


# Bad arguments: one argparse error line (exit 2) before any model is built, with the server's limits.

def _usage_error(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as exc:
        demo.parse_args(list(argv))
    assert exc.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("python -m sglang_ddtree demo: error: "), last
    return last.split(": error: ", 1)[1]


@pytest.mark.parametrize("argv, message", [
    (["--num-prompts", "0"], "argument --num-prompts: must be an integer >= 1, got '0'"),
    (["--max-new-tokens", "0"], "argument --max-new-tokens: must be an integer >= 1, got '0'"),
    (["--random", "--block-size", "1"], "argument --block-size: must be an integer >= 2, got '1'"),
    (["--budget", str(MAX_BUDGET + 1)], f"argument --budget: must be an integer in [{MIN_BUDGET}, {MAX_BUDGET}] "
                                        f"(the server's {BUDGET_FLAG} limits), got '{MAX_BUDGET + 1}'"),
    (["--budget", "0"], f"argument --budget: must be an integer in [{MIN_BUDGET}, {MAX_BUDGET}] "
                        f"(the server's {BUDGET_FLAG} limits), got '0'"),
    (["--topk", "100", "--budget", "4"], f"argument --topk: must be an integer in [{MIN_TOPK}, {MAX_TOPK}] "
                                         f"(the server's {TOPK_FLAG} limits), got '100'"),
    (["--budget", "many"], f"argument --budget: must be an integer in [{MIN_BUDGET}, {MAX_BUDGET}] "
                           f"(the server's {BUDGET_FLAG} limits), got 'many'"),
    (["--pair-dir", "/nonexistent"], "argument --pair-dir: /nonexistent is not a directory"),
    (["--random", "--pair-dir", "/tmp"], "argument --pair-dir: not allowed with argument --random"),
])
def test_bad_arguments_are_one_usage_error(capsys, argv, message):
    assert _usage_error(capsys, *argv) == message


def test_the_limits_are_the_servers():
    for value in (MIN_BUDGET, MAX_BUDGET):
        assert demo.parse_args(["--random", "--budget", str(value)])[0].budget == value
    for value in (MIN_TOPK, MAX_TOPK):
        assert demo.parse_args(["--random", "--budget", str(MAX_BUDGET), "--topk", str(value)])[0].topk == value


def test_a_pair_dir_without_a_pair_is_a_usage_error(capsys, tmp_path):
    assert _usage_error(capsys, "--pair-dir", str(tmp_path)).startswith(
        f"argument --pair-dir: no Qwen3ForCausalLM + DFlashDraftModel pair under {tmp_path}")


def test_topk_above_the_budget_is_capped_with_the_servers_warning(capsys):
    args, _ = demo.parse_args(["--random", "--budget", "4", "--topk", "8"])
    assert (args.budget, args.topk) == (4, 4)
    assert capsys.readouterr().err.strip() == (
        "warning: --topk=8 exceeds --budget=4; a node can have at most 4 children, using --topk=4")
    args, _ = demo.parse_args(["--random", "--budget", "4", "--topk", "4"])
    assert args.topk == 4 and capsys.readouterr().err == ""


def _trained_pair_or_skip():
    pair = demo._trained_pair()
    if pair is None:
        pytest.skip("the trained tiny pair is not installed")
    return pair


def test_more_prompts_than_the_tokenizer_pair_has_is_refused(capsys):
    _trained_pair_or_skip()
    n = len(demo.PROMPT_TEXTS)
    assert demo.parse_args(["--num-prompts", str(n)])[0].num_prompts == n
    assert _usage_error(capsys, "--num-prompts", str(n + 5)) == (
        f"argument --num-prompts: at most {n} with a pair that has a tokenizer (the demo's {n} text prompts), "
        f"got {n + 5}; --random generates any number")
    assert demo.parse_args(["--random", "--num-prompts", str(n + 5)])[0].num_prompts == n + 5


def test_block_size_is_for_the_random_pair_only(capsys):
    _trained_pair_or_skip()
    assert _usage_error(capsys, "--block-size", "4").startswith(
        "argument --block-size: applies to the random pair only (--random)")
    assert demo.parse_args(["--random", "--block-size", "4"])[0].block_size == 4
