"""benchmarks/bench_chain.py's own logic, without models: which rows it times (the
test split first, cycled to the count, short and long rows picked by their piece
count for the Chinese chain) and the ratios its table reports (medians over rounds,
a line only for pairs that ran). The timed workers are the benchmark's; this file
runs none of them."""

from __future__ import annotations

import json
import os
import re

from benchmarks import bench_chain
from benchmarks.bench_chain import CHAINS, SEQ, paths, table, write_rows


def write_split(folder: str, split: str, rows: list) -> None:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{split}.tsv"), "w", encoding="utf-8") as f:
        f.writelines(f"{label}\t{text}\n" for label, text in rows)


def read_rows(folder: str) -> tuple:
    with open(os.path.join(folder, "test.tsv"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    with open(os.path.join(folder, "meta.json")) as f:
        return lines, json.load(f)


def test_rows_are_the_test_split_first_then_dev_and_train_cycled_to_the_count(tmp_path):
    p = paths(str(tmp_path), CHAINS["minilm"])
    write_split(p["data"], "train", [("1", "train a"), ("0", "train b")])
    write_split(p["data"], "dev", [("0", "dev a")])
    write_split(p["data"], "test", [("1", "test a"), ("0", "test b")])
    write_split(p["long_data"], "train", [("0", "long train")])
    write_split(p["long_data"], "dev", [])
    write_split(p["long_data"], "test", [("1", "long test")])
    write_rows(p, {"short": 7, "long": 3}, CHAINS["minilm"])

    lines, meta = read_rows(p["rows"]["short"])
    assert lines == ["1\ttest a", "0\ttest b", "0\tdev a", "1\ttrain a", "0\ttrain b",
                     "1\ttest a", "0\ttest b"]
    assert meta == {"rows": 7, "test_rows": 2, "distinct": 5}
    lines, meta = read_rows(p["rows"]["long"])
    assert lines == ["1\tlong test", "0\tlong train", "1\tlong test"]
    assert meta == {"rows": 3, "test_rows": 1, "distinct": 2}

    # Rows already written for these counts are kept as they are; another count remakes them.
    write_split(p["data"], "test", [("1", "changed")])
    write_rows(p, {"short": 7, "long": 3}, CHAINS["minilm"])
    assert read_rows(p["rows"]["short"])[0][0] == "1\ttest a"
    write_rows(p, {"short": 2, "long": 3}, CHAINS["minilm"])
    assert read_rows(p["rows"]["short"]) == (["1\tchanged", "0\tdev a"],
                                             {"rows": 2, "test_rows": 1, "distinct": 2})


def test_the_chinese_chain_picks_short_and_long_rows_by_the_teachers_piece_count(
        tmp_path, monkeypatch):
    chain = CHAINS["chinese"]
    p = paths(str(tmp_path), chain)
    assert p["data"] == p["long_data"]   # one data set: the short and the long reviews

    class OnePiecePerWord:
        tokenizer = type("Tokenizer", (), {"tokenize": staticmethod(str.split)})()

    opened = []

    def open_export(folder, *_):
        opened.append(folder)
        return OnePiecePerWord

    from bert_ad.inference import exported_model
    monkeypatch.setattr(exported_model.ExportedModel, "open", staticmethod(open_export))
    short_text = " ".join(["w"] * chain.short_pieces)
    middle_text = " ".join(["w"] * (chain.short_pieces + 1))
    long_text = " ".join(["w"] * (SEQ - 1))
    edge_text = " ".join(["w"] * (SEQ - 2))   # fills the window exactly: not "longer"
    write_split(p["data"], "train", [("1", short_text), ("0", long_text)])
    write_split(p["data"], "dev", [("0", middle_text), ("1", edge_text)])
    write_split(p["data"], "test", [("0", "a b c"), ("1", long_text + " x")])
    write_rows(p, {"short": 2, "long": 2}, chain)

    assert opened == [bench_chain.export_dir(p["teacher"])]
    lines, meta = read_rows(p["rows"]["short"])
    assert lines == ["0\ta b c", f"1\t{short_text}"]
    assert meta == {"rows": 2, "test_rows": 1, "distinct": 2}
    lines, meta = read_rows(p["rows"]["long"])
    assert lines == [f"1\t{long_text} x", f"0\t{long_text}"]
    assert meta["test_rows"] == 1

    # Nothing stale: the teacher's tokenizer is not opened again.
    write_rows(p, {"short": 2, "long": 2}, chain)
    assert len(opened) == 1


def result(system: str, rate: float, steady: float, accuracy: float = 0.8) -> dict:
    return {"system": system, "rows_per_sec": rate, "steady_rows_per_sec": steady,
            "p50_ms": 1.0, "p99_ms": 2.0, "accuracy": accuracy, "peak_rss_mb": 500.0,
            "loadavg": "0.1", "rows": 4000}


def ratio_lines(text: str) -> dict:
    return {m.group(1): (float(m.group(2)), float(m.group(3))) for m in re.finditer(
        r"\* (.+?): \*\*([0-9.]+)x\*\* \(steady / steady: ([0-9.]+)x\)", text)}


def test_the_tables_ratios_are_medians_over_rounds_and_only_of_pairs_that_ran():
    rounds = [
        {"rows": "short", "results": [result("ours_student", 300.0, 400.0),
                                      result("hf", 40.0, 50.0),
                                      result("ours_teacher", 100.0, 110.0),
                                      result("optimum", 50.0, 60.0)]},
        {"rows": "short", "results": [result("ours_student", 500.0, 600.0),
                                      result("hf", 60.0, 70.0),
                                      result("ours_teacher", 120.0, 130.0),
                                      result("optimum", 70.0, 80.0)]},
        {"rows": "short", "results": [result("ours_student", 350.0, 450.0),
                                      result("hf", 45.0, 55.0),
                                      {"system": "optimum", "error": "failed"}]},
    ]
    text = table(rounds, CHAINS["minilm"])
    # Medians of the three (or two) rounds: student 350 / 450, hf 45 / 55, teacher
    # 110 / 120, optimum 60 / 70.
    assert ratio_lines(text) == {
        "int8 student / HF fp32 (process / steady)":
            (round(350 / 55, 2), round(450 / 55, 2)),
        "int8 teacher / HF fp32 (process / steady)": (round(110 / 55, 2), round(120 / 55, 2)),
        "int8 teacher / optimum int8 (process / process)":
            (round(110 / 60, 2), round(120 / 70, 2))}
    assert "**4,000 movie-review sentences" in text
    assert "cut at 128" not in text   # no long rounds: no table for them

    # A run of the teacher pair only (--pairs teacher): no line that needs HF.
    teacher_only = [{"rows": "long", "results": [result("ours_teacher", 30.0, 32.0),
                                                 result("optimum", 20.0, 25.0)]}]
    text = table(teacher_only, CHAINS["chinese"])
    assert ratio_lines(text) == {
        "int8 teacher / optimum int8 (process / process)": (1.5, round(32 / 25, 2))}
    assert "**4,000 Chinese reviews longer than 126 pieces, cut at 128**" in text

