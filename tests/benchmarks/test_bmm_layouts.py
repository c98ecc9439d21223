"""benchmarks/bmm_layouts.py: every shape timed in the four operand layouts, the operands built in the layout they
name, the table appended to a results file, and a bad option refused in one line."""
from tests.harness import load_benchmark


def test_operands_have_the_layout_they_name():
    bench = load_benchmark("bmm_layouts")
    x, y = bench.operands(2, 3, 5, 4, "tn")
    assert tuple(x.shape) == (2, 3, 5) and x.stride() == (15, 1, 3)
    assert tuple(y.shape) == (2, 5, 4) and y.stride() == (20, 4, 1)
    x, y = bench.operands(2, 3, 5, 4, "nt")
    assert x.stride() == (15, 5, 1) and y.stride() == (20, 1, 5)


def test_the_table_holds_every_shape_and_layout(tmp_path, capsys):
    bench = load_benchmark("bmm_layouts")
    out = tmp_path / "layouts.md"
    assert bench.main(["--out", str(out), "--windows", "1", "--calls", "2"]) == 0
    text = out.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) == len(bench.SHAPES)
    assert all(float(row.split("|")[-2]) > 0 for row in rows)   # tn / nn: a ratio of two timed medians
    assert "Host: " in text and "cores (lscpu)" in text
    assert bench.main(["--calls", "0"]) == 2
    assert "must be at least 1" in capsys.readouterr().err
