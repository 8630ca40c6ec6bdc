"""benchmark/phase_times_summary.py: the ``+phases`` engines' files side by side, the first rank per config."""

import json

from _scripts import cli, load

summary = load("phase_times_summary")


def _write(folder, name, pid, period, targets, decode=10):
    data = {"format": 1, "pid": pid, "iterations": {"decode": decode, "extend": 1},
            "period_us": {"count": decode - 1, "median": period, "mean": period},
            "loop_steps_us_per_decode_iteration": sum(us for k, (c, us) in targets.items() if k == "run_batch"),
            "span_us": period * decode, "transitions_us": {"decode->decode": period * (decode - 1)},
            "targets": {k: {"calls": c, "total_us": us * decode, "us_per_decode_iteration": us}
                        for k, (c, us) in targets.items()}}
    (folder / f"{name}.{pid}.json").write_text(json.dumps(data))


def test_table_and_json(tmp_path):
    _write(tmp_path, "plain_fa3_phases", 300, 1500.0, {"run_batch": (10, 900.0), "Event.synchronize": (10, 50.0)})
    _write(tmp_path, "ddtree_auto_8_fa3_pin0_phases", 400, 3000.0,
           {"run_batch": (10, 1900.0), "_decode_round": (10, 1700.0)})
    _write(tmp_path, "ddtree_auto_8_fa3_pin0_phases", 401, 9.0, {"run_batch": (10, 1.0)})  # a second rank: not shown
    (tmp_path / "notes.json").write_text("{}")  # not an engine's file
    runs = summary.load(str(tmp_path))
    assert sorted(runs) == ["ddtree_auto_8_fa3_pin0_phases", "plain_fa3_phases"]
    assert runs["ddtree_auto_8_fa3_pin0_phases"]["pid"] == 400
    text = summary.table(runs)
    lines = {line.split()[0]: line for line in text.splitlines()[1:]}
    assert "1500.0" in lines["period"] and "3000.0" in lines["period"]
    assert "decode->decode" in text and "27000" in text  # the width-0 engine's periods, 3000 x 9
    assert "(sum)" in text and "900.0" in [line for line in text.splitlines() if line.startswith("loop steps")][0]
    assert "900.0 (1x)" in lines["run_batch"] and "1900.0 (1x)" in lines["run_batch"]
    assert list(runs) == ["ddtree_auto_8_fa3_pin0_phases", "plain_fa3_phases"]  # the columns' order
    assert lines["_decode_round"].split()[1:] == ["1700.0", "(1x)", "-"]  # plain decoding has no round of ours
    out = tmp_path / "out.json"
    done = cli("phase_times_summary", str(tmp_path), "--json", str(out))
    assert done.returncode == 0, done.stderr
    assert "Event.synchronize" in done.stdout and json.loads(out.read_text()).keys() == runs.keys()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli("phase_times_summary", str(empty)).returncode == 1


def test_sync_watch_rows(tmp_path):
    """A ``+syncwatch`` engine's file adds its synchronizing calls per watched iteration and its top call sites."""
    _write(tmp_path, "plain_fa3_syncwatch", 300, 1500.0, {"run_batch": (10, 900.0)})
    path = tmp_path / "plain_fa3_syncwatch.300.json"
    data = json.loads(path.read_text())
    data["sync_watch"] = {"after_decode_iterations": 32, "watched_decode_iterations": 4, "syncs": 6,
                          "allocator": {"num_device_alloc": 0}, "sites": {"a.py:1 f": 4, "b.py:2 g": 2}}
    path.write_text(json.dumps(data))
    _write(tmp_path, "dflash_fa3_phases", 400, 2000.0, {"run_batch": (10, 1000.0)})  # no watch: no rows
    text = summary.table(summary.load(str(tmp_path)))
    assert "plain_fa3_syncwatch: 6 synchronizing CUDA calls in 4 watched decode iterations (1.50 per iteration)" in text
    assert "1.00/it  a.py:1 f" in text and "0.50/it  b.py:2 g" in text
    assert "dflash_fa3_phases:" not in text


def test_other_mode_rows(tmp_path):
    """A file with ``other_modes`` (the prefill iterations' steps) adds each config's largest ones per iteration."""
    _write(tmp_path, "ddtree_auto_8_fa3_pin0_phases", 400, 3000.0, {"run_batch": (10, 1900.0)})
    path = tmp_path / "ddtree_auto_8_fa3_pin0_phases.400.json"
    data = json.loads(path.read_text())
    data["iterations"]["extend"] = 4
    data["other_modes"] = {"extend": {"run_batch": {"calls": 4, "total_us": 400000.0, "us_per_iteration": 100000.0,
                                                    "max_us": 250000.0}}}
    path.write_text(json.dumps(data))
    _write(tmp_path, "plain_fa3_phases", 300, 1500.0, {"run_batch": (10, 900.0)})  # an older file: no rows
    text = summary.table(summary.load(str(tmp_path)))
    assert "ddtree_auto_8_fa3_pin0_phases: 4 extend iterations" in text
    assert [line.split() for line in text.splitlines() if line.startswith("  run_batch")] == \
        [["run_batch", "100000.0", "(250000.0)"]]
    assert "plain_fa3_phases: " not in text
