"""--poll_s: new versions loaded beside the served one, switched to; old ones unloaded when drained.

The server's side of model_versions.py (which keeps each model's versions and
their states): an asyncio task looks at each model base path every --poll_s
seconds; a newer published version is loaded, checked (the same task) and
warmed on one loader thread while the served version goes on answering, then
given its batcher and made the one requests get. The version it replaces is
unloaded (its batcher and scorer closed, on the loader thread) once the last
request holding it is answered, so no request is failed or answered by a
closed model. A version that fails anywhere on the way is one log line
(ModelVersions.failed) and the served one goes on.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from typing import Callable, Dict, Optional

from bert_ad.inference.model_versions import ModelVersions, Version

log = logging.getLogger("bert_ad")


class VersionWatcher:
    """Every model's versions while the server runs.

    Args:
      models: {name: ModelVersions}.
      poll_s: seconds between looks at the base paths (0: never).
      start_batching: gives a loaded model its batcher (the server's settings).
    """

    def __init__(self, models: Dict[str, ModelVersions], poll_s: float,
                 start_batching: Callable[[object], None]):
        self.models = models
        self.poll_s = poll_s
        self._start_batching = start_batching
        self._stopping = False
        # Loads, checks, warms and unloads versions, one at a time, off the event loop.
        self._loader = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="bert_ad-loader")

    def start(self) -> Optional[asyncio.Future]:
        """The watching task (on the running loop), or None when nothing is watched."""
        watching = [v for v in self.models.values() if v.base is not None]
        if not watching or self.poll_s <= 0:
            return None
        log.info("serve: looking for new versions of %s every --poll_s=%g seconds",
                 ", ".join(f"{v.name} in {v.base}" for v in watching), self.poll_s)
        return asyncio.ensure_future(self._watch(watching))

    def release(self, model) -> None:
        """A request `model` answered is done; an old version it was the last of
        is unloaded."""
        versions = self.models[model.name]
        drained = versions.release(model)
        if drained is not None:
            asyncio.ensure_future(self._unload(versions, drained))

    def close(self) -> None:
        """The server stops: wait for a version being loaded, close every one loaded."""
        self._stopping = True
        self._loader.shutdown(wait=True)
        for versions in self.models.values():
            for model in versions.loaded_models():
                model.close()

    async def _watch(self, watching) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.poll_s)
            for versions in watching:
                found = await loop.run_in_executor(self._loader, versions.candidate)
                if found is not None and not self._stopping:
                    await self._load(versions, *found)

    async def _load(self, versions: ModelVersions, number: int, folder: str) -> None:
        loop = asyncio.get_running_loop()
        version = versions.loading(number, folder)

        def load():
            model = versions.load(folder, number)
            try:
                versions.check(model)
            except BaseException:
                model.close()
                raise
            return model

        try:
            model = await loop.run_in_executor(self._loader, load)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 (whatever it is, the new version is not served)
            versions.failed(version, e)
            return
        version.model = model   # closed by close() if the server stops now
        self._start_batching(model)
        old = versions.switch(version, model)
        if old is not None:
            await self._unload(versions, old)

    async def _unload(self, versions: ModelVersions, version: Version) -> None:
        if self._stopping:
            return   # close() closes every loaded version
        await asyncio.get_running_loop().run_in_executor(self._loader, version.model.close)
        versions.unloaded(version)
