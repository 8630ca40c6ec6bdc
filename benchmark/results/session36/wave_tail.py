#!/usr/bin/env python3
"""Session 36, section 4 of notes.md: how full the paired benchmark's waves were for budget auto (CPU reading).

Reads the `+logrounds` auto engine's decode log (one line per round, `#running-req` and the round's accept-length
histogram) out of `phase_split_bs16_e2e.log.gz` (call 12; the other engines of that call log nothing at INFO),
splits it into waves (a wave starts where the running requests go up), and prints per wave its rounds, those at the
wave's full batch, and request-rounds / (rounds x full batch). Then a simulation: every round's accept length drawn
independently from the full-batch rounds' histogram, 16 requests of 63 decode tokens, 2000 waves.

    python3 benchmark/results/session36/wave_tail.py   # output: wave_tail.txt
"""

import gzip
import os
import random
import re
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))
lines = [x for x in gzip.open(os.path.join(HERE, "phase_split_bs16_e2e.log.gz"), "rt") if "Decode batch" in x]
running = [int(re.search(r"#running-req: (\d+)", x).group(1)) for x in lines]
waves, cur = [], []
for r in running:
    if cur and r > cur[-1]:
        waves.append(cur)
        cur = []
    cur.append(r)
waves.append(cur)
for w in waves:
    top = max(w)
    full = sum(1 for r in w if r == top)
    print(f"wave of {top:2d}: rounds {len(w):3d}, at {top} requests {full:3d}, tail {len(w) - full:3d}, "
          f"full {sum(w) / (len(w) * top):.2f}")

hist = [0] * 16
for x, r in zip(lines, running):
    if r == 16:
        for i, c in enumerate(re.search(r"accept len hist \[1\.\.16\]: ([\d ]+)", x).group(1).split()):
            hist[i] += int(c)
values = [i + 1 for i, c in enumerate(hist) for _ in range(c)]
print("full-batch histogram", hist, f"mean accept {statistics.fmean(values):.2f}")
rng = random.Random(0)


def rounds(tokens=63):
    done = n = 0
    while done < tokens:
        done += rng.choice(values)
        n += 1
    return n


per_wave, mean_request = [], []
for _ in range(2000):
    rs = [rounds() for _ in range(16)]
    per_wave.append(max(rs))
    mean_request.append(statistics.fmean(rs))
print(f"simulated (independent rounds): {statistics.fmean(per_wave):.1f} rounds a wave, mean request "
      f"{statistics.fmean(mean_request):.1f}, full {statistics.fmean(mean_request) / statistics.fmean(per_wave):.2f}")
