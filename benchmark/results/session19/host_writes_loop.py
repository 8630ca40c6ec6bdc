# CPU microbenchmark of prepare_for_decode's per-request loop alone: three torch element writes per request vs
# writes through NumPy views, 48 requests. Run: .venv/bin/python benchmark/results/session19/host_writes_loop.py
# (session 19 development machine: 2 cores of an AMD EPYC, no GPU; not a GPU or round measurement).
import json, platform, sys, time
import numpy, torch
bs = 48
a, b, c = (torch.zeros(bs, dtype=torch.int64) for _ in range(3))
an, bn, cn = a.numpy(), b.numpy(), c.numpy()
def torch_elements():
    for i in range(bs):
        a[i], b[i], c[i] = i, i + 1, i + 2
def numpy_views():
    for i in range(bs):
        an[i], bn[i], cn[i] = i, i + 1, i + 2
out = {}
for f in (torch_elements, numpy_views):
    for _ in range(100):
        f()
    t = time.perf_counter()
    for _ in range(2000):
        f()
    out[f.__name__ + "_us_per_48_requests"] = round((time.perf_counter() - t) / 2000 * 1e6, 1)
print(json.dumps({"python": platform.python_version(), "torch": torch.__version__, "numpy": numpy.__version__,
                  "cpu": platform.processor() or platform.machine(), **out}))
