"""The test hooks' environment variables, read in this one module (once, by ``register``).

DDTREE_TEST_DRAFT_ORACLE=<json path>   replace the drafter's top-K by ``draft_oracle``'s plan (around a successor
                                       map, or a replay of reference outputs)
DDTREE_TEST_REVERSE_RANKS=1            reverse the drafter's top-K token order (log-probs stay sorted)
DDTREE_TEST_VERIFY_DUMP=<dir>          save each of the first rounds' verify inputs and logits there
DDTREE_TEST_VERIFY_DUMP_ROUNDS=<int>   how many rounds to save (default 4)
DDTREE_TEST_CORRUPT_MASK=<mode>        rewrite the tree part of the verify FULL_MASK (modes: ``causal``)
DDTREE_TEST_CYCLE_BUDGETS=1            budget auto: every round verifies the next bucket of a fixed cycle
                                       (the width changes every round), whatever the policy chose
DDTREE_TEST_HYBRID_FAULT=<mode>        a deliberate hybrid-state fault (modes: ``chain_commit``: commit row
                                       accept_len - 1; ``reversed_siblings``: children linked highest row first)
DDTREE_TEST_PIN_BUDGET=<bucket>        budget auto: every round verifies this bucket (0: no drafting; chainN: the
                                       chain bucket), whatever the policy chose (a diagnostic: a width-0 round profiled
                                       against plain decoding)
DDTREE_TEST_PHASE_TIMES=<path>         time chosen scheduler / worker functions per decode iteration with perf_counter
                                       (``phase_times``), written to <path>.<pid>.json: a profiler-free diagnostic
DDTREE_TEST_SYNC_WATCH=<path>          the phase times of the loop's steps and the host waits only, plus every
                                       synchronizing CUDA call counted by call site (``phase_times.SyncWatch``);
                                       excludes DDTREE_TEST_PHASE_TIMES
DDTREE_TEST_PHASE_SPLIT=1              with DDTREE_TEST_PHASE_TIMES: only the loop's steps, the host waits and the
                                       once-an-iteration parts of a decode step (``phase_times.SPLIT_LABELS``) are
                                       timed, few enough hooks to compare a speculative iteration with a plain one
DDTREE_TEST_FLOOR_ROUND=1              every decode round replaced by the least a width-0 round can do (``floor_round``:
                                       budget auto, greedy; the drafter's KV is not kept, so it never drafts again)
DDTREE_TEST_COMPILE_LOG=<path>         append a JSON line there after the start-up warm-up of the round's kernels
                                       and after every round that compiled another Triton specialisation of them
Unset (or empty), a variable installs nothing. The oracle and reversed ranks exclude each other.
"""

from __future__ import annotations

import dataclasses
import os

DRAFT_ORACLE = "DDTREE_TEST_DRAFT_ORACLE"
REVERSE_RANKS = "DDTREE_TEST_REVERSE_RANKS"
VERIFY_DUMP = "DDTREE_TEST_VERIFY_DUMP"
VERIFY_DUMP_ROUNDS = "DDTREE_TEST_VERIFY_DUMP_ROUNDS"
CORRUPT_MASK = "DDTREE_TEST_CORRUPT_MASK"
CYCLE_BUDGETS = "DDTREE_TEST_CYCLE_BUDGETS"
HYBRID_FAULT = "DDTREE_TEST_HYBRID_FAULT"
COMPILE_LOG = "DDTREE_TEST_COMPILE_LOG"
PIN_BUDGET = "DDTREE_TEST_PIN_BUDGET"
PHASE_TIMES = "DDTREE_TEST_PHASE_TIMES"
SYNC_WATCH = "DDTREE_TEST_SYNC_WATCH"
FLOOR_ROUND = "DDTREE_TEST_FLOOR_ROUND"
PHASE_SPLIT = "DDTREE_TEST_PHASE_SPLIT"
ALL_VARS = (DRAFT_ORACLE, REVERSE_RANKS, VERIFY_DUMP, VERIFY_DUMP_ROUNDS, CORRUPT_MASK, CYCLE_BUDGETS, HYBRID_FAULT,
            COMPILE_LOG, PIN_BUDGET, PHASE_TIMES, SYNC_WATCH, FLOOR_ROUND, PHASE_SPLIT)
CORRUPT_MODES = ("causal",)
HYBRID_FAULTS = ("chain_commit", "reversed_siblings")
DEFAULT_DUMP_ROUNDS = 4


@dataclasses.dataclass(frozen=True)
class HookEnv:
    draft_oracle: str = ""
    reverse_ranks: bool = False
    verify_dump: str = ""
    verify_dump_rounds: int = DEFAULT_DUMP_ROUNDS
    corrupt_mask: str = ""
    cycle_budgets: bool = False
    hybrid_fault: str = ""
    compile_log: str = ""
    pin_budget: int = -1  # -1: not pinned
    phase_times: str = ""
    sync_watch: str = ""
    floor_round: bool = False
    phase_split: bool = False

    @property
    def any(self) -> bool:
        return bool(self.draft_oracle or self.reverse_ranks or self.verify_dump or self.corrupt_mask
                    or self.cycle_budgets or self.hybrid_fault or self.compile_log or self.pin_budget >= 0
                    or self.phase_times or self.sync_watch or self.floor_round)

    @classmethod
    def from_env(cls, environ=None) -> "HookEnv":
        env = os.environ if environ is None else environ
        get = lambda name: env.get(name, "").strip()  # noqa: E731
        reverse = get(REVERSE_RANKS).lower()
        if reverse not in ("", "0", "1", "true", "false", "yes", "no"):
            raise ValueError(f"{REVERSE_RANKS}={reverse!r}: use 1 or 0.")
        cycle, floor, split = get(CYCLE_BUDGETS), get(FLOOR_ROUND), get(PHASE_SPLIT)
        for var, value in ((CYCLE_BUDGETS, cycle), (FLOOR_ROUND, floor), (PHASE_SPLIT, split)):
            if value not in ("", "0", "1"):
                raise ValueError(f"{var}={value!r}: use 1 or 0.")
        out = cls(draft_oracle=get(DRAFT_ORACLE), reverse_ranks=reverse in ("1", "true", "yes"),
                  verify_dump=get(VERIFY_DUMP), corrupt_mask=get(CORRUPT_MASK), cycle_budgets=cycle == "1",
                  hybrid_fault=get(HYBRID_FAULT), compile_log=get(COMPILE_LOG), phase_times=get(PHASE_TIMES),
                  sync_watch=get(SYNC_WATCH), floor_round=floor == "1", phase_split=split == "1")
        if out.draft_oracle and out.reverse_ranks:
            raise ValueError(f"{DRAFT_ORACLE} and {REVERSE_RANKS} exclude each other.")
        if out.draft_oracle and not os.path.isfile(out.draft_oracle):
            raise ValueError(f"{DRAFT_ORACLE}={out.draft_oracle!r} is not a file.")
        if out.floor_round and (out.draft_oracle or out.reverse_ranks or out.cycle_budgets or out.verify_dump
                                or out.corrupt_mask or out.hybrid_fault):
            raise ValueError(f"{FLOOR_ROUND} replaces the whole round: it excludes the draft, build, width and verify "
                             "hooks.")
        if out.phase_times and out.sync_watch:
            raise ValueError(f"{PHASE_TIMES} and {SYNC_WATCH} exclude each other.")
        if out.phase_split and not out.phase_times:
            raise ValueError(f"{PHASE_SPLIT}=1 chooses which functions {PHASE_TIMES} times: set {PHASE_TIMES} too.")
        if out.corrupt_mask and out.corrupt_mask not in CORRUPT_MODES:
            raise ValueError(f"{CORRUPT_MASK}={out.corrupt_mask!r}: modes are {', '.join(CORRUPT_MODES)}.")
        if out.hybrid_fault and out.hybrid_fault not in HYBRID_FAULTS:
            raise ValueError(f"{HYBRID_FAULT}={out.hybrid_fault!r}: modes are {', '.join(HYBRID_FAULTS)}.")
        pin = get(PIN_BUDGET)
        if pin:
            from sglang_ddtree.config import parse_bucket

            try:
                bucket = parse_bucket(pin)
            except ValueError:
                bucket = None
            if bucket is None or bucket < 0:
                raise ValueError(f"{PIN_BUDGET}={pin!r}: need a bucket (an integer >= 0, or chainN).")
            if out.cycle_budgets:
                raise ValueError(f"{PIN_BUDGET} and {CYCLE_BUDGETS} exclude each other.")
            out = dataclasses.replace(out, pin_budget=bucket)
        for var, path in ((COMPILE_LOG, out.compile_log), (PHASE_TIMES, out.phase_times), (SYNC_WATCH, out.sync_watch)):
            if path and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
                raise ValueError(f"{var}={path!r}: its folder does not exist.")
        rounds = get(VERIFY_DUMP_ROUNDS)
        if rounds:
            if not rounds.isdigit() or int(rounds) < 1:
                raise ValueError(f"{VERIFY_DUMP_ROUNDS}={rounds!r}: need an integer >= 1.")
            out = dataclasses.replace(out, verify_dump_rounds=int(rounds))
        return out
