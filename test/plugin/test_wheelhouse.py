"""scripts/build_wheelhouse.py, without the network: our real wheel, and a local stand-in index for SGLang.

The stand-in index is a directory of dummy wheels built here (an ``sglang`` 0.5.16 and a newer one, its
requirements in two versions, a platform wheel for an older and for a too-new glibc, a ``torch`` that
requires a cu13 library), passed with ``--no-index --find-links``; every pip call runs without pip's
configuration files and PIP_* variables, so nothing of this machine's pip set-up takes part. The offline
install command that INSTALL.txt gives is run, into a ``--target`` directory.
"""

import base64
import hashlib
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "build_wheelhouse.py")
PY = "%d.%d" % sys.version_info[:2]
CP = "cp%d%d" % sys.version_info[:2]

_spec = importlib.util.spec_from_file_location("build_wheelhouse", SCRIPT)
bw = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bw)
OURS, SGLANG, _ = bw.pinned_versions()

needs_setuptools = pytest.mark.skipif(importlib.util.find_spec("setuptools") is None
                                      or importlib.util.find_spec("wheel") is None,
                                      reason="--no-build-isolation builds our wheel with this Python's setuptools")


def _pip_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def _run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, env=_pip_env(),
                          timeout=300)


def dummy_wheel(directory, name, version, tag="py3-none-any", requires=(), local=""):
    """A minimal valid wheel (METADATA, WHEEL, RECORD) of ``name`` ``version``; its path."""
    dist = f"{name.replace('-', '_')}-{version}{local}"
    files = {f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}{local}\n"
                                            + "".join(f"Requires-Dist: {r}\n" for r in requires),
             f"{dist}.dist-info/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {tag}\n"}
    path = os.path.join(directory, f"{dist}-{tag}.whl")
    record = []
    with zipfile.ZipFile(path, "w") as z:
        for arc, text in files.items():
            z.writestr(arc, text)
            digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
            record.append(f"{arc},sha256={digest},{len(text)}")
        z.writestr(f"{dist}.dist-info/RECORD", "\n".join(record + [f"{dist}.dist-info/RECORD,,"]) + "\n")
    return path


def _pins(requirements_txt):
    with open(requirements_txt) as f:
        return dict(re.findall(r"^([a-z0-9-]+)==(\S+)", f.read(), re.M))


def _offline_install(install_txt, wheelhouse, target):
    """Run the pip command INSTALL.txt gives, into ``target`` (``--target``: no venv needed)."""
    with open(install_txt) as f:
        line = next(x.strip() for x in f if "pip install --no-index" in x)
    cmd = shlex.split(line.replace("$WHEELHOUSE", wheelhouse))
    cmd = cmd[cmd.index("install") + 1:]
    return subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", target, *cmd],
                          capture_output=True, text=True, env=_pip_env(), timeout=300)


@pytest.fixture(scope="module")
def fake_index(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("index"))
    dummy_wheel(d, "sglang", SGLANG, requires=["fakedep>=1", "fakeplat", "torch==2.11.0"])
    dummy_wheel(d, "sglang", "0.5.99", requires=["fakedep>=1"])  # newer, not the pinned one
    dummy_wheel(d, "fakedep", "1.0")
    dummy_wheel(d, "fakedep", "2.0")
    dummy_wheel(d, "fakeplat", "1.0", tag=f"{CP}-{CP}-manylinux_2_28_x86_64")  # older glibc: fits
    dummy_wheel(d, "fakeplat", "2.0", tag=f"{CP}-{CP}-manylinux_2_39_x86_64")  # too new for 2_34
    dummy_wheel(d, "torch", "2.11.0", requires=["nvidia-nccl-cu13==2.28.9"])
    dummy_wheel(d, "nvidia-nccl-cu13", "2.28.9")
    dummy_wheel(d, "packaging", "24.0")
    return d


@pytest.fixture(scope="module")
def full_wheelhouse(fake_index, tmp_path_factory):
    if importlib.util.find_spec("setuptools") is None or importlib.util.find_spec("wheel") is None:
        pytest.skip("--no-build-isolation builds our wheel with this Python's setuptools")
    out = str(tmp_path_factory.mktemp("wh") / "full")
    r = _run("--out", out, "--no-index", "--find-links", fake_index, "--no-build-isolation")
    return out, r


@needs_setuptools
def test_no_sglang_wheelhouse_holds_our_wheel_and_installs_offline(tmp_path):
    out = str(tmp_path / "wh")
    r = _run("--out", out, "--no-sglang", "--no-build-isolation")
    assert r.returncode == 0, r.stdout + r.stderr
    for step in ("[1/4]", "[2/4]", "[3/4]", "[4/4]", "done:"):
        assert step in r.stdout
    wheel = f"sglang_ddtree-{OURS}-py3-none-any.whl"
    assert sorted(os.listdir(out)) == sorted([wheel, "requirements.txt", "INSTALL.txt"])
    with open(os.path.join(out, wheel), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    with open(os.path.join(out, "requirements.txt")) as f:
        req = f.read()
    assert f"sglang-ddtree=={OURS} \\\n    --hash=sha256:{digest}" in req
    with open(os.path.join(out, "INSTALL.txt")) as f:
        install = f.read()
    assert '-m pip install --no-index --find-links "$WHEELHOUSE" --no-deps -r "$WHEELHOUSE/requirements.txt"' in install
    assert f"WHEELHOUSE={out}" in install and "sglang_ddtree doctor" in install
    target = str(tmp_path / "site")
    inst = _offline_install(os.path.join(out, "INSTALL.txt"), out, target)
    assert inst.returncode == 0, inst.stderr
    got = subprocess.run([sys.executable, "-c", "import sglang_ddtree.version as v; print(v.__version__, v.__file__)"],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": target}, cwd=str(tmp_path))
    assert got.stdout.split() == [OURS, os.path.join(target, "sglang_ddtree", "version.py")], got.stderr
    assert not os.path.exists(os.path.join(ROOT, "build")), "the wheel build must not write into the checkout"


def test_full_wheelhouse_pins_the_resolved_set(full_wheelhouse):
    out, r = full_wheelhouse
    assert r.returncode == 0, r.stdout + r.stderr
    assert _pins(os.path.join(out, "requirements.txt")) == {
        "sglang-ddtree": OURS, "sglang": SGLANG, "fakedep": "2.0", "fakeplat": "1.0", "torch": "2.11.0",
        "nvidia-nccl-cu13": "2.28.9", "packaging": "24.0"}
    assert "torch 2.11.0: CUDA 13 build" in r.stdout and "warning" not in r.stdout
    assert "resolved all 7" in r.stdout
    with open(os.path.join(out, "requirements.txt")) as f:
        text = f.read()
    for name in os.listdir(out):
        if name.endswith(".whl"):
            with open(os.path.join(out, name), "rb") as w:
                assert f"--hash=sha256:{hashlib.sha256(w.read()).hexdigest()}" in text, name
    with open(os.path.join(out, "INSTALL.txt")) as f:
        install = f.read()
    assert ('/opt/sglang-ddtree/venv/bin/pip install --no-index --find-links "$WHEELHOUSE" -r '
            '"$WHEELHOUSE/requirements.txt"') in install
    assert f"python{PY} -m venv /opt/sglang-ddtree/venv" in install
    assert f"sglang {SGLANG}, torch 2.11.0" in install and "--no-deps" not in install


def test_full_wheelhouse_installs_offline(full_wheelhouse, tmp_path):
    out, r = full_wheelhouse
    assert r.returncode == 0, r.stdout + r.stderr
    inst = _offline_install(os.path.join(out, "INSTALL.txt"), out, str(tmp_path / "site"))
    assert inst.returncode == 0, inst.stderr
    installed = sorted(n.split("-")[0].lower() for n in os.listdir(tmp_path / "site") if n.endswith(".dist-info"))
    assert installed == sorted(["fakedep", "fakeplat", "nvidia_nccl_cu13", "packaging", "sglang", "sglang_ddtree",
                                "torch"])


def test_offline_check_fails_on_a_missing_wheel_even_if_pip_config_has_it(full_wheelhouse, fake_index, tmp_path,
                                                                           monkeypatch):
    out, r = full_wheelhouse
    assert r.returncode == 0, r.stdout + r.stderr
    broken = str(tmp_path / "broken")
    shutil.copytree(out, broken)
    os.remove(os.path.join(broken, "fakedep-2.0-py3-none-any.whl"))
    dists = bw.inventory(broken)
    bw.write_requirements(broken, dists, "test")
    monkeypatch.setenv("PIP_FIND_LINKS", fake_index)  # the check must not look here
    target = bw.Target(PY, (bw.DEFAULT_PLATFORM,), None)
    with pytest.raises(bw.WheelhouseError, match="fakedep"):
        bw.verify_offline(broken, target, no_deps=False, verbose=False)
    assert bw.verify_offline(out, target, no_deps=False, verbose=False) == 7


def test_two_versions_of_one_project_are_refused(full_wheelhouse, tmp_path):
    out, r = full_wheelhouse
    mixed = str(tmp_path / "mixed")
    shutil.copytree(out, mixed)
    dummy_wheel(mixed, "fakedep", "1.0")
    with pytest.raises(bw.WheelhouseError, match=r"fakedep 1\.0 and 2\.0"):
        bw.inventory(mixed)
    os.remove(os.path.join(mixed, "fakedep-1.0-py3-none-any.whl"))
    with open(os.path.join(mixed, "sglang-0.5.16.tar.gz"), "w"):
        pass
    with pytest.raises(bw.WheelhouseError, match="not a wheel"):
        bw.inventory(mixed)


@pytest.mark.parametrize("args, message", [
    (["--python", "2.7"], "--python: .*Python >= 3.10"),
    (["--python", "3.9"], "--python: .*Python >= 3.10"),
    (["--python", "twelve"], "--python: a version like 3.12 or a path"),
    (["--platform", "win_amd64"], "--platform: a Linux wheel platform tag"),
    (["--no-index"], "--no-index needs --find-links"),
])
def test_argument_errors_are_one_line_exit_2(tmp_path, args, message):
    r = _run("--out", str(tmp_path / "wh"), *args)
    assert r.returncode == 2 and r.stdout == ""
    last = r.stderr.strip().splitlines()[-1]
    assert re.search(message, last), r.stderr
    assert not os.path.exists(tmp_path / "wh")


def test_out_must_be_a_directory_and_is_required(tmp_path):
    f = tmp_path / "file"
    f.write_text("")
    r = _run("--out", str(f))
    assert r.returncode == 2 and "exists and is not a directory" in r.stderr.strip().splitlines()[-1]
    r = _run()
    assert r.returncode == 2 and "--out" in r.stderr.strip().splitlines()[-1]


def test_mixed_architectures_are_refused(tmp_path):
    r = _run("--out", str(tmp_path / "wh"), "--platform", "manylinux_2_34_x86_64", "--platform",
             "manylinux_2_34_aarch64")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1] == ("build_wheelhouse: error: --platform mixes architectures "
                                                 "(aarch64, x86_64): build one wheelhouse per architecture")


def test_target_python_other_than_this_one(capsys):
    parse = bw.build_parser().parse_args
    target = bw.resolve_target(parse(["--out", "x", "--python", "3.99"]))  # no python3.99 anywhere
    assert target == bw.Target("3.99", (bw.DEFAULT_PLATFORM,), None)
    assert "warning: no python3.99 found on PATH" in capsys.readouterr().out
    target = bw.resolve_target(parse(["--out", "x", "--python", sys.executable]))
    assert target == bw.Target(PY, (bw.DEFAULT_PLATFORM,), sys.executable)
    assert bw.resolve_target(parse(["--out", "x"])) == bw.Target(PY, (bw.DEFAULT_PLATFORM,), None)


def test_platform_tags_cover_every_older_glibc():
    tags = bw.platform_tags("manylinux_2_34_x86_64")
    assert tags[0] == "manylinux_2_34_x86_64" and tags[-1] == "manylinux1_x86_64"
    for t in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux2010_x86_64"):
        assert t in tags
    assert "manylinux_2_35_x86_64" not in tags
    assert bw.platform_tags("manylinux2014_aarch64") == (
        ["manylinux_2_17_aarch64", "manylinux2014_aarch64"] + [f"manylinux_2_{m}_aarch64" for m in range(16, 4, -1)])
    assert bw.platform_tags("musllinux_1_2_x86_64") == [f"musllinux_1_{m}_x86_64" for m in (2, 1, 0)]
    assert bw.platform_tags("linux_x86_64") == ["linux_x86_64"]


@pytest.mark.parametrize("lines, expected", [
    (["WARNING: Retrying (Retry(total=4)) after connection broken by 'NewConnectionError(... Failed to establish a "
      "new connection: [Errno 101] Network is unreachable')': /simple/sglang/",
      "ERROR: No matching distribution found for sglang==0.5.16"], "the package index cannot be reached"),
    (["ERROR: No matching distribution found for torch==2.11.0+cu130"],
     f"no wheel for torch==2.11.0+cu130: pass --extra-index-url {bw.PYTORCH_INDEX}"),
    (["ERROR: No matching distribution found for apache-tvm-ffi==0.1.11"],
     "no wheel for apache-tvm-ffi==0.1.11 for CPython 3.12 on manylinux_2_34_x86_64"),
    (["ModuleNotFoundError: No module named 'setuptools'"], "drop --no-build-isolation"),
    (["ERROR: Cannot install a and b because these package versions have conflicting dependencies.",
      "The conflict is caused by:", "    a 1.0 depends on c==1", "    b 1.0 depends on c==2",
      "ERROR: ResolutionImpossible: ..."], "conflicting requirements: a 1.0 depends on c==1; b 1.0 depends on c==2"),
])
def test_pip_failures_become_one_line(lines, expected):
    reason = bw._pip_reason(lines, bw.Target("3.12", (bw.DEFAULT_PLATFORM,), None))
    assert expected in reason and "\n" not in reason


def test_torch_cuda_build_is_read_from_the_wheel(tmp_path):
    d = str(tmp_path)
    assert bw.torch_cuda_major(dummy_wheel(d, "torch", "2.11.0", requires=[
        'cuda-toolkit[cublas,cudart]==13.0.2; platform_system == "Linux"'])) == 13
    assert bw.torch_cuda_major(dummy_wheel(d, "torch", "2.11.0", tag="cp312-cp312-linux_x86_64", local="+cu128")) == 12
    assert bw.torch_cuda_major(dummy_wheel(d, "torch", "2.11.0", tag="cp312-cp312-linux_x86_64", local="+cpu")) is None
