"""Reference tests run tiny float32 models: one intra-op thread is fastest and avoids thread
contention on small shared CPUs (2 threads on a busy 2-core box ran ~40x slower)."""

import torch

torch.set_num_threads(1)
