"""scripts/device/stage.sh on the CPU: an fa3 part lands where .device/env.sh assembles it, a JIT cache is unpacked
where env.sh points the caches and marked restored (so env.sh does not unpack another), anything else is refused."""

import os
import subprocess
import tarfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _repo(tmp_path):
    repo = tmp_path / "repo"
    (repo / "scripts" / "device").mkdir(parents=True)
    (repo / "scripts" / "device" / "stage.sh").write_text(open(os.path.join(ROOT, "scripts", "device", "stage.sh")).read())
    return repo


def test_parts_and_the_jit_cache_are_staged(tmp_path):
    repo = _repo(tmp_path)
    (repo / ".fa3").mkdir()
    (repo / ".fa3" / "part_01").write_bytes(b"x" * 100)
    p = subprocess.run(["bash", "scripts/device/stage.sh", ".fa3/part_01"], cwd=repo, capture_output=True, text=True,
                       env=dict(os.environ, DDTREE_STAGE_ROOT=str(tmp_path / "root")), timeout=60)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "root" / "fa3p" / "part_01").read_bytes() == b"x" * 100

    (repo / ".jit").mkdir()
    (tmp_path / "cache" / "triton").mkdir(parents=True)
    (tmp_path / "cache" / "triton" / "k.bin").write_text("kernel")
    with tarfile.open(repo / ".jit" / "jitcache.tar.xz", "w:xz") as t:
        t.add(tmp_path / "cache" / "triton", arcname="./triton")
    p = subprocess.run(["bash", "scripts/device/stage.sh", ".jit/jitcache.tar.xz"], cwd=repo, capture_output=True,
                       text=True, env=dict(os.environ, DDTREE_STAGE_ROOT=str(tmp_path / "root")), timeout=60)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "root" / "jitcache" / "triton" / "k.bin").read_text() == "kernel"
    assert (tmp_path / "root" / "jitcache" / ".restored").exists()


def test_a_missing_or_unknown_file_is_refused(tmp_path):
    repo = _repo(tmp_path)
    env = dict(os.environ, DDTREE_STAGE_ROOT=str(tmp_path / "root"))
    p = subprocess.run(["bash", "scripts/device/stage.sh", ".fa3/part_00"], cwd=repo, capture_output=True, text=True,
                       env=env, timeout=60)
    assert p.returncode == 2 and "was not carried" in p.stderr
    (repo / "other.bin").write_text("y")
    p = subprocess.run(["bash", "scripts/device/stage.sh", "other.bin"], cwd=repo, capture_output=True, text=True,
                       env=env, timeout=60)
    assert p.returncode == 2 and "neither an fa3 part nor a JIT cache" in p.stderr
    p = subprocess.run(["bash", "scripts/device/stage.sh"], cwd=repo, capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 2 and "usage:" in p.stderr


def test_several_files_in_one_call_and_nothing_staged_when_one_is_bad(tmp_path):
    repo = _repo(tmp_path)
    env = dict(os.environ, DDTREE_STAGE_ROOT=str(tmp_path / "root"))
    (repo / ".fa3").mkdir()
    (repo / ".fa3" / "part_02").write_bytes(b"z" * 10)
    (repo / ".jit").mkdir()
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "k.bin").write_text("kernel")
    with tarfile.open(repo / ".jit" / "jitcache.tar.xz", "w:xz") as t:
        t.add(tmp_path / "cache" / "k.bin", arcname="./k.bin")
    p = subprocess.run(["bash", "scripts/device/stage.sh", ".fa3/part_02", ".fa3/part_09"], cwd=repo,
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 2 and ".fa3/part_09 was not carried" in p.stderr
    assert not (tmp_path / "root").exists()  # checked first: nothing half-staged
    p = subprocess.run(["bash", "scripts/device/stage.sh", ".fa3/part_02", ".jit/jitcache.tar.xz"], cwd=repo,
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "root" / "fa3p" / "part_02").read_bytes() == b"z" * 10
    assert (tmp_path / "root" / "jitcache" / "k.bin").read_text() == "kernel"
    assert (tmp_path / "root" / "jitcache" / ".restored").exists()


def test_fa3_parts_are_re_split_to_fit_a_call_beside_the_checkout(tmp_path):
    """fit_fa3_parts.sh: the parts come back in as many pieces as the room beside the checkout needs (the limit
    minus tracked and untracked-not-ignored files minus the margin), the same bytes in the same order, part_00
    first; with no room it refuses in one line."""
    import random

    repo = tmp_path / "repo"
    (repo / "scripts" / "device").mkdir(parents=True)
    script = repo / "scripts" / "device" / "fit_fa3_parts.sh"
    script.write_text(open(os.path.join(ROOT, "scripts", "device", "fit_fa3_parts.sh")).read())
    (repo / ".gitignore").write_text(".fa3/\n")
    (repo / "tracked.bin").write_bytes(b"t" * 1000)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "tracked.bin", ".gitignore"], cwd=repo, check=True)
    (repo / ".fa3").mkdir()
    data = random.Random(0).randbytes(5000)
    (repo / ".fa3" / "part_00").write_bytes(data[:3000])
    (repo / ".fa3" / "part_01").write_bytes(data[3000:])
    checkout = sum(os.path.getsize(repo / f) for f in ("tracked.bin", ".gitignore")) + os.path.getsize(script)
    env = dict(os.environ, DDTREE_CARRY_LIMIT_BYTES=str(checkout + 100 + 2100), DDTREE_CARRY_MARGIN_BYTES="100")
    p = subprocess.run(["bash", "scripts/device/fit_fa3_parts.sh"], cwd=repo, capture_output=True, text=True,
                       env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    parts = sorted((repo / ".fa3").glob("part_*"))
    assert [q.name for q in parts] == ["part_00", "part_01", "part_02"]
    assert b"".join(q.read_bytes() for q in parts) == data
    assert all(q.stat().st_size <= 2100 for q in parts)
    env["DDTREE_CARRY_LIMIT_BYTES"] = str(checkout)
    p = subprocess.run(["bash", "scripts/device/fit_fa3_parts.sh"], cwd=repo, capture_output=True, text=True,
                       env=env, timeout=60)
    assert p.returncode == 2 and "leaves no room" in p.stderr
    assert b"".join(q.read_bytes() for q in sorted((repo / ".fa3").glob("part_*"))) == data  # untouched
