# SPDX-License-Identifier: GPL-2.0
"""The guest agent is built once per cache, also when parallel workers
(`swifi campaign --jobs 2` on a fresh cache) ask for it at the same moment."""
from concurrent.futures import ThreadPoolExecutor

from lab import initramfs


def test_parallel_builds_of_the_agent_on_a_fresh_cache_all_succeed(tmp_path, monkeypatch):
    monkeypatch.setenv("UNDERSTUDY_CACHE", str(tmp_path))
    with ThreadPoolExecutor(4) as pool:
        built = list(pool.map(lambda _: initramfs.build_agent(), range(4)))
    assert built == [tmp_path / "labagent"] * 4
    assert built[0].read_bytes()[:4] == b"\x7fELF"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["labagent"], "no half-built file is left"
