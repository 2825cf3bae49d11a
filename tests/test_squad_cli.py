"""run_squad_mgpu.py end to end on a tiny model, and its bad input.

* English SQuAD v1.1 sample: train on 2 towers, export, predict and evaluate
  in one run; the predict windows do not divide by batch x towers, yet
  predictions.json answers every question, in file order, with text of its
  own context; nbest_predictions.json leads with it; eval_results.txt equals
  our metric on predictions.json. Scored again from the export alone on 1
  tower with another batch size: the same answers.
* Chinese CMRC-style sample made v2.0 (unanswerable questions added), with
  the real Chinese vocab: null_odds.json, "" where the null odds exceed the
  threshold, CMRC2018 scoring and the no-answer split; evaluated during
  training too, the best checkpoint kept by F1.
* --null_score_diff_threshold=auto on the v2.0 checkpoint: the dev file's
  best-F1 threshold (no other threshold of its null odds scores higher), its
  predictions, eval_results.txt at it, recorded beside the checkpoint and in
  export.json; predicting from the export or the checkpoint later answers
  with it unless the flag is given; a threshold far from the best warns.
* Bad input (the launcher's cli in this process): one `error:` line naming the
  file and the question id (or the flag), exit 2, the output folder unchanged.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from bert_ad.cli import squad as squad_cli
from bert_ad.files import read_key_values
from bert_ad.evaluation import ANSWER_SETTINGS_FILE
from bert_ad.metrics.squad import score_answers
from bert_ad.parallel.checkpoints import resolve_checkpoint
from bert_ad.inference.layout import read_metadata

from helpers import (REPO, TINY_CONFIG, Run, flag_args, run_bad_inputs, run_cli_in_process,
                     run_launcher,
                     tiny_model)

SAMPLES = os.path.join(REPO, "data", "sample_squad")
EN, ZH = os.path.join(SAMPLES, "en-v1.1.json"), os.path.join(SAMPLES, "zh-cmrc2018.json")
LAUNCHER = "run_squad_mgpu.py"
TOWERS, PREDICT_BATCH = 2, 3
IMPOSSIBLE = ["长江的水是什么颜色的？", "故宫有多少个房间？", "大熊猫的寿命有多长？"]


def load(path: str):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_json(path: str, value) -> str:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, ensure_ascii=False)
    return path


def questions_of(squad: dict) -> list:
    """(id, context, [answer texts]) in file order."""
    return [(q["id"], p["context"], [a["text"] for a in q["answers"]])
            for article in squad["data"] for p in article["paragraphs"] for q in p["qas"]]


def texts_of(squad: dict) -> list:
    return [t for _, context, answers in questions_of(squad) for t in [context] + answers] + [
        q["question"] for a in squad["data"] for p in a["paragraphs"] for q in p["qas"]]


class Setup:
    """Paths of the tiny models and data."""


@pytest.fixture(scope="module")
def setup(tmp_path_factory, chinese_vocab) -> Setup:
    s = Setup()
    s.root = str(tmp_path_factory.mktemp("squad"))
    s.en_model = tiny_model(os.path.join(s.root, "en_model"), texts_of(load(EN)),
                            max_position_embeddings=64)
    s.zh_config = os.path.join(s.root, "zh_bert_config.json")
    write_json(s.zh_config, dict(load(TINY_CONFIG), vocab_size=21128,
                                 max_position_embeddings=64))
    s.chinese_vocab = chinese_vocab
    # The Chinese sample as v2.0: an unanswerable question in every paragraph.
    zh = load(ZH)
    for index, (article, question) in enumerate(zip(zh["data"], IMPOSSIBLE)):
        paragraph = article["paragraphs"][0]
        for qa in paragraph["qas"]:
            qa["is_impossible"] = False
        paragraph["qas"].append({"question": question, "id": f"IMPOSSIBLE_{index}",
                                 "answers": [], "is_impossible": True})
    s.zh_v2 = write_json(os.path.join(s.root, "zh-v2.json"), zh)
    s.common = {"max_seq_length": 48, "doc_stride": 16, "max_query_length": 16,
                "n_gpus": TOWERS, "train_batch_size": 4, "predict_batch_size": PREDICT_BATCH,
                "eval_batch_size": PREDICT_BATCH, "learning_rate": 1e-3,
                "num_train_epochs": 3, "seed": 3}
    return s


def windows_logged(stderr: str, split: str) -> int:
    match = re.search(split + r": (\d+) questions -> (\d+) windows", stderr)
    assert match, stderr[-3000:]
    return int(match.group(2))


@pytest.fixture(scope="module")
def trained(setup):
    """{"en": (output_dir, run), "zh": ...}: trained on 2 towers, predicted, evaluated.
    The English run as a user types it (a subprocess, in a thread), the Chinese one
    meanwhile through the launcher's cli in this process (no second TensorFlow import)."""
    s = setup
    en = dict(s.common, vocab_file=s.en_model.vocab_file,
              bert_config_file=s.en_model.config_file, train_file=EN, predict_file=EN,
              output_dir=os.path.join(s.root, "en"), do_train=True, do_predict=True,
              do_eval=True, do_export=True)
    zh = dict(s.common, vocab_file=s.chinese_vocab, bert_config_file=s.zh_config,
              train_file=s.zh_v2, predict_file=s.zh_v2, output_dir=os.path.join(s.root, "zh"),
              do_train=True, do_predict=True, do_eval=True, version_2_with_negative=True,
              eval_every_steps=10, keep_best_checkpoint=True,
              # Google's threshold, given: unset, it would be chosen on the training
              # questions.
              null_score_diff_threshold=0.0)
    with ThreadPoolExecutor(1) as pool:
        launched = pool.submit(run_launcher, [LAUNCHER] + flag_args(en))
        zh_run = run_in_process([LAUNCHER] + flag_args(zh))
        en_run = launched.result()
    assert zh_run.returncode == 0, zh_run.describe()
    return {"en": (en["output_dir"], en_run.check()), "zh": (zh["output_dir"], zh_run)}


def check_predictions(output_dir: str, squad: dict) -> dict:
    """predictions.json: every question, in file order, text of its own context."""
    predictions = load(os.path.join(output_dir, "predictions.json"))
    questions = questions_of(squad)
    assert list(predictions) == [qid for qid, _, _ in questions]
    for qid, context, _ in questions:
        assert predictions[qid] in context
    nbest = load(os.path.join(output_dir, "nbest_predictions.json"))
    assert list(nbest) == list(predictions)
    for qid, entries in nbest.items():
        assert 1 <= len(entries) <= 20
        assert sum(e["probability"] for e in entries) == pytest.approx(1.0)
        assert [e["text"] for e in entries].count(predictions[qid]) == 1
        scores = [e["start_logit"] + e["end_logit"] for e in entries]
        assert scores == sorted(scores, reverse=True)
    return predictions


def test_english_predictions_answer_every_question(setup, trained):
    output_dir, run = trained["en"]
    windows = windows_logged(run.stderr, "predict")
    assert windows % (TOWERS * PREDICT_BATCH) != 0   # a short last batch on both towers
    assert windows > len(questions_of(load(EN)))     # contexts longer than one window
    predictions = check_predictions(output_dir, load(EN))
    nbest = load(os.path.join(output_dir, "nbest_predictions.json"))
    assert all(nbest[qid][0]["text"] == text for qid, text in predictions.items())
    assert not os.path.exists(os.path.join(output_dir, "null_odds.json"))
    # The predict file is the dev file: scored once, for both.
    assert run.stderr.count("scoring") == 1, run.stderr[-3000:]


def test_eval_results_are_our_metric_of_predictions_json(trained):
    output_dir, _ = trained["en"]
    results = read_key_values(os.path.join(output_dir, "eval_results.txt"))
    golds = {qid: answers for qid, _, answers in questions_of(load(EN))}
    expected = score_answers(golds, load(os.path.join(output_dir, "predictions.json")),
                             "squad")
    for name in ("exact_match", "f1", "has_answer_exact_match", "has_answer_f1"):
        assert float(results["eval_" + name]) == pytest.approx(expected[name], abs=1e-4)
    assert int(results["eval_questions"]) == 14
    assert results["eval_answer_metric"] == "squad"
    # The tiny model learnt something from 3 epochs on these questions.
    assert float(results["eval_f1"]) > 20.0


def test_the_export_serves_start_and_end_logits_and_scores_the_same(setup, trained):
    output_dir, _ = trained["en"]
    exports = os.path.join(output_dir, "export")
    export_dir = os.path.join(exports, os.listdir(exports)[0])
    metadata = read_metadata(export_dir)
    assert sorted(metadata.outputs) == ["end_logits", "start_logits"]
    assert sorted(metadata.inputs) == ["input_ids", "input_mask", "segment_ids"]
    rescored = os.path.join(setup.root, "en_from_export")
    # In this process: what a new process adds is proven by the trained run's launch.
    run = run_in_process([LAUNCHER] + flag_args(dict(
        predict_from_export=export_dir, predict_file=EN, do_predict=True, n_gpus=1,
        predict_batch_size=5, output_dir=rescored, max_query_length=16,
        doc_stride=16)))
    assert run.returncode == 0, run.describe()
    assert load(os.path.join(rescored, "predictions.json")) == \
        load(os.path.join(output_dir, "predictions.json"))


HARNESS = """
import json
from bert_ad.data.squad_features import SquadWindowSettings, convert_questions
from bert_ad.data.squad_json import Question
from bert_ad.answers.squad import AnswerSettings, answers_from_logits

QUESTION = "Who discovered penicillin?"
CONTEXT = "Penicillin was discovered in 1928 by Alexander Fleming in London."
text = answer(QUESTION, CONTEXT, max_query_length=16)[0]
features = convert_questions([Question("q", QUESTION, 0, ())], [CONTEXT], tokenizer,
                             SquadWindowSettings(64, 16, 16), training=False)
row = {name: tf.constant([features.examples.columns[name][0]])
       for name in ("input_ids", "segment_ids")}
out = serve(input_mask=tf.ones_like(row["input_ids"]), **row)
ours = answers_from_logits([Question("q", QUESTION, 0, ())], [CONTEXT], features,
                           [out["start_logits"].numpy()[0]], [out["end_logits"].numpy()[0]],
                           AnswerSettings(max_answer_length=30))
print(json.dumps({"doc": text, "ours": ours.predictions["q"], "windows": len(features.windows)}))
"""


@pytest.mark.skipif(sys.version_info < (3, 8), reason="the doc's code is TF 2's "
                    "(tf.saved_model.load)")
def test_the_serving_doc_turns_the_logits_into_our_answer(setup, trained, tmp_path):
    """docs/serving.md's code, run on the export, answers as our own search does."""
    with open(os.path.join(REPO, "docs", "serving.md"), encoding="utf-8") as f:
        doc = f.read()
    section = doc[doc.index("### A question-answering export"):]
    code = section[section.index("```python") + len("```python"):]
    code = code[:code.index("```")]
    exports = os.path.join(trained["en"][0], "export")
    export_dir = os.path.join(exports, os.listdir(exports)[0])
    assert '"OUT/export/1200"' in code
    script = tmp_path / "serving_doc.py"
    script.write_text(code.replace('"OUT/export/1200"', repr(export_dir)) + HARNESS,
                      encoding="utf-8")
    run = run_launcher([str(script)]).check()
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["windows"] == 1
    assert result["doc"] == result["ours"]
    assert result["doc"] and result["doc"] in \
        "Penicillin was discovered in 1928 by Alexander Fleming in London."


def test_version_2_answers_nothing_where_the_null_odds_win(setup, trained):
    output_dir, _ = trained["zh"]
    squad = load(setup.zh_v2)
    predictions = check_predictions(output_dir, squad)
    null_odds = load(os.path.join(output_dir, "null_odds.json"))
    assert list(null_odds) == list(predictions)
    nbest = load(os.path.join(output_dir, "nbest_predictions.json"))
    for qid, odds in null_odds.items():
        if odds > 0.0:
            assert predictions[qid] == ""
        else:
            assert predictions[qid] == next(e["text"] for e in nbest[qid] if e["text"])
        assert "" in [e["text"] for e in nbest[qid]]
    results = read_key_values(os.path.join(output_dir, "eval_results.txt"))
    assert results["eval_answer_metric"] == "cmrc2018"
    assert int(results["eval_no_answer_questions"]) == len(IMPOSSIBLE)
    assert int(results["eval_has_answer_questions"]) == 10
    golds = {qid: answers for qid, _, answers in questions_of(squad)}
    expected = score_answers(golds, predictions, "cmrc2018")
    for name in ("exact_match", "f1", "no_answer_f1", "has_answer_f1"):
        assert float(results["eval_" + name]) == pytest.approx(expected[name], abs=1e-4)
    assert float(results["eval_best_f1"]) >= float(results["eval_f1"]) - 1e-4
    # --eval_every_steps --keep_best_checkpoint: the dev file (the predict file)
    # scored while training, the best by eval_f1 kept.
    best = load(os.path.join(output_dir, "best", "best.json"))
    assert best["metric"] == "eval_f1" and best["higher_is_better"]
    assert any(name.startswith("model.ckpt-") for name in
               os.listdir(os.path.join(output_dir, "best")))


# ---------------------------------------------------------------------------
# --null_score_diff_threshold=auto: chosen on the dev file, recorded, answered with.


def zh_scoring_flags(setup, output_dir: str, **flags) -> list:
    """A scoring run (no training) on the v2.0 sample, in this process."""
    return [LAUNCHER] + flag_args(dict(dict(
        vocab_file=setup.chinese_vocab, bert_config_file=setup.zh_config,
        predict_file=setup.zh_v2, do_predict=True, version_2_with_negative=True,
        max_seq_length=48, doc_stride=16, max_query_length=16, n_gpus=1,
        predict_batch_size=PREDICT_BATCH, eval_batch_size=PREDICT_BATCH,
        output_dir=output_dir), **flags))


def best_spans_of(output_dir: str) -> dict:
    """Each question's best span: the first non-empty text of nbest_predictions.json."""
    nbest = load(os.path.join(output_dir, "nbest_predictions.json"))
    return {q: next((e["text"] for e in entries if e["text"]), "")
            for q, entries in nbest.items()}


def answered_with(null_odds: dict, best_spans: dict, threshold: float) -> dict:
    return {q: best_spans[q] if odds <= threshold else "" for q, odds in null_odds.items()}


@pytest.fixture(scope="module")
def auto(setup, trained):
    """The trained v2.0 checkpoint evaluated, exported and predicted in a new output_dir
    with no --null_score_diff_threshold: with --do_eval on a --dev_file it is chosen there,
    as --null_score_diff_threshold=auto (issue 56), and the log says so. (The dev file is
    the predict file, given: a user's own choice, scored once for both.)"""
    output_dir = os.path.join(setup.root, "zh_auto")
    checkpoint = resolve_checkpoint(trained["zh"][0])
    run = run_in_process(zh_scoring_flags(
        setup, output_dir, init_checkpoint=checkpoint, do_eval=True, do_export=True,
        dev_file=setup.zh_v2, export_dir=os.path.join(output_dir, "export")))
    assert run.returncode == 0, run.describe()
    assert ("--null_score_diff_threshold not given: it is chosen on the dev file "
            f"({setup.zh_v2})") in run.stderr, run.describe()
    return output_dir, checkpoint, run


def test_auto_answers_with_the_dev_files_best_f1_threshold(setup, trained, auto):
    output_dir, checkpoint, run = auto
    with open(os.path.join(output_dir, ANSWER_SETTINGS_FILE), encoding="utf-8") as f:
        record = json.load(f)
    threshold = record["answer_settings"]["null_score_diff_threshold"]
    assert record["checkpoint"] == os.path.abspath(checkpoint)  # outside output_dir
    assert record["chosen_on"] == setup.zh_v2
    # Every threshold worth trying (each question's null odds, and below them all),
    # scored as a user would: none beats the chosen one's F1.
    squad = load(setup.zh_v2)
    golds = {qid: answers for qid, _, answers in questions_of(squad)}
    null_odds = load(os.path.join(output_dir, "null_odds.json"))
    best_spans = best_spans_of(output_dir)

    def f1_at(t):
        return score_answers(golds, answered_with(null_odds, best_spans, t), "cmrc2018")["f1"]

    candidates = sorted(set(null_odds.values())) + [min(null_odds.values()) - 1.0]
    best_f1 = max(f1_at(t) for t in candidates)
    assert f1_at(threshold) == pytest.approx(best_f1)
    predictions = load(os.path.join(output_dir, "predictions.json"))
    assert predictions == answered_with(null_odds, best_spans, threshold)
    results = read_key_values(os.path.join(output_dir, "eval_results.txt"))
    for name, value in (("null_score_diff_threshold", threshold),
                        ("best_f1_thresh", threshold), ("f1", best_f1), ("best_f1", best_f1)):
        assert float(results["eval_" + name]) == pytest.approx(value, abs=1e-6), name
    assert float(results["eval_best_exact"]) == pytest.approx(max(
        score_answers(golds, answered_with(null_odds, best_spans, t), "cmrc2018")
        ["exact_match"] for t in candidates))
    assert "eval_best_exact_thresh" in results
    assert "warning:" not in run.stderr
    # The export answers with it.
    exports = os.path.join(output_dir, "export")
    assert read_metadata(exports).answer_settings == {"null_score_diff_threshold": threshold}


def test_later_runs_answer_with_the_recorded_threshold_unless_given(setup, auto):
    output_dir, checkpoint, _ = auto
    predictions = load(os.path.join(output_dir, "predictions.json"))
    best_spans = best_spans_of(output_dir)
    runs = {
        # From the export, without the flag: export.json's threshold.
        "export": zh_scoring_flags(setup, os.path.join(setup.root, "zh_from_export"),
                                   predict_from_export=os.path.join(output_dir, "export")),
        # The same checkpoint scored into the output_dir that recorded the choice.
        "checkpoint": zh_scoring_flags(setup, output_dir, init_checkpoint=checkpoint),
        # The flag given: it wins over the record.
        "flag": zh_scoring_flags(setup, os.path.join(setup.root, "zh_flag"),
                                 predict_from_export=os.path.join(output_dir, "export"),
                                 null_score_diff_threshold=1e6),
    }
    for name, argv in runs.items():
        run = run_in_process(argv)
        assert run.returncode == 0, run.describe()
        out = argv[[a.startswith("--output_dir=") for a in argv].index(True)].split("=", 1)[1]
        got = load(os.path.join(out, "predictions.json"))
        if name == "flag":
            assert got == best_spans   # a threshold above every null odds answers all
        else:
            assert got == predictions, name
            assert "recorded in" in run.stderr, name


def test_a_threshold_far_from_the_best_warns_once_naming_both(setup, auto):
    output_dir, checkpoint, _ = auto
    results = read_key_values(os.path.join(output_dir, "eval_results.txt"))
    null_odds = load(os.path.join(output_dir, "null_odds.json"))
    # Answering nothing or everything: on these 13 questions one of them is far
    # (more than 2 points) from the best.
    squad = load(setup.zh_v2)
    golds = {qid: answers for qid, _, answers in questions_of(squad)}
    best_spans = best_spans_of(output_dir)
    far = min((min(null_odds.values()) - 1.0, max(null_odds.values()) + 1.0),
              key=lambda t: score_answers(golds, answered_with(null_odds, best_spans, t),
                                          "cmrc2018")["f1"])
    run = run_in_process(zh_scoring_flags(
        setup, os.path.join(setup.root, "zh_far"), init_checkpoint=checkpoint, do_eval=True,
        null_score_diff_threshold=far))
    assert run.returncode == 0, run.describe()
    far_results = read_key_values(os.path.join(setup.root, "zh_far", "eval_results.txt"))
    f1, best = float(far_results["eval_f1"]), float(far_results["eval_best_f1"])
    assert best - f1 > 2.0
    assert best == pytest.approx(float(results["eval_best_f1"]))
    warnings = [line for line in run.stderr.splitlines() if "warning:" in line]
    assert len(warnings) == 1, run.stderr[-3000:]
    assert f"F1 {f1:.2f} at --null_score_diff_threshold={far:.6g}" in warnings[0]
    assert (f"{best:.2f} at --null_score_diff_threshold="
            f"{float(results['eval_best_f1_thresh']):.6f}") in warnings[0]
    assert "--null_score_diff_threshold=auto" in warnings[0]


def test_training_without_a_dev_file_chooses_the_threshold_on_its_training_questions(
        setup, trained):
    """Google's flags (train and predict, no --do_eval, no threshold): the threshold is the
    best-F1 one of the training questions, logged and recorded, and predictions.json
    answers with it (issue 56: Google's 0 lost 13 F1 points at 2,000 questions)."""
    output_dir = os.path.join(setup.root, "zh_train_choice")
    run = run_in_process([LAUNCHER] + flag_args(dict(
        setup.common, vocab_file=setup.chinese_vocab, bert_config_file=setup.zh_config,
        init_checkpoint=resolve_checkpoint(trained["zh"][0]), num_train_epochs=1,
        train_file=setup.zh_v2, predict_file=setup.zh_v2, do_train=True, do_predict=True,
        version_2_with_negative=True, output_dir=output_dir)))
    assert run.returncode == 0, run.describe()
    squad = load(setup.zh_v2)
    golds = {qid: answers for qid, _, answers in questions_of(squad)}
    assert (f"it is chosen on {len(golds)} of the {len(golds)} training questions of "
            f"{setup.zh_v2}") in run.stderr, run.describe()
    record = load(os.path.join(output_dir, ANSWER_SETTINGS_FILE))
    threshold = record["answer_settings"]["null_score_diff_threshold"]
    assert record["chosen_on"] == setup.zh_v2 and record["checkpoint"].startswith("model.ckpt-")
    # The predict file is the training file: its null odds are what the choice saw.
    null_odds = load(os.path.join(output_dir, "null_odds.json"))
    best_spans = best_spans_of(output_dir)

    def f1_at(t):
        return score_answers(golds, answered_with(null_odds, best_spans, t), "cmrc2018")["f1"]

    candidates = sorted(set(null_odds.values())) + [min(null_odds.values()) - 1.0]
    assert f1_at(threshold) == pytest.approx(max(f1_at(t) for t in candidates))
    assert load(os.path.join(output_dir, "predictions.json")) == answered_with(
        null_odds, best_spans, threshold)
    assert not os.path.exists(os.path.join(output_dir, "eval_results.txt"))


def test_without_a_dev_file_the_predict_file_never_chooses_the_threshold(setup, trained,
                                                                          tmp_path):
    """--do_eval without --dev_file scores the predict file, and reports its F1: chosen
    there, the threshold would make that F1 the file's best. Training, the training
    questions choose (and eval_results.txt reports the test file at their threshold);
    scoring a checkpoint with no record, Google's 0 answers."""
    test = str(tmp_path / "test.json")
    shutil.copy(setup.zh_v2, test)   # a file of its own: the record names where it chose
    trained_dir = os.path.join(setup.root, "zh_eval_train_choice")
    run = run_in_process([LAUNCHER] + flag_args(dict(
        setup.common, vocab_file=setup.chinese_vocab, bert_config_file=setup.zh_config,
        init_checkpoint=resolve_checkpoint(trained["zh"][0]), num_train_epochs=1,
        train_file=setup.zh_v2, predict_file=test, do_train=True, do_predict=True,
        do_eval=True, version_2_with_negative=True, output_dir=trained_dir)))
    assert run.returncode == 0, run.describe()
    assert "training questions of " + setup.zh_v2 in run.stderr, run.describe()
    assert "chosen on the dev file" not in run.stderr
    record = load(os.path.join(trained_dir, ANSWER_SETTINGS_FILE))
    assert record["chosen_on"] == setup.zh_v2
    threshold = record["answer_settings"]["null_score_diff_threshold"]
    results = read_key_values(os.path.join(trained_dir, "eval_results.txt"))
    assert float(results["eval_null_score_diff_threshold"]) == pytest.approx(threshold,
                                                                              abs=1e-6)
    null_odds = load(os.path.join(trained_dir, "null_odds.json"))
    best_spans = best_spans_of(trained_dir)
    assert load(os.path.join(trained_dir, "predictions.json")) == answered_with(
        null_odds, best_spans, threshold)
    # Scoring only: nothing recorded for this checkpoint in a new folder, so 0.
    scored_dir = os.path.join(setup.root, "zh_eval_only")
    run = run_in_process(zh_scoring_flags(
        setup, scored_dir, init_checkpoint=resolve_checkpoint(trained["zh"][0]),
        do_eval=True, predict_file=test))
    assert run.returncode == 0, run.describe()
    assert "chosen on" not in run.stderr, run.describe()
    assert not os.path.exists(os.path.join(scored_dir, ANSWER_SETTINGS_FILE))
    results = read_key_values(os.path.join(scored_dir, "eval_results.txt"))
    assert float(results["eval_null_score_diff_threshold"]) == 0.0
    assert load(os.path.join(scored_dir, "predictions.json")) == answered_with(
        load(os.path.join(scored_dir, "null_odds.json")), best_spans_of(scored_dir), 0.0)


def test_training_that_reads_a_dev_file_chooses_the_threshold_there(setup, trained, tmp_path):
    """--eval_every_steps with a --dev_file and no --do_eval: the dev file it reads is
    where the threshold is chosen, not the training questions."""
    dev = str(tmp_path / "dev.json")
    shutil.copy(setup.zh_v2, dev)
    output_dir = os.path.join(setup.root, "zh_dev_choice")
    run = run_in_process([LAUNCHER] + flag_args(dict(
        setup.common, vocab_file=setup.chinese_vocab, bert_config_file=setup.zh_config,
        init_checkpoint=resolve_checkpoint(trained["zh"][0]), num_train_epochs=1,
        train_file=setup.zh_v2, dev_file=dev, eval_every_steps=2, do_train=True,
        version_2_with_negative=True, output_dir=output_dir)))
    assert run.returncode == 0, run.describe()
    assert f"--null_score_diff_threshold not given: it is chosen on the dev file ({dev})" \
        in run.stderr, run.describe()
    assert "training questions" not in run.stderr
    assert load(os.path.join(output_dir, ANSWER_SETTINGS_FILE))["chosen_on"] == dev

# ---------------------------------------------------------------------------
# Bad input.


def run_in_process(argv) -> Run:
    """The launcher's cli on argv, in this process: (exit code, stdout, stderr)."""
    return run_cli_in_process(squad_cli.cli, argv)


def broken(setup, name: str, change) -> str:
    """The English sample changed by change(data), written as NAME.json."""
    data = load(EN)
    change(data)
    # The folder made here too: test_the_command_line_... runs without bad_runs (-k).
    os.makedirs(os.path.join(setup.root, "bad"), exist_ok=True)
    return write_json(os.path.join(setup.root, "bad", name + ".json"), data)


def first_qa(data: dict) -> dict:
    return data["data"][0]["paragraphs"][0]["qas"][0]


def _bad_cases(setup, trained_dir: str) -> dict:
    os.makedirs(os.path.join(setup.root, "bad"), exist_ok=True)
    s = setup

    def raw(name, text):
        path = os.path.join(s.root, "bad", name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path

    def set_field(key, value):
        return lambda d: first_qa(d).__setitem__(key, value)

    def drop(where, key):
        return lambda d: where(d).pop(key)

    files = {
        "answer_start_off": (broken(s, "start_off", lambda d: first_qa(d)["answers"][0]
                                    .__setitem__("answer_start", 25)),
                             ["sample-001", "answer_start 25 does not match"]),
        "answer_outside": (broken(s, "outside", lambda d: first_qa(d)["answers"][0]
                                  .__setitem__("answer_start", 10_000)),
                           ["sample-001", "runs outside its context"]),
        "duplicate_id": (broken(s, "duplicate", lambda d: d["data"][1]["paragraphs"][0]["qas"]
                                [0].__setitem__("id", "sample-001")),
                         ["sample-001", "appears twice"]),
        "no_context": (broken(s, "no_context", drop(lambda d: d["data"][0]["paragraphs"][0],
                                                    "context")),
                       ["sample-001", "no 'context' field"]),
        "no_question": (broken(s, "no_question", drop(first_qa, "question")),
                        ["sample-001", "no 'question' field"]),
        "no_id": (broken(s, "no_id", drop(first_qa, "id")),
                  ["data[0].paragraphs[0].qas[0]", "no 'id' field"]),
        "no_answers": (broken(s, "no_answers", drop(first_qa, "answers")),
                       ["sample-001", "has no 'answers'"]),
        "answer_not_number": (broken(s, "start_text", lambda d: first_qa(d)["answers"][0]
                                     .__setitem__("answer_start", "24")),
                              ["sample-001", "'answer_start' must be an integer"]),
        "v2_without_flag": (broken(s, "v2", set_field("is_impossible", True)),
                            ["sample-001", "is_impossible", "--version_2_with_negative"]),
        "not_json": (raw("not_json.json", '{"data": [}'), ["not_json.json", "is not JSON"]),
        "empty": (raw("empty.json", "\n"), ["empty.json", "is empty"]),
        "not_squad": (raw("list.json", "[1, 2]"), ["list.json", "not a JSON object"]),
    }
    base = {"vocab_file": s.en_model.vocab_file, "bert_config_file": s.en_model.config_file,
            "max_seq_length": 48, "max_query_length": 16}
    cases = {}
    for name, (path, expected) in files.items():
        output_dir = os.path.join(s.root, "bad_out", name)
        flags = dict(base, train_file=path, do_train=True, output_dir=output_dir)
        cases[name] = ([LAUNCHER] + flag_args(flags), output_dir,
                       [os.path.basename(path)] + expected)
    # A bad predict file against a trained output_dir: nothing in it changes.
    cases["predict_duplicate_trained_dir"] = (
        [LAUNCHER] + flag_args(dict(base, predict_file=files["duplicate_id"][0],
                                    do_predict=True, output_dir=trained_dir)),
        trained_dir, ["duplicate.json", "sample-001", "appears twice"])
    cases["eval_without_answers"] = (
        [LAUNCHER] + flag_args(dict(base, dev_file=files["no_answers"][0], do_eval=True,
                                    init_checkpoint=trained_dir, output_dir=trained_dir)),
        trained_dir, ["no_answers.json", "sample-001", "'answers'"])
    flag_cases = {
        "train_without_file": (dict(do_train=True), ["--do_train needs --train_file"]),
        "eval_without_file": (dict(do_eval=True), ["--dev_file"]),
        "query_too_long": (dict(do_predict=True, predict_file=EN, max_query_length=46),
                           ["--max_seq_length=48", "--max_query_length=46"]),
        "threshold_without_v2": (dict(do_predict=True, predict_file=EN,
                                      null_score_diff_threshold=1.0),
                                 ["--null_score_diff_threshold", "--version_2_with_negative"]),
        "zero_n_best": (dict(do_predict=True, predict_file=EN, n_best_size=0),
                        ["--n_best_size=0"]),
        "auto_without_eval": (dict(do_predict=True, predict_file=EN,
                                   version_2_with_negative=True,
                                   null_score_diff_threshold="auto"),
                              ["--null_score_diff_threshold=auto", "--do_eval"]),
        "auto_with_export": (dict(do_predict=True, do_eval=True, predict_file=EN,
                                  version_2_with_negative=True,
                                  predict_from_export=os.path.join(
                                      trained_dir, "export",
                                      os.listdir(os.path.join(trained_dir, "export"))[0]),
                                  null_score_diff_threshold="auto"),
                             # (--do_eval with an export is refused first, naming both)
                             ["--predict_from_export", "--do_eval works on checkpoints"]),
        "threshold_not_a_number": (dict(do_predict=True, predict_file=EN,
                                        version_2_with_negative=True,
                                        null_score_diff_threshold="high"),
                                   ["--null_score_diff_threshold", "'high'", "auto"]),
    }
    for name, (flags, expected) in flag_cases.items():
        output_dir = os.path.join(s.root, "bad_out", name)
        cases[name] = ([LAUNCHER] + flag_args(dict(base, output_dir=output_dir, **flags)),
                       output_dir, expected)
    return cases


BAD_CASES = ["answer_start_off", "answer_outside", "duplicate_id", "no_context", "no_question",
             "no_id", "no_answers", "answer_not_number", "v2_without_flag", "not_json", "empty",
             "not_squad", "predict_duplicate_trained_dir", "eval_without_answers",
             "train_without_file", "eval_without_file", "query_too_long",
             "threshold_without_v2", "zero_n_best", "auto_without_eval", "auto_with_export",
             "threshold_not_a_number"]


@pytest.fixture(scope="module")
def bad_runs(setup, trained):
    return run_bad_inputs(_bad_cases(setup, trained["en"][0]), BAD_CASES, run=run_in_process,
                          parallel=1)


@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_input_is_one_error_line_and_nothing_written(bad_runs, case):
    bad_runs[case].assert_refused()


def test_the_command_line_prints_one_error_line_and_exits_2(setup):
    output_dir = os.path.join(setup.root, "bad_out", "subprocess")
    run = run_launcher([LAUNCHER] + flag_args(dict(
        vocab_file=setup.en_model.vocab_file, bert_config_file=setup.en_model.config_file,
        train_file=broken(setup, "duplicate_sub", lambda d: d["data"][1]["paragraphs"][0]
                          ["qas"][0].__setitem__("id", "sample-001")),
        do_train=True, output_dir=output_dir, max_seq_length=48, max_query_length=16)))
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.splitlines()[-1].startswith("error: ")
    assert "sample-001" in run.stderr.splitlines()[-1]
    assert not os.path.exists(output_dir)


def test_googles_defaults_and_the_classifiers_unchanged():
    from bert_ad.cli import classifier
    from bert_ad.cli.runner import parse_flags
    f = parse_flags(squad_cli.define_flags, ["run_squad_mgpu.py"], "", "")
    assert (f.max_seq_length, f.doc_stride, f.max_query_length, f.n_best_size,
            f.max_answer_length, f.version_2_with_negative, f.null_score_diff_threshold,
            f.do_lower_case) == (384, 128, 64, 20, 30, False, 0.0, True)
    assert parse_flags(classifier.define_flags, ["run_classifier_mgpu.py"], "",
                       "").max_seq_length == 128
