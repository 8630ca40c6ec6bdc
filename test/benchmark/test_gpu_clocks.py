"""benchmark/gpu_clocks.py against fake nvidia-smi executables: samples parsed and summarised, throttle bits
named (idle left out), the older reasons field used where the newer one is refused, a missing or failing
nvidia-smi ends the sampling with its reason instead of raising."""

import os
import stat
import time

import _scripts

gc = _scripts.load("gpu_clocks")


def _fake_smi(tmp_path, body):
    path = tmp_path / "nvidia-smi"
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


# a GPU whose clock steps down while at its power cap: 1980 MHz, then 1755 MHz with sw_power_cap (0x4)
STEPPING = r'''
args="$*"
n=$(cat "$0.count" 2>/dev/null || echo 0); echo $((n + 1)) > "$0.count"
case "$args" in *"-i 3 "*) ;; *) echo "wrong index: $args" >&2; exit 6 ;; esac
reason=""; case "$args" in *clocks_event_reasons.active*) reason=", 0x0000000000000005" ;; esac
if [ "$n" -lt 2 ]; then echo "1980, 412.5, 51$reason"; else echo "1755, 699.9, 63$reason"; fi
'''


def test_samples_are_summarised_with_named_throttle_reasons(tmp_path):
    smi = _fake_smi(tmp_path, STEPPING)
    with gc.GpuSampler(index=3, every_s=0.02, smi=smi) as g:
        deadline = time.time() + 30  # each sample forks bash twice: on a busy 2-core machine 0.3 s held only 3
        while len(g.samples) < 4 and time.time() < deadline:
            time.sleep(0.05)
    s = g.summary()
    assert s["samples"] >= 4 and "error" not in s, s
    assert s["sm_mhz_min"] == 1755.0 and 1755.0 <= s["sm_mhz_median"] <= 1867.5, s  # 2 samples at 1980 first
    assert s["power_w_max"] == 699.9 and s["temp_c_max"] == 63.0
    assert s["throttle"] == ["sw_power_cap"], s  # 0x5 = idle (left out) + sw power cap


def test_an_older_driver_gets_the_older_reasons_field(tmp_path):
    smi = _fake_smi(tmp_path, r'''
case "$*" in *clocks_event_reasons*) echo 'Field "clocks_event_reasons.active" is not a valid field to query.' >&2; exit 2 ;; esac
case "$*" in *clocks_throttle_reasons.active*) echo "1410, 300.0, 40, 0x0000000000000040" ;; *) echo "1410, 300.0, 40" ;; esac
''')
    g = gc.GpuSampler(index=0, smi=smi)
    assert g.sample_once()["reasons"] == 0x40 and g._reason_field == "clocks_throttle_reasons.active"
    g.samples.append(g.sample_once())
    assert g.summary()["throttle"] == ["hw_thermal_slowdown"]


def test_no_reasons_field_at_all_still_samples_clocks(tmp_path):
    smi = _fake_smi(tmp_path, r'''
case "$*" in *reasons*) echo "not supported" >&2; exit 2 ;; esac
echo "[N/A], 250.0, 45"
''')
    g = gc.GpuSampler(index=0, smi=smi)
    s = g.sample_once()
    assert s["sm_mhz"] is None and s["power_w"] == 250.0 and "reasons" not in s and g._reason_field is None
    g.samples.append(s)
    out = g.summary()
    assert "sm_mhz_median" not in out and out["power_w_median"] == 250.0 and "throttle" not in out


def test_a_missing_or_failing_nvidia_smi_ends_sampling_with_the_reason(tmp_path):
    with gc.GpuSampler(index=0, every_s=0.01, smi=str(tmp_path / "absent")) as g:
        time.sleep(0.05)
    assert g.summary()["samples"] == 0 and "FileNotFoundError" in g.summary()["error"]
    smi = _fake_smi(tmp_path, 'echo "NVIDIA-SMI has failed because it could not communicate with the driver" >&2; exit 9\n')
    with gc.GpuSampler(index=0, every_s=0.01, smi=smi) as g:
        time.sleep(0.05)
    assert g.summary() == {"samples": 0, "error": "RuntimeError: NVIDIA-SMI has failed because it could not "
                                                   "communicate with the driver"}


def test_decode_reasons_and_visible_index(monkeypatch):
    assert gc.decode_reasons(0x4 | 0x40 | 0x1000) == ["sw_power_cap", "hw_thermal_slowdown", "0x1000"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,6")
    assert gc.visible_index() == 5
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-8a1b")
    assert gc.visible_index() == 0


def test_cli_without_a_gpu_says_why_and_exits_1(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}
    r = _scripts.cli("gpu_clocks", "--seconds", "0.1", env=env, timeout=60)
    assert r.returncode == 1 and '"samples": 0' in r.stdout and "error" in r.stdout, (r.stdout, r.stderr)
