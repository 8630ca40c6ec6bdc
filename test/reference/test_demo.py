"""``python -m sglang_ddtree demo`` (its ``main``): exit 0 when DDTree equals greedy, 1 when not."""

from sglang_ddtree import demo


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
