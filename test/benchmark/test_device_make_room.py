"""scripts/device/make_room.sh on the CPU: the largest tracked result files go aside until the checkout and the
carried bundle fit the device call's limit, and come back byte for byte."""

import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _repo(tmp_path):
    repo = tmp_path / "repo"
    (repo / "scripts" / "device").mkdir(parents=True)
    (repo / "scripts" / "device" / "make_room.sh").write_text(
        open(os.path.join(ROOT, "scripts", "device", "make_room.sh")).read())
    results = repo / "benchmark" / "results"
    (results / "s1").mkdir(parents=True)
    sizes = {"s1/big.json": 5000, "s1/mid.json": 3000, "small.json": 500, "s1/tiny.json": 100}
    for name, size in sizes.items():
        (results / name).write_bytes(bytes([size % 251]) * size)
    (repo / "code.py").write_text("x = 1\n" * 50)  # 300 bytes that never move
    (repo / ".device").mkdir()
    (repo / ".device" / "site.tar.xz").write_bytes(b"b" * 2000)
    (repo / ".gitignore").write_text(".device/\n")
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    return repo, sizes


def _run(repo, tmp_path, *args, limit):
    env = dict(os.environ, DDTREE_ASIDE_DIR=str(tmp_path / "aside"), DDTREE_CARRY_LIMIT_BYTES=str(limit),
               DDTREE_CARRY_MARGIN_BYTES="0")
    return subprocess.run(["bash", "scripts/device/make_room.sh", *args], cwd=repo, capture_output=True, text=True,
                          env=env, timeout=60)


def test_the_largest_results_go_aside_and_come_back(tmp_path):
    repo, sizes = _repo(tmp_path)
    total = sum(sizes.values()) + 300 + len(".device/\n") + os.path.getsize(repo / "scripts/device/make_room.sh")
    # 2000 carried: 5000 must go to fit, so big.json alone (the largest first)
    p = _run(repo, tmp_path, "out", limit=total + 2000 - 4000)
    assert p.returncode == 0, p.stderr
    assert not (repo / "benchmark/results/s1/big.json").exists() and (repo / "benchmark/results/s1/mid.json").exists()
    assert (tmp_path / "aside/moved.txt").read_text() == "benchmark/results/s1/big.json\n"
    again = _run(repo, tmp_path, "out", limit=total)
    assert again.returncode == 2 and "still aside" in again.stderr
    p = _run(repo, tmp_path, "back", limit=total)
    assert p.returncode == 0, p.stderr
    assert (repo / "benchmark/results/s1/big.json").read_bytes() == bytes([5000 % 251]) * 5000
    assert subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True).stdout == ""
    assert not (tmp_path / "aside/moved.txt").exists()
    # two files when one is not enough; nothing when it already fits
    p = _run(repo, tmp_path, "out", limit=total + 2000 - 6000)
    assert p.returncode == 0 and "moved 2 files" in p.stdout
    assert _run(repo, tmp_path, "back", limit=0).returncode == 0
    p = _run(repo, tmp_path, "out", limit=10**9)
    assert p.returncode == 0 and "nothing moved" in p.stdout and not (tmp_path / "aside/moved.txt").exists()


def test_not_enough_room_and_bad_use_are_one_line_errors(tmp_path):
    repo, _ = _repo(tmp_path)
    p = _run(repo, tmp_path, "out", limit=1000)  # even with every result aside, code + bundle exceed it
    assert p.returncode == 1 and "still" in p.stderr
    assert _run(repo, tmp_path, "back", limit=1000).returncode == 0  # what was moved comes back
    assert subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True).stdout == ""
    p = _run(repo, tmp_path, "back", limit=1000)
    assert p.returncode == 2 and "nothing aside" in p.stderr
    p = _run(repo, tmp_path, "sideways", limit=1000)
    assert p.returncode == 2 and "usage:" in p.stderr
