"""A model's versions while it is served: new ones found, loaded, switched to; old ones drained.

TensorFlow Serving's model base path: `--model_dir=BASE` (OUTPUT_DIR/export, or
a fine-tuned folder, whose export/ is one) holds numbered version folders.
With --poll_s the server looks at BASE again and again; a version newer than
the served one is loaded, checked and warmed on a loader thread while the old
one goes on answering, then requests go to the new one, and the old one is
unloaded once the requests it holds are answered (TF Serving's default
policy: the newest version alone is served).

A version's folder is looked at only once it is published: the export writes
it whole in a hidden `.STEP.XXXXXXXX.staging` folder beside it and renames it
(bert_ad/folders.py), so only names of digits alone, holding export.json, are
versions. A version that fails to load or to score is one log line and stays
END with its error in GET /v1/models/NAME; it is tried again only when a
folder is published again under its number (a new inode).

Everything here runs on the server's event loop, but for `load` and `close`,
which the server runs on its loader thread.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from typing import Callable, Dict, List, Optional, Tuple

from bert_ad.errors import UserError
from bert_ad.inference import layout

log = logging.getLogger("bert_ad")

VERSION_NAME = re.compile(r"^[0-9]+$")   # not `.1200.1a2b3c4d.staging`: not published yet
LOADING, AVAILABLE, UNLOADING, END = "LOADING", "AVAILABLE", "UNLOADING", "END"
ENDED_KEPT = 10   # versions listed as END (unloaded or failed) in the status, newest first


@dataclasses.dataclass(eq=False)
class Version:
    """One version's state, TF Serving's names; `error` set when it failed."""
    number: int
    state: str
    model: object = None       # its ServedModel while LOADING is over and until END
    requests: int = 0          # requests holding it (it is unloaded at 0 once replaced)
    folder: Tuple[int, int] = (0, 0)   # (device, inode) of the folder tried
    error: str = ""
    error_code: str = "OK"

    def status(self) -> dict:
        """GET /v1/models/NAME's entry for it."""
        return {"version": str(self.number), "state": self.state,
                "status": {"error_code": self.error_code, "error_message": self.error}}


def published_versions(base: str) -> List[Tuple[int, str]]:
    """(number, folder) of BASE's published versions, newest first: folders named
    with digits alone that hold export.json (a folder being copied in without one
    is not a version yet)."""
    try:
        names = os.listdir(base)
    except OSError:
        return []
    found = [(int(name), os.path.join(base, name)) for name in names
             if VERSION_NAME.match(name)]
    return sorted(((number, folder) for number, folder in found
                   if os.path.isfile(layout.metadata_path(folder))), reverse=True)


def _folder_id(folder: str) -> Tuple[int, int]:
    try:
        stat = os.stat(folder)
    except OSError:
        return (0, 0)
    return (stat.st_dev, stat.st_ino)


def first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".replace("UserError: ", "")


class ModelVersions:
    """The versions of one served model (see the module docstring).

    Args:
      name: the model's name in /v1/models/NAME.
      served: the ServedModel loaded at start (warmed).
      base: the folder whose numbered versions are watched (None: a single
        export, never replaced).
      load: (export folder, version number) -> a warmed ServedModel, on the
        loader thread; raises when the folder is no servable export.
    """

    def __init__(self, name: str, served, base: Optional[str] = None,
                 load: Optional[Callable[[str, int], object]] = None):
        self.name = name
        self.base = base
        self.load = load
        current = Version(served.version, AVAILABLE, served,
                          folder=_folder_id(served.export_dir))
        self.versions: Dict[int, Version] = {current.number: current}
        self.current = current

    # --- requests --------------------------------------------------------------------

    def model(self, number: Optional[int] = None):
        """The ServedModel of version `number` (None: the newest); LookupError
        when that version is not AVAILABLE."""
        return self._available(number).model

    def acquire(self, number: Optional[int] = None):
        """The ServedModel a request is answered by (as `model`), held until
        `release`: a version replaced meanwhile is unloaded after it."""
        version = self._available(number)
        version.requests += 1
        return version.model

    def _available(self, number: Optional[int]) -> Version:
        version = self.current if number is None else self.versions.get(number)
        if version is None or version.state != AVAILABLE:
            raise LookupError(number)
        return version

    def release(self, model) -> Optional[Version]:
        """A request is answered; the version to unload now, if this was the last
        request an old version held."""
        version = self.versions.get(model.version)
        if version is None or version.model is not model:
            return None
        version.requests -= 1
        return version if version.state == UNLOADING and not version.requests else None

    def status(self) -> List[dict]:
        return [v.status() for v in sorted(self.versions.values(), key=lambda v: -v.number)]

    # --- new versions ----------------------------------------------------------------

    def candidate(self) -> Optional[Tuple[int, str]]:
        """(number, folder) of a published version newer than the served one and not
        tried yet in this folder (the loader thread calls it: it reads the disk)."""
        if self.base is None:
            return None
        for number, folder in published_versions(self.base):
            if number <= self.current.number:
                return None
            tried = self.versions.get(number)
            if tried is None or tried.folder != _folder_id(folder):
                return number, folder
            # The newest was tried in this very folder (it failed): wait for a newer one.
            return None
        return None

    def loading(self, number: int, folder: str) -> Version:
        version = Version(number, LOADING, folder=_folder_id(folder))
        self.versions[number] = version
        log.info("serve: model %s: version %d found in %s; loading it (version %d "
                 "answers meanwhile)", self.name, number, folder, self.current.number)
        return version

    def check(self, model) -> None:
        """A new version answers as the served one does: the same task (the
        clients' instances and answers keep their shape)."""
        task, served = model.metadata.task, self.current.model.metadata.task
        if task != served:
            raise UserError(f"it is an export of the {task} task, and {self.name} serves "
                            f"{served}: serve it under another name")

    def failed(self, version: Version, error: BaseException) -> None:
        """The new version did not load: one line; the served one goes on."""
        version.state = END
        version.error = first_line(error)
        version.error_code = "INVALID_ARGUMENT" if isinstance(error, UserError) else "UNKNOWN"
        log.warning("serve: model %s version %d not served (version %d goes on answering): "
                    "%s", self.name, version.number, self.current.number, version.error)
        self._forget_old_ends()

    def switch(self, version: Version, model) -> Optional[Version]:
        """`model` (loaded, warmed, batching) answers from now on; the version it
        replaces drains, and is returned when it holds no request (unload it now)."""
        old = self.current
        version.model, version.state = model, AVAILABLE
        self.current = version
        old.state = UNLOADING
        log.info("serve: model %s: version %d answers from now on; version %d is unloaded "
                 "once its %d request(s) are answered", self.name, version.number,
                 old.number, old.requests)
        return old if not old.requests else None

    def unloaded(self, version: Version) -> None:
        version.state, version.model = END, None
        log.info("serve: model %s version %d unloaded", self.name, version.number)
        self._forget_old_ends()

    def loaded_models(self) -> list:
        return [v.model for v in self.versions.values() if v.model is not None]

    def _forget_old_ends(self) -> None:
        ended = sorted((v for v in self.versions.values() if v.state == END),
                       key=lambda v: -v.number)
        for version in ended[ENDED_KEPT:]:
            del self.versions[version.number]
