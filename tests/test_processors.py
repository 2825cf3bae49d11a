"""Task registry and file reading: every layout from fixture files, every error by message."""

from __future__ import annotations

import os

import pytest

from bert_ad.data import task_specs
from bert_ad.errors import UserError
from bert_ad.data.processors import (InputExample, get_task, label_list,
                                load_label_list, read_examples, save_label_list)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write(directory, name: str, text: str, encoding: str = "utf-8") -> str:
    path = os.path.join(str(directory), name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding=encoding, newline="") as f:
        f.write(text)
    return path


def fields(examples):
    return [(e.guid, e.text_a, e.text_b, e.label, e.line) for e in examples]


# ---------------------------------------------------------------------------
# GLUE layouts.


def test_cola_train_has_no_header_and_test_has_index_header(tmp_path):
    write(tmp_path, "train.tsv",
          "gj04\t1\t\tOur friends won't buy this analysis.\n"
          "gj04\t0\t*\tThey drank the pub.\n")
    write(tmp_path, "test.tsv", "index\tsentence\n0\tBill whistled past the house.\n"
          "1\tThe car honked its way.\n")
    spec = get_task("cola")
    assert fields(read_examples(spec, str(tmp_path), "train")) == [
        ("train-0", "Our friends won't buy this analysis.", None, "1", 1),
        ("train-1", "They drank the pub.", None, "0", 2)]
    assert fields(read_examples(spec, str(tmp_path), "test")) == [
        ("0", "Bill whistled past the house.", None, None, 2),
        ("1", "The car honked its way.", None, None, 3)]


def test_sst2_and_its_alias(tmp_path):
    write(tmp_path, "train.tsv", "sentence\tlabel\nhide new secretions \t0\n"
          "the greatest musicians \t1\n")
    write(tmp_path, "test.tsv", "index\tsentence\n0\tuneasy mishmash of styles\n")
    for name in ("sst-2", "SST2"):
        spec = get_task(name)
        assert spec.name == "sst-2"
        assert fields(read_examples(spec, str(tmp_path), "train")) == [
            ("train-0", "hide new secretions", None, "0", 2),
            ("train-1", "the greatest musicians", None, "1", 3)]
        assert fields(read_examples(spec, str(tmp_path), "test")) == [
            ("0", "uneasy mishmash of styles", None, None, 2)]


def test_mrpc_pairs_and_unlabelled_test(tmp_path):
    write(tmp_path, "dev.tsv",
          "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\r\n"
          "1\t1355540\t1355592\tHe said the foodservice pie.\tThe foodservice pie.\r\n")
    write(tmp_path, "test.tsv",
          "index\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
          "0\t1089874\t1089925\tPCCW 's chief.\tCommon Stock.\n")
    spec = get_task("mrpc")
    assert fields(read_examples(spec, str(tmp_path), "dev")) == [
        ("dev-0", "He said the foodservice pie.", "The foodservice pie.", "1", 2)]
    assert fields(read_examples(spec, str(tmp_path), "test")) == [
        ("0", "PCCW 's chief.", "Common Stock.", None, 2)]


def test_qqp_train_and_test(tmp_path):
    write(tmp_path, "train.tsv",
          "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
          "133273\t213221\t213222\tHow is the life?\tHow is life?\t0\n")
    write(tmp_path, "test.tsv", "id\tquestion1\tquestion2\n"
          "0\tWould the idea work?\tWhy did it work?\n")
    spec = get_task("qqp")
    assert fields(read_examples(spec, str(tmp_path), "train")) == [
        ("133273", "How is the life?", "How is life?", "0", 2)]
    assert fields(read_examples(spec, str(tmp_path), "test")) == [
        ("0", "Would the idea work?", "Why did it work?", None, 2)]


def _mnli_row(index: int, s1: str, s2: str, labels) -> str:
    parse = ["( x )"] * 4
    return "\t".join([str(index), "31193", f"{index}n", "government"] + parse
                     + [s1, s2] + list(labels)) + "\n"


def test_mnli_gold_label_is_last_column_in_each_file(tmp_path):
    header = "\t".join(["index", "promptID", "pairID", "genre", "b1", "b2",
                        "p1", "p2", "sentence1", "sentence2"])
    write(tmp_path, "train.tsv", header + "\tlabel1\tgold_label\n"
          + _mnli_row(0, "Conceptually cream.", "Product and geography.",
                      ["neutral", "neutral"]))
    write(tmp_path, "dev_matched.tsv", header + "\tl1\tl2\tl3\tl4\tl5\tgold_label\n"
          + _mnli_row(7, "The new rights.", "Everyone likes it.",
                      ["neutral", "entailment", "neutral", "neutral", "neutral",
                       "entailment"]))
    write(tmp_path, "test_matched.tsv", header + "\n"
          + _mnli_row(9, "Hierbas, ans seco.", "It is a drink.", []))
    spec = get_task("mnli")
    assert fields(read_examples(spec, str(tmp_path), "train")) == [
        ("0", "Conceptually cream.", "Product and geography.", "neutral", 2)]
    assert fields(read_examples(spec, str(tmp_path), "dev")) == [
        ("7", "The new rights.", "Everyone likes it.", "entailment", 2)]
    assert fields(read_examples(spec, str(tmp_path), "test")) == [
        ("9", "Hierbas, ans seco.", "It is a drink.", None, 2)]


@pytest.mark.parametrize("name,label", [("qnli", "not_entailment"),
                                        ("rte", "entailment")])
def test_qnli_rte(tmp_path, name, label):
    write(tmp_path, "train.tsv", "index\tquestion\tsentence\tlabel\n"
          f"0\tWhat came into force?\tThe law came.\t{label}\n")
    write(tmp_path, "test.tsv", "index\tquestion\tsentence\n"
          "0\tWhat organization?\tThe ECB.\n")
    spec = get_task(name)
    assert fields(read_examples(spec, str(tmp_path), "train")) == [
        ("0", "What came into force?", "The law came.", label, 2)]
    assert fields(read_examples(spec, str(tmp_path), "test")) == [
        ("0", "What organization?", "The ECB.", None, 2)]


def test_xnli_train_maps_contradictory_and_dev_reads_columns_6_7(tmp_path):
    write(tmp_path, "multinli/multinli.train.en.tsv",
          "premise\thypo\tlabel\nYou know during the season.\tYou lose.\tcontradictory\n"
          "One of our number.\tA member.\tentailment\n")
    header = ("language\tgold_label\tsentence1_binary_parse\tsentence2_binary_parse\t"
              "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tpromptID\tpairID\n")
    write(tmp_path, "xnli.dev.tsv", header
          + "zh\tneutral\t(x)\t(y)\t(X)\t(Y)\t他说，妈妈，我回来了。\t校车把他放下了。\t1\t1\n"
          + "en\tcontradiction\t(x)\t(y)\t(X)\t(Y)\tAnd he said.\tHe didn't say.\t1\t2\n")
    spec = get_task("xnli")
    assert [(e.text_a, e.text_b, e.label) for e in
            read_examples(spec, str(tmp_path), "train")] == [
        ("You know during the season.", "You lose.", "contradiction"),
        ("One of our number.", "A member.", "entailment")]
    assert fields(read_examples(spec, str(tmp_path), "dev")) == [
        ("dev-0", "他说，妈妈，我回来了。", "校车把他放下了。", "neutral", 2),
        ("dev-1", "And he said.", "He didn't say.", "contradiction", 3)]


# ---------------------------------------------------------------------------
# The predecessor's tasks and the generic ones.


def test_high_level_four_columns(tmp_path):
    write(tmp_path, "train_without_content_0515.txt",
          "1001\tfinance\tad\t低息贷款 当天放款\n1002\tsports\tnormal\t湖人击败勇士\n")
    write(tmp_path, "test_without_content_0515.txt", "2001\tauto\tnormal\t新车上市\n")
    spec = get_task("high_level")
    train = read_examples(spec, str(tmp_path), "train")
    assert fields(train) == [("1001", "低息贷款 当天放款", None, "ad", 1),
                             ("1002", "湖人击败勇士", None, "normal", 2)]
    assert label_list(spec, train) == ["ad", "normal"]
    assert fields(read_examples(spec, str(tmp_path), "dev")) == [
        ("2001", "新车上市", None, "normal", 1)]


def test_toutiao_layout_with_and_without_keywords(tmp_path):
    write(tmp_path, "train.txt",
          "6552368441838272771_!_101_!_news_culture_!_发酵床的垫料种类有哪些？_!_\n"
          "6553092950257763332_!_102_!_news_entertainment_!_谁是宋慧乔？_!_宋仲基,宋慧乔\n"
          "6553093000000000000_!_103_!_news_sports_!_湖人夺冠\n")
    examples = read_examples(get_task("toutiao"), str(tmp_path), "train")
    assert fields(examples) == [
        ("6552368441838272771", "发酵床的垫料种类有哪些？", None, "101", 1),
        ("6553092950257763332", "谁是宋慧乔？", None, "102", 2),
        ("6553093000000000000", "湖人夺冠", None, "103", 3)]


def test_label_text_tasks_read_prepared_layout(tmp_path):
    write(tmp_path, "train.tsv", "1\tgreat phone\n0\tbroke in a week\n\n")
    for name in ("title_audit", "abuse", "doc_lv1", "sentiment", "wos5736",
                 "wos46985", "ad", "tsv"):
        examples = read_examples(get_task(name), str(tmp_path), "train")
        assert fields(examples) == [("train-0", "great phone", None, "1", 1),
                                    ("train-1", "broke in a week", None, "0", 2)]


def test_csv_quotes_commas_and_multiline_records(tmp_path):
    write(tmp_path, "train.csv",
          '\ufeff"pos","fun, fast and ""loud"""\r\n'
          'neg,"spans\r\ntwo lines"\r\n'
          'neg,plain text\r\n')
    examples = read_examples(get_task("csv"), str(tmp_path), "train")
    assert fields(examples) == [("train-0", 'fun, fast and "loud"', None, "pos", 1),
                                ("train-1", "spans\r\ntwo lines", None, "neg", 2),
                                ("train-2", "plain text", None, "neg", 4)]


def test_tsv_does_not_treat_quotes_or_lone_cr_specially(tmp_path):
    # Google's readers use quotechar=None; "\r" alone is not a line end.
    write(tmp_path, "train.tsv", '1\t"quoted, kept"\n0\tcarriage\rreturn\r\n')
    examples = read_examples(get_task("tsv"), str(tmp_path), "train")
    assert [(e.text_a, e.line) for e in examples] == [
        ('"quoted, kept"', 1), ("carriage\rreturn", 2)]


def test_predict_file_overrides_the_split_file(tmp_path):
    path = write(tmp_path, "elsewhere.tsv", "index\tsentence\n5\tnew text\n")
    examples = read_examples(get_task("sst-2"), "/nonexistent", "test", path=path)
    assert fields(examples) == [("5", "new text", None, None, 2)]
    assert examples[0].source == path


def test_sample_sentiment_data_reads_as_sentiment_task():
    data = os.path.join(REPO, "data", "sample_sentiment")
    spec = get_task("sentiment")
    train = read_examples(spec, data, "train")
    labels = label_list(spec, train)
    assert labels == ["0", "1"]
    sizes = {s: len(read_examples(spec, data, s, labels=labels))
             for s in ("train", "dev", "test")}
    assert sizes == {"train": 40, "dev": 16, "test": 16}
    assert sum(e.label == "1" for e in train) == 20


# ---------------------------------------------------------------------------
# Errors.


def test_missing_file_names_the_flag(tmp_path):
    spec = get_task("sentiment")
    with pytest.raises(UserError, match=r"train file '.*train\.tsv' does not exist; "
                       r"set --data_dir or --train_file"):
        read_examples(spec, str(tmp_path), "train")
    with pytest.raises(UserError, match="set --data_dir or --dev_file"):
        read_examples(spec, str(tmp_path), "dev")
    with pytest.raises(UserError, match=r"predict file '.*nope\.tsv' does not "
                       r"exist; set --predict_file$"):
        read_examples(spec, str(tmp_path), "test", path=str(tmp_path / "nope.tsv"))
    os.mkdir(str(tmp_path / "test.tsv"))
    with pytest.raises(UserError, match="is not a readable file; set --data_dir "
                       "or --test_file"):
        read_examples(spec, str(tmp_path), "test")


def test_empty_and_header_only_files(tmp_path):
    write(tmp_path, "train.tsv", "\n\n")
    with pytest.raises(UserError, match=r"train file '.*train\.tsv' has no "
                       r"examples; check --data_dir and --train_file"):
        read_examples(get_task("sentiment"), str(tmp_path), "train")
    write(tmp_path, "train.tsv", "sentence\tlabel\n")
    with pytest.raises(UserError, match="has no examples after 1 header line"):
        read_examples(get_task("sst-2"), str(tmp_path), "train")


def test_wrong_column_count(tmp_path):
    lines = ["src\t1\t\tgood sentence."] * 16 + ["src\t1\tonly three"]
    write(tmp_path, "train.tsv", "\n".join(lines) + "\n")
    with pytest.raises(UserError) as e:
        read_examples(get_task("cola"), str(tmp_path), "train")
    assert str(e.value) == (f"{tmp_path / 'train.tsv'} line 17: expected 4 "
                            f"tab-separated columns, found 3")
    write(tmp_path, "train.tsv", "1\tthe text\twith a tab\n")
    with pytest.raises(UserError, match=r"train\.tsv line 1: expected 2 "
                       r"tab-separated columns, found 3"):
        read_examples(get_task("sentiment"), str(tmp_path), "train")
    write(tmp_path, "train.txt", "1_!_101_!_news\n")
    with pytest.raises(UserError, match=r"train\.txt line 1: expected at least 4 "
                       r"'_!_'-separated columns, found 3"):
        read_examples(get_task("toutiao"), str(tmp_path), "train")


def test_label_not_in_fixed_list(tmp_path):
    write(tmp_path, "dev.tsv", "sentence\tlabel\na\t0\nb\t1\nc\t1\nd\tx\n")
    with pytest.raises(UserError) as e:
        read_examples(get_task("sst-2"), str(tmp_path), "dev")
    assert str(e.value) == (f"{tmp_path / 'dev.tsv'} line 5: label 'x' is not one "
                            f"of ['0', '1']; set --labels or fix the file")


def test_label_not_in_training_list_passed_in(tmp_path):
    write(tmp_path, "dev.tsv", "pos\tok\nneutral\tmeh\n")
    spec = get_task("sentiment")
    assert len(read_examples(spec, str(tmp_path), "dev")) == 2  # nothing to check against
    with pytest.raises(UserError, match=r"dev\.tsv line 2: label 'neutral' is not "
                       r"one of \['neg', 'pos'\]; set --labels or fix the file"):
        read_examples(spec, str(tmp_path), "dev", labels=["neg", "pos"])


def test_empty_text_and_empty_label(tmp_path):
    write(tmp_path, "train.tsv", "1\tfine\n0\t   \n")
    with pytest.raises(UserError, match=r"train\.tsv line 2: empty text in column "
                       r"1 \(text_a\)"):
        read_examples(get_task("sentiment"), str(tmp_path), "train")
    write(tmp_path, "train.tsv", "index\tquestion\tsentence\tlabel\n0\tq\t\tentailment\n")
    with pytest.raises(UserError, match=r"line 2: empty text in column 2 \(text_b\)"):
        read_examples(get_task("rte"), str(tmp_path), "train")
    write(tmp_path, "train.tsv", "1\tfine\n \tno label\n")
    with pytest.raises(UserError, match=r"line 2: empty label in column 0"):
        read_examples(get_task("sentiment"), str(tmp_path), "train")


def test_bad_encoding_and_bad_csv_quoting(tmp_path):
    with open(str(tmp_path / "train.tsv"), "wb") as f:
        f.write(b"1\tok\n0\t\xff\xfe broken\n")
    with pytest.raises(UserError, match=r"train\.tsv line 2: not valid UTF-8"):
        read_examples(get_task("sentiment"), str(tmp_path), "train")
    write(tmp_path, "train.csv", 'pos,fine\nneg,"open"quote\n')
    with pytest.raises(UserError, match=r"train\.csv line 2: bad csv"):
        read_examples(get_task("csv"), str(tmp_path), "train")


def test_unknown_task_lists_known_names():
    with pytest.raises(UserError) as e:
        get_task("glue-foo")
    message = str(e.value)
    assert message.startswith("unknown --task_name 'glue-foo'; known tasks: ")
    for name in ("cola", "sst-2", "sst2", "mrpc", "qqp", "mnli", "qnli", "rte",
                 "xnli", "tsv", "csv", "high_level", "title_audit", "abuse",
                 "toutiao", "doc_lv1", "sentiment", "wos5736", "wos46985", "ad"):
        assert name in task_specs.TASKS
        assert f" {name}," in message or message.endswith(f" {name}")


@pytest.mark.parametrize("overrides,message", [
    ({"label_column": "second"}, "--label_column must be a column number"),
    ({"text_a_column": "none"}, "--text_a_column must be a column number"),
    ({"has_header": "maybe"}, "--has_header must be true or false"),
    ({"labels": "a,,b"}, "--labels must be a comma-separated list"),
    ({"labels": "a,b,a"}, "--labels lists 'a' more than once"),
])
def test_bad_override_values(overrides, message):
    with pytest.raises(UserError, match=message):
        get_task("tsv", overrides)


# ---------------------------------------------------------------------------
# Flag overrides.


def test_overrides_columns_files_header_delimiter(tmp_path):
    write(tmp_path, "my_train.txt", "id|text|other|label\n7|first|x|b\n8|second|y|a\n")
    spec = get_task("tsv", {"train_file": "my_train.txt", "delimiter": "|",
                            "has_header": "true", "label_column": "3",
                            "text_a_column": 1, "text_b_column": "2",
                            "dev_file": None, "labels": ""})
    assert spec.files["train"] == "my_train.txt"
    assert fields(read_examples(spec, str(tmp_path), "train")) == [
        ("train-0", "first", "x", "b", 2), ("train-1", "second", "y", "a", 3)]
    assert label_list(spec, read_examples(spec, str(tmp_path), "train")) == ["a", "b"]


def test_override_delimiter_names_and_fixed_labels(tmp_path):
    write(tmp_path, "train.tsv", "neg,\"a, b\"\npos,c\n")
    spec = get_task("sentiment", {"delimiter": "comma", "labels": "pos, neg"})
    examples = read_examples(spec, str(tmp_path), "train")
    assert [(e.label, e.text_a) for e in examples] == [("neg", "a, b"), ("pos", "c")]
    assert label_list(spec, examples) == ["pos", "neg"]  # --labels order kept
    assert get_task("csv", {"delimiter": "tab"}).delimiter == "\t"
    assert get_task("csv", {"delimiter": "\\t"}).delimiter == "\t"


def test_override_header_wins_over_split_layout_and_label_column_keeps_test_unlabelled():
    spec = get_task("cola", {"has_header": False, "label_column": 2})
    assert [spec.for_split(s).header_lines for s in ("train", "dev", "test")] == [0, 0, 0]
    assert spec.for_split("train").label_column == 2
    assert spec.for_split("test").label_column is None
    unlabelled = get_task("sentiment", {"label_column": "none"})
    assert [unlabelled.for_split(s).label_column for s in ("train", "test")] == [None, None]


def test_override_columns_relax_exact_count_only_when_needed(tmp_path):
    # label<TAB>text is exactly 2 columns; text in column 2 needs 3.
    assert get_task("sentiment", {"text_a_column": 1}).for_split("train").num_columns == 2
    spec = get_task("sentiment", {"text_a_column": 2})
    assert spec.for_split("train").num_columns is None
    write(tmp_path, "train.tsv", "1\tignored\tused\textra\n")
    assert [e.text_a for e in read_examples(spec, str(tmp_path), "train")] == ["used"]
    write(tmp_path, "train.tsv", "1\tonly two\n")
    with pytest.raises(UserError, match="expected at least 3 tab-separated columns, found 2"):
        read_examples(spec, str(tmp_path), "train")


def test_get_task_returns_a_copy_and_registry_is_consistent():
    spec = get_task("mrpc", {"train_file": "other.tsv"})
    assert spec.files["train"] == "other.tsv"
    assert task_specs.TASKS["mrpc"].files["train"] == "train.tsv"
    assert get_task("mrpc").files["train"] == "train.tsv"
    for name, task in task_specs.TASKS.items():
        for split in task_specs.SPLITS:
            flat = task.for_split(split)
            assert task.files[split], name
            if flat.num_columns is not None:
                assert flat.columns_needed() <= flat.num_columns, (name, split)


# ---------------------------------------------------------------------------
# Label lists.


def _examples(labels):
    return [InputExample(f"train-{i}", "t", None, x, "train.tsv", i + 1)
            for i, x in enumerate(labels)]


def test_label_list_fixed_or_sorted_from_training():
    assert label_list(get_task("mnli"), _examples(["neutral"])) == [
        "contradiction", "entailment", "neutral"]
    assert label_list(get_task("sentiment"), _examples(["b", "10", "2", "b"])) == [
        "10", "2", "b"]
    with pytest.raises(UserError, match=r"train\.tsv has 1 distinct label\(s\) "
                       r"\['b'\]; a classifier needs at least 2"):
        label_list(get_task("sentiment"), _examples(["b", "b"]))


def test_save_and_load_label_list(tmp_path, umask_022):
    path = str(tmp_path / "run" / "labels.txt")
    save_label_list(path, ["neg", "pos", "中性"])
    with open(path, encoding="utf-8") as f:
        assert f.read() == "neg\npos\n中性\n"
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"  # not mkstemp's 0600
    assert load_label_list(path) == ["neg", "pos", "中性"]
    assert os.listdir(str(tmp_path / "run")) == ["labels.txt"]  # no temp file left
    save_label_list(path, ["a", "b"])  # replaces
    assert load_label_list(path) == ["a", "b"]
    write(tmp_path, "crlf.txt", "\ufeffx\r\ny\r\n\r\n")
    assert load_label_list(str(tmp_path / "crlf.txt")) == ["x", "y"]
    with pytest.raises(ValueError):
        save_label_list(path, ["a", "a"])


def test_load_label_list_errors(tmp_path):
    with pytest.raises(UserError, match=r"label list '.*labels\.txt' does not "
                       r"exist; train into this --output_dir first or set --labels"):
        load_label_list(str(tmp_path / "labels.txt"))
    write(tmp_path, "labels.txt", "\n")
    with pytest.raises(UserError, match="is empty"):
        load_label_list(str(tmp_path / "labels.txt"))
    write(tmp_path, "labels.txt", "a\n\nb\n")
    with pytest.raises(UserError, match=r"labels\.txt line 2: empty label"):
        load_label_list(str(tmp_path / "labels.txt"))
    write(tmp_path, "labels.txt", "a\nb\na\n")
    with pytest.raises(UserError, match="repeats a label"):
        load_label_list(str(tmp_path / "labels.txt"))
