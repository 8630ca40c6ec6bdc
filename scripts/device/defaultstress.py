"""Load on a started server (session 44, budget auto as the default): N concurrent requests of long random prompts
(input ids, --skip-tokenizer-init), greedy; prints how many finished, with what, and the wall time."""
import json, random, sys, time, urllib.request
from concurrent.futures import ThreadPoolExecutor

port, n, plen, new = (int(a) for a in sys.argv[1:5])


def one(i):
    rng = random.Random(i)
    body = {"input_ids": [rng.randrange(1000, 150000) for _ in range(plen)],
            "sampling_params": {"max_new_tokens": new, "temperature": 0, "ignore_eos": True}}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/generate", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return len(json.loads(r.read())["output_ids"])
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"[:200]


t0 = time.time()
with ThreadPoolExecutor(n) as ex:
    res = list(ex.map(one, range(n)))
ok = sum(r == new for r in res)
print(f"[stress] {ok}/{n} requests of {plen} prompt tokens finished with {new} tokens in {time.time() - t0:.1f} s;"
      f" others: {[r for r in res if r != new][:3]}")
