"""`bert-ad predict` from a file into a file: a stop keeps the answers so far, and
the same command goes on from there.

A batch of millions of lines runs for hours; a scheduler's SIGTERM, a closed
terminal or Ctrl-C at 80% used to throw the 80% away. Now such a run writes
OUTPUT.partial (locked while it is written). A stop signal during the scoring
loop stops it after the chunk being scored: the answers written so far stay
in OUTPUT.partial, and OUTPUT.partial.json records where they end (answers,
input lines, output bytes, a TSV's header) and what made them (the model, the
flags that shape an answer, a digest of those input lines taken as they were
read, so the record is written at once, within a scheduler's grace period).
The same command
then checks the record, cuts the partial back to those bytes, skips those
input lines and appends; at the end the partial is renamed onto OUTPUT (as
`>` would replace it) and the record removed.

  * A record that does not match (another model, other flags, the input's
    first lines changed) is refused with one line naming what differs;
    nothing is removed.
  * A partial without a record is a leftover (kill -9 on a first run: no
    handler ran): removed, and the run starts over.
  * A second signal stops at once: the partial keeps at least the bytes the
    last record names (answers are only ever appended), so that record stays
    good.
  * An error (a bad line) leaves what the user had: a resumed partial cut
    back to its record, a new one removed.
  * A gzip output is a series of gzip members, one per stretch a run wrote
    (gzip, zcat and Python read them as one stream).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import io
import json
import logging
import os
from typing import IO, Iterable, Iterator, List, Optional

from bert_ad.errors import Stopped, fail
from bert_ad.files import atomic_open, fsync_path, remove_quietly
from bert_ad.inference.prediction_input import open_input
from bert_ad.inference.prediction_output import answer_stream
from bert_ad.signals import install, is_live, restore, signal_name, write_from_handler

log = logging.getLogger("bert_ad")

PARTIAL_SUFFIX = ".partial"
RECORD_SUFFIX = ".partial.json"
RECORD_VERSION = 1


@dataclasses.dataclass
class ResumePoint:
    """Where the answers written so far end.

    Attributes:
      answers: answer lines written (one per input line answered, in order).
      input_lines: the input line the last of them answers (a TSV header
        line counts: it is a line of the file).
      header: a TSV output's header fields once written, else [].
      input_sha256: the SHA-256 of input lines 1..input_lines (HashedLines.mark),
        taken as they were read: a stop records it without reading the input again.
    """
    answers: int = 0
    input_lines: int = 0
    header: List[str] = dataclasses.field(default_factory=list)
    input_sha256: str = ""


class HashedLines:
    """The input's lines as read, with the SHA-256 of those read so far (`mark`).

    The chunk reader asks for a chunk's mark right after its last instance, when the
    instance reader has read exactly the lines up to it (it reads a line, yields its
    instance, and reads on only when asked), so a chunk's mark is the digest of the
    input up to its last line, header lines included.
    """

    def __init__(self, lines: Iterable[bytes]):
        self._lines = lines
        self._digest = hashlib.sha256()

    def __iter__(self) -> Iterator[bytes]:
        for line in self._lines:
            self._digest.update(line)
            yield line

    def mark(self) -> str:
        return self._digest.hexdigest()


def input_lines_digest(input_file: str, lines: int) -> str:
    """SHA-256 of the first `lines` lines of --input_file, as read (a .gz decompressed):
    HashedLines' mark after them."""
    digest = hashlib.sha256()
    stream = open_input(input_file)
    try:
        for number, line in enumerate(stream, 1):
            if number > lines:
                break
            digest.update(line)
    finally:
        stream.close()
    return digest.hexdigest()


class ResumableOutput:
    """OUTPUT.partial while a run writes it; see the module docstring.

    Use: `with resumable.writing() as (stream, point):` (the text stream and the
    ResumePoint to go on from), calling `chunk_written(point)` after each chunk's
    lines (it stops the run there if a signal came); the block's end commits, an
    error abandons (`start`, `commit`, `abandon`).

    Args:
      output_file: --output_file (a file, not standard output).
      input_file: --input_file (a file, not standard input).
      identity: what must be the same for answers to be joined: {"model": ...,
        "flags": ...}, each a JSON-able dict (compared key by key).
    """

    def __init__(self, output_file: str, input_file: str, identity: dict):
        self.output_file = output_file
        self.input_file = input_file
        self.identity = json.loads(json.dumps(identity, sort_keys=True, default=str))
        self.partial = output_file + PARTIAL_SUFFIX
        self.record_path = output_file + RECORD_SUFFIX
        self.resumed: Optional[dict] = None     # the record gone on from
        self.point = ResumePoint()
        self.signal: Optional[int] = None
        self._raw: Optional[IO[bytes]] = None
        self._text: Optional[io.TextIOWrapper] = None
        self._handlers: dict = {}

    @contextlib.contextmanager
    def writing(self) -> Iterator[tuple]:
        """`start()`; at the block's end `commit()`, on an error `abandon()`; a stop
        (Stopped, from chunk_written) has kept the answers already."""
        stream, point = self.start()
        try:
            yield stream, point
        except Stopped:
            raise
        except BaseException:
            self.abandon()
            raise
        self.commit()

    # --- starting --------------------------------------------------------------

    def start(self) -> tuple:
        """(the text stream to write answers to, the ResumePoint it goes on from)."""
        in_use = (f"--output_file={self.output_file}: another bert-ad predict is writing it "
                  f"({self.partial} is in use); wait for it, or give another --output_file")
        if is_live(self.partial):
            fail(in_use)
        record = self._read_record()
        if record is not None:
            self._check(record)
        left = record is None and os.path.lexists(self.partial)
        # Opened without truncating, then locked, then cut: two runs started at once
        # cannot cut each other's answers. Held while written: another run sees it live.
        raw = os.fdopen(os.open(self.partial, os.O_RDWR | os.O_CREAT, 0o666), "r+b")
        try:
            fcntl.flock(raw.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raw.close()
            fail(in_use)
        self._raw = raw
        if record is not None:
            self.resumed = record
            self.point = ResumePoint(record["answers"], record["input_lines"],
                                     list(record["header"]))
            log.info("predict: going on from line %d of --input_file=%s: the answers to the "
                     "lines before it (%d) are kept in %s from the run that stopped",
                     self.point.input_lines + 1, self.input_file, self.point.answers,
                     self.partial)
        elif left:
            log.info("predict: %s has no %s beside it (a run killed outright left it): "
                     "starting over", self.partial, os.path.basename(self.record_path))
        raw.truncate(record["output_bytes"] if record is not None else 0)   # what is kept
        raw.seek(0, os.SEEK_END)
        self._text = answer_stream(raw, self.output_file)   # gzip: a member after the kept
        self._handlers = install(self._on_signal)
        return self._text, self.point

    def _read_record(self) -> Optional[dict]:
        if not os.path.exists(self.record_path):
            return None
        if not os.path.exists(self.partial):
            fail(f"{self.record_path} records answers kept in {self.partial}, which is "
                 f"gone; remove {self.record_path} to start over")
        try:
            with open(self.record_path, encoding="utf-8") as f:
                record = json.load(f)
            keys = ("answers", "input_lines", "header", "output_bytes", "input_sha256")
            if record.get("version") != RECORD_VERSION or not all(k in record for k in keys):
                raise ValueError("not a record of this version")
        except (OSError, ValueError) as e:
            fail(f"{self.record_path} cannot be read ({e}); remove it and {self.partial} "
                 "to start over")
        if os.path.getsize(self.partial) < record["output_bytes"]:
            fail(f"{self.partial} is shorter than {self.record_path} says "
                 f"({os.path.getsize(self.partial)} of {record['output_bytes']} bytes): it "
                 "was changed since; remove both to start over")
        return record

    def _check(self, record: dict) -> None:
        """One line naming what differs from the run that wrote the partial."""
        start_over = (f"run the command that wrote it to finish it, or remove {self.partial} "
                      f"and {self.record_path} to start over")
        for part, named in (("model", "another model"), ("flags", "other flags")):
            kept, now = record.get(part, {}), self.identity.get(part, {})
            differ = sorted(k for k in set(kept) | set(now) if kept.get(k) != now.get(k))
            if differ:
                what = ", ".join(f"{k}: {kept.get(k)!r} then, {now.get(k)!r} now"
                                 for k in differ[:3])
                fail(f"{self.partial} holds the answers to the first {record['answers']} "
                     f"line(s) made with {named} ({what}); {start_over}")
        if input_lines_digest(self.input_file, record["input_lines"]) != record["input_sha256"]:
            fail(f"{self.partial} holds the answers to the first {record['input_lines']} "
                 f"line(s) of --input_file={self.input_file}, and those lines have changed "
                 f"since; {start_over}")

    # --- the loop ---------------------------------------------------------------

    def _on_signal(self, signum: int, frame=None) -> None:
        if self.signal is not None:
            # A second signal: at once. The partial holds at least the bytes the last
            # record names, so that record stays good.
            write_from_handler(
                f"error: stopped by {signal_name(signum)} at once (a second signal): "
                f"{self.partial} keeps what {os.path.basename(self.record_path)} records, "
                "if there is one; the same command goes on from there")
            os._exit(128 + signum)
        self.signal = signum
        log.info("%s: stopping after the chunk being scored; the answers so far are kept "
                 "(again to stop at once)", signal_name(signum))

    def chunk_written(self, point: ResumePoint) -> None:
        """A chunk's lines are in the stream: `point` is where they end. Stops the
        run here (Stopped, exit 128 + the signal) if a stop signal came."""
        self.point = point
        if self.signal is None:
            return
        self._keep()
        raise Stopped(f"stopped by {signal_name(self.signal)} after line {point.input_lines} "
                      f"of --input_file={self.input_file}: the answers to it and the lines "
                      f"before it ({point.answers}) are kept in {self.partial}; the same "
                      "command goes on from there", 128 + self.signal)

    def _keep(self) -> None:
        """Close the partial where the answers end and record where that is."""
        self._close_stream()
        record = dict(self.identity, version=RECORD_VERSION,
                      output_file=os.path.abspath(self.output_file),
                      input_file=os.path.abspath(self.input_file),
                      answers=self.point.answers, input_lines=self.point.input_lines,
                      header=self.point.header, output_bytes=os.path.getsize(self.partial),
                      input_sha256=self.point.input_sha256)
        with atomic_open(self.record_path) as f:
            json.dump(record, f, indent=1, ensure_ascii=False)
            f.write("\n")
        self._release()

    # --- the end ----------------------------------------------------------------

    def commit(self) -> None:
        """Every line answered: the partial becomes --output_file, the record goes."""
        self._close_stream()
        os.replace(self.partial, self.output_file)
        self._release()
        remove_quietly(self.record_path)
        if self.signal is not None:
            log.info("predict: the last chunk was answered before %s stopped the run: "
                     "the output is complete", signal_name(self.signal))

    def abandon(self) -> None:
        """An error: a resumed partial cut back to its record, a new one removed."""
        try:
            self._close_stream()
        except OSError:
            pass
        if self.resumed is not None:
            try:
                os.truncate(self.partial, self.resumed["output_bytes"])
            except OSError:
                pass  # the next run cuts it back to the record anyway
        else:
            remove_quietly(self.partial)
        self._release()

    def _close_stream(self) -> None:
        """Flush the answers (closing a gzip member) and sync them to the disk."""
        if self._text is not None:
            text, self._text = self._text, None
            if self.output_file.endswith(".gz"):
                text.close()            # closes the member; the raw file stays open
            else:
                text.flush()
                text.detach()
            self._raw.flush()
            os.fsync(self._raw.fileno())

    def _release(self) -> None:
        restore(self._handlers)
        self._handlers = {}
        if self._raw is not None:
            raw, self._raw = self._raw, None
            raw.close()    # the lock goes with the descriptor
        fsync_path(os.path.dirname(os.path.abspath(self.output_file)))
