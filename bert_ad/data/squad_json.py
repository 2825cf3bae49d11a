"""SQuAD v1.1 / v2.0 json files, exactly as published (CMRC2018 and DRCD use the same layout).

    {"version": "v2.0", "data": [
      {"title": "...", "paragraphs": [
        {"context": "...", "qas": [
          {"id": "...", "question": "...",
           "answers": [{"text": "...", "answer_start": 42}, ...],
           "is_impossible": false}]}]}]}

Every question becomes a `Question` (its context shared with the other
questions of its paragraph, by index). Several answers to one question are
alternatives (the annotators' answers of a dev file, or every mention of an
entity type in peoples_daily_mrc): kept in file order, duplicates included,
as the official evaluation reads them. Extra fields (`title`, DRCD's answer
`id`, v2.0's `plausible_answers`) are ignored.

Every check names the file and the question id (or, where the id itself is
missing, the question's place in the file) in one UserError, before any work:

  * an empty file, a file that is not JSON (or nested past what Python's JSON
    reader can read), a field missing or of the wrong type, text holding a
    lone surrogate escape (half a character pair);
  * the same id twice;
  * an answer whose text is not the context's characters at `answer_start`,
    or that runs outside its context;
  * an `is_impossible` question in a run without --version_2_with_negative
    (a SQuAD v2.0 file), or one that also lists answers;
  * train and dev files: an answerable question without answers.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Dict, List, Optional, Sequence, Tuple

from bert_ad.errors import fail, require_file

VERSION_2_FLAG = "--version_2_with_negative"


@dataclasses.dataclass(frozen=True)
class Answer:
    """One answer: its text and where it starts in the context (characters)."""
    text: str
    start: int

    @property
    def end(self) -> int:
        """One past its last character."""
        return self.start + len(self.text)


@dataclasses.dataclass(frozen=True)
class Question:
    """One question of a SQuAD file.

    Attributes:
      id: the file's `id` (as text).
      question: the question text.
      context: index of its paragraph's context in SquadFile.contexts.
      answers: the answers, alternatives of each other, in file order.
      is_impossible: a v2.0 question the context does not answer.
      has_answers: the file gives answers (or is_impossible) for it: it can
        be scored.
    """
    id: str
    question: str
    context: int
    answers: Tuple[Answer, ...]
    is_impossible: bool = False
    has_answers: bool = True


@dataclasses.dataclass
class SquadFile:
    """A SQuAD file's contexts and questions, in file order."""
    path: str
    version: str
    contexts: List[str]
    questions: List[Question]

    def context_of(self, question: Question) -> str:
        return self.contexts[question.context]


def _field(mapping, key: str, kind, where: str, path: str, what: str = ""):
    """mapping[key], which must be of `kind`; one error line otherwise."""
    if not isinstance(mapping, dict):
        fail(f"{path}: {where} is not a JSON object; a SQuAD file is "
             '{"data": [{"paragraphs": [{"context": ..., "qas": [...]}]}]}')
    if key not in mapping:
        fail(f"{path}: {where} has no {key!r} field{what}")
    value = mapping[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or isinstance(value, bool) and bool not in kinds:
        names = " or ".join({str: "text", list: "a list", int: "an integer",
                             dict: "an object", bool: "true or false"}[k] for k in kinds)
        fail(f"{path}: {where}: {key!r} must be {names}, not {json.dumps(value)[:40]}")
    if isinstance(value, str):
        _check_characters(value, f"{where}: {key!r}", path)
    return value


def _check_characters(text: str, what: str, path: str) -> None:
    """One error line for a lone surrogate (JSON's "\\ud800" escape of half a
    character pair): it passed the checks, training ran and saved, and writing
    predictions.json then died with a UnicodeEncodeError."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        fail(f"{path}: {what} holds a lone surrogate \\u{ord(text[e.start]):04x} (at "
             f"character {e.start}), half of a character pair and no character of its "
             "own; the tool that wrote the file split a pair: fix or drop that text")


def load_json(path: str):
    """The JSON value of `path`; one error line for a missing, empty or non-JSON file."""
    require_file(path, "SQuAD json file")
    with open(path, "rb") as f:
        data = f.read()
    if not data.strip():
        fail(f"{path} is empty; a SQuAD file is one JSON object with a \"data\" list")
    try:
        return json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError as e:
        fail(f"{path} is not UTF-8 (byte {e.start}); save it as UTF-8 JSON")
    except ValueError as e:
        fail(f"{path} is not JSON ({e}); a SQuAD file is one JSON object with a "
             "\"data\" list")
    except RecursionError:
        fail(f"{path} nests JSON lists or objects deeper than Python's JSON reader goes "
             "(a SQuAD file is 6 levels deep); it is not a SQuAD file")


def read_squad_file(path: str, version_2_with_negative: bool, require_answers: bool
                    ) -> SquadFile:
    """Every question of a SQuAD-layout json file, checked (see the module docstring).

    Args:
      path: the file.
      version_2_with_negative: unanswerable (`is_impossible`) questions allowed.
      require_answers: every question must be scorable (train and dev files);
        a predict file may leave `answers` out.
    Raises:
      UserError: one line naming the file and the question id.
    """
    root = load_json(path)
    if not isinstance(root, dict):
        fail(f"{path}: the top level is not a JSON object; a SQuAD file is "
             '{"version": ..., "data": [...]}')
    articles = _field(root, "data", list, "the top level", path)
    version = str(root.get("version", ""))
    contexts: List[str] = []
    questions: List[Question] = []
    seen: Dict[str, str] = {}
    for a, article in enumerate(articles):
        paragraphs = _field(article, "paragraphs", list, f"data[{a}]", path)
        for p, paragraph in enumerate(paragraphs):
            where = f"data[{a}].paragraphs[{p}]"
            qas = _field(paragraph, "qas", list, where, path)
            first_id = _first_id(qas)
            context = _field(paragraph, "context", str, where, path,
                             f" (the paragraph of question {first_id!r})" if first_id else "")
            if not context.strip():
                fail(f"{path}: {where} (the paragraph of question {first_id!r}): its "
                     "context is empty")
            contexts.append(context)
            for q, qa in enumerate(qas):
                question = _read_question(qa, f"{where}.qas[{q}]", path, context,
                                          len(contexts) - 1, version_2_with_negative,
                                          require_answers)
                if question.id in seen:
                    fail(f"{path}: question id {question.id!r} appears twice ({seen[question.id]}"
                         f" and {where}.qas[{q}]); ids must be unique")
                seen[question.id] = f"{where}.qas[{q}]"
                questions.append(question)
    if not questions:
        fail(f"{path} holds no question (no \"qas\" in its paragraphs)")
    return SquadFile(path, version, contexts, questions)


def _first_id(qas: Sequence) -> Optional[str]:
    for qa in qas:
        if isinstance(qa, dict) and isinstance(qa.get("id"), (str, int)):
            return str(qa["id"])
    return None


def _read_question(qa, where: str, path: str, context: str, context_index: int,
                   version_2: bool, require_answers: bool) -> Question:
    qid = _field(qa, "id", (str, int), where, path)
    qid = str(qid)
    here = f"{where} (question {qid!r})"
    text = _field(qa, "question", str, here, path)
    if not text.strip():
        fail(f"{path}: question {qid!r}: its question text is empty")
    impossible = qa.get("is_impossible", False)
    if not isinstance(impossible, bool):
        fail(f"{path}: question {qid!r}: 'is_impossible' must be true or false, not "
             f"{json.dumps(impossible)[:40]}")
    if impossible and not version_2:
        fail(f"{path}: question {qid!r} is_impossible (a SQuAD v2.0 file): set "
             f"{VERSION_2_FLAG} to train and score unanswerable questions")
    if "answers" not in qa:
        if require_answers and not impossible:
            fail(f"{path}: question {qid!r} has no 'answers' field; training and "
                 "evaluation need its answers (or is_impossible: true with "
                 f"{VERSION_2_FLAG})")
        return Question(qid, text, context_index, (), impossible, has_answers=impossible)
    raw_answers = _field(qa, "answers", list, here, path)
    if impossible and raw_answers:
        fail(f"{path}: question {qid!r} is_impossible but lists {len(raw_answers)} "
             "answer(s); an unanswerable question has \"answers\": []")
    answers = tuple(_read_answer(answer, qid, i, path, context)
                    for i, answer in enumerate(raw_answers))
    if not answers and not impossible and require_answers:
        fail(f"{path}: question {qid!r} has no answer; give its answers, or mark it "
             f"\"is_impossible\": true (with {VERSION_2_FLAG})")
    return Question(qid, text, context_index, answers, impossible,
                    has_answers=bool(answers) or impossible)


def _read_answer(answer, qid: str, index: int, path: str, context: str) -> Answer:
    where = f"question {qid!r} answer {index}"
    text = _field(answer, "text", str, where, path)
    start = _field(answer, "answer_start", int, where, path)
    if not text.strip():
        fail(f"{path}: {where}: the answer text is empty")
    if start < 0 or start + len(text) > len(context):
        fail(f"{path}: {where}: {text[:40]!r} at answer_start {start} runs outside its "
             f"context ({len(context)} characters)")
    found = context[start:start + len(text)]
    if found != text:
        fail(f"{path}: {where}: answer_start {start} does not match the answer text: "
             f"the context has {found[:40]!r} there, not {text[:40]!r}")
    return Answer(text, start)
