"""benchmark/gc_log_summary.py: totals of SGLang's GC-logger lines per generation."""

import importlib.util
import os

_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "benchmark", "gc_log_summary.py")
spec = importlib.util.spec_from_file_location("gc_log_summary", _PATH)
gls = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gls)


def _end(t, gen, dur):
    return (f"[2026-12-02 00:00:00] GC end: Time {t} | Generation {gen} | Duration: {dur:.4f}s | Collected: 3 | "
            f"Uncollectable: 0 ")


def test_totals_per_generation_and_share_of_the_span(tmp_path, capsys):
    lines = ["[2026-12-02 00:00:00] GC start: Time 100.0 | Generation 0", _end(100.0, 0, 0.001),
             "Decode batch, #running-req: 1", _end(101.0, 0, 0.002), _end(102.0, 2, 0.0970),
             _end(104.0, 0, 0.0)]
    s = gls.summarise(lines)
    assert s["generations"]["0"] == {"collections": 3, "total_s": 0.003, "max_s": 0.002}
    assert s["generations"]["2"]["collections"] == 1 and s["total_s"] == 0.1 and s["span_s"] == 4.0
    assert s["gc_share"] == 0.025
    log = tmp_path / "engine_0.log"
    log.write_text("\n".join(lines) + "\n")
    empty = tmp_path / "engine_1.log"
    empty.write_text("no gc here\n")
    assert gls.main([str(log), str(empty), "--json", str(tmp_path / "gc.json")]) == 0
    out = capsys.readouterr().out
    assert "gen 0: 3 x, 3.0 ms (max 2.0)" in out and "2.50 % of 4.0 s" in out and "no GC lines" in out
    assert gls.summarise([])["gc_share"] is None
