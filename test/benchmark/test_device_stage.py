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
