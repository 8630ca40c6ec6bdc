#!/usr/bin/env python3
"""What the GPU's clocks, power and throttle reasons were while a benchmark measured: ``nvidia-smi`` polled from a
background thread.

Why: at the Qwen3-8B shape on the H200 (sessions 17 and 18, c 32) DDTREE's verify GEMMs took 7-11 % longer than
DFLASH's, kernel for kernel with the same tile configurations (so the same row counts), in the same run. Kernels
that are the same and run slower point at the clock: a GPU at its power cap or hot lowers its SM clock, and how
much power a tensor-core GEMM draws depends on the data it multiplies. This records, per measurement, the SM
clock, the power draw, the temperature and the throttle reasons nvidia-smi reports, so two configurations of one
run can be compared at equal clocks or the difference explained.

    with GpuSampler(index=0, every_s=0.25) as g:
        ...  # the measurement
    g.summary()  # {"samples": n, "sm_mhz_median": ..., "sm_mhz_min": ..., "power_w_median": ..., "power_w_max": ...,
                 #  "temp_c_max": ..., "throttle": ["sw_power_cap", ...]} or {"samples": 0, "error": "..."}

Standard library only. ``python benchmark/gpu_clocks.py [--index I] [--seconds S]`` prints one summary (a quick
check on a GPU machine).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import threading
import time
from typing import List, Optional

# nvidia-smi's clocks_event_reasons bits (nvml.h nvmlClocksEventReason*; "throttle" in older drivers)
THROTTLE_BITS = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
FIELDS = ("clocks.sm", "power.draw", "temperature.gpu")
REASON_FIELDS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")  # newer, older drivers


def decode_reasons(mask: int) -> List[str]:
    """Names of the throttle bits set in ``mask`` (unknown bits as hex)."""
    names = [name for bit, name in THROTTLE_BITS.items() if mask & bit]
    rest = mask & ~sum(THROTTLE_BITS)
    return names + ([hex(rest)] if rest else [])


def visible_index() -> int:
    """The physical index of the first GPU this process sees (CUDA_VISIBLE_DEVICES' first entry when it is a
    number; else 0), which is what nvidia-smi's ``-i`` takes."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return int(first) if first.isdigit() else 0


def _parse_float(text: str) -> Optional[float]:
    try:
        return float(text)
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None


class GpuSampler:
    """Poll nvidia-smi every ``every_s`` seconds between ``__enter__`` and ``__exit__`` (module docstring). A
    missing nvidia-smi or a failing query ends the sampling quietly; ``summary()`` then says why."""

    def __init__(self, index: Optional[int] = None, every_s: float = 0.25, smi: str = "nvidia-smi"):
        self.index = visible_index() if index is None else int(index)
        self.every_s, self.smi = float(every_s), smi
        self.samples: List[dict] = []
        self.error: Optional[str] = None
        self._reason_field: Optional[str] = REASON_FIELDS[0]
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _query(self, fields) -> List[str]:
        out = subprocess.run([self.smi, "-i", str(self.index), "--query-gpu=" + ",".join(fields),
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10)
        if out.returncode != 0:
            said = (out.stderr or out.stdout).strip().splitlines()
            raise RuntimeError(said[-1] if said else f"{self.smi} exit {out.returncode}")
        parts = [p.strip() for p in out.stdout.strip().splitlines()[0].split(",")]
        if len(parts) != len(fields):
            raise RuntimeError(f"expected {len(fields)} values, got {out.stdout.strip()!r}")
        return parts

    def sample_once(self) -> dict:
        fields = FIELDS + ((self._reason_field,) if self._reason_field else ())
        try:
            parts = self._query(fields)
        except RuntimeError:
            if self._reason_field is None:
                raise
            # this driver names the reasons field otherwise, or has none: try the older name, then none
            i = REASON_FIELDS.index(self._reason_field)
            self._reason_field = REASON_FIELDS[i + 1] if i + 1 < len(REASON_FIELDS) else None
            return self.sample_once()
        s = {"t": time.monotonic(), "sm_mhz": _parse_float(parts[0]), "power_w": _parse_float(parts[1]),
             "temp_c": _parse_float(parts[2])}
        if self._reason_field:
            try:
                s["reasons"] = int(parts[3], 16)
            except ValueError:
                pass
        return s

    def _run(self) -> None:
        while True:  # at least one sample, however short the measurement
            try:
                self.samples.append(self.sample_once())
            except (OSError, RuntimeError, subprocess.SubprocessError, IndexError) as e:
                self.error = f"{type(e).__name__}: {e}"
                return
            if self._stop.wait(self.every_s):
                return

    def __enter__(self) -> "GpuSampler":
        self._thread = threading.Thread(target=self._run, name="gpu-clocks", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)

    def summary(self) -> dict:
        """Medians / extremes over the samples and every throttle reason seen (module docstring)."""
        out = {"samples": len(self.samples)}
        if self.error:
            out["error"] = self.error
        for key, stats in (("sm_mhz", ("median", "min")), ("power_w", ("median", "max")), ("temp_c", ("max",))):
            vals = [s[key] for s in self.samples if s.get(key) is not None]
            for stat in stats if vals else ():
                v = {"median": statistics.median, "min": min, "max": max}[stat](vals)
                out[f"{key}_{stat}"] = round(v, 1)
        mask = 0
        for s in self.samples:
            mask |= s.get("reasons", 0)
        if any("reasons" in s for s in self.samples):
            out["throttle"] = decode_reasons(mask & ~0x1)  # idle between launches is no throttle
        return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", type=int, default=None, help="nvidia-smi GPU index (default: the first visible)")
    ap.add_argument("--seconds", type=float, default=2.0, help="how long to sample (default 2)")
    ap.add_argument("--every", type=float, default=0.25, help="seconds between samples (default 0.25)")
    args = ap.parse_args(argv)
    with GpuSampler(args.index, args.every) as g:
        time.sleep(args.seconds)
    print(json.dumps(g.summary()))
    return 0 if g.samples else 1


if __name__ == "__main__":
    raise SystemExit(main())
