"""Packs a GPU run's results into what the device tool brings back: at most 8 files of at most 16 MiB each (64 MiB
together) from $OUT, named in letters, digits, '.', '_' and '-'. Anything past that is left on the machine, so a
run writing one file per workload would lose some of them, perhaps ``ours.json``.

    python3 bench/gpu/collect.py WORK OUT

WORK holds what ``run_on_device.sh`` wrote; OUT gets ``ours.json``, ``gpu_peer.json``, ``gpu_table.md`` (those
that exist), ``run.log`` (the logs and ``nvidia-smi``, one after another), ``traces.tar`` (the profiled steps'
traces) and ``hlo.tar`` (each module's optimised HLO), each tar in the order the runner wrote them (the goal's row
first) up to 15 MiB; what does not fit is named in ``run.log``. Standard library only.
"""

from __future__ import annotations

import os
import shutil
import sys
import tarfile

FILE_LIMIT = 16 * 2 ** 20
TAR_BUDGET = 15 * 2 ** 20  # under the limit, leaving room for tar's headers
RESULTS = ("ours.json", "gpu_peer.json", "gpu_table.md")
LOGS = ("nvidia-smi.txt", "versions.txt", "ours.log", "peer.log", "gpu_peer.md")


def collect(work: str, out: str) -> list[str]:
    """Writes OUT's files (see the module docstring); returns their names."""
    os.makedirs(out, exist_ok=True)
    written, notes = [], []
    for name in RESULTS:
        path = os.path.join(work, name)
        if os.path.isfile(path):
            if os.path.getsize(path) > FILE_LIMIT:
                notes.append(f"collect: {name} is {os.path.getsize(path) / 2 ** 20:.1f} MiB, over the limit: left")
                continue
            shutil.copyfile(path, os.path.join(out, name))
            written.append(name)
    hlo = os.path.join(work, "hlo")
    files = sorted((os.path.join(hlo, f) for f in (os.listdir(hlo) if os.path.isdir(hlo) else [])),
                   key=lambda p: (os.path.getmtime(p), p))  # the run's order: the goal's row first
    for tar_name, suffix in (("traces.tar", ".xplane.pb.gz"), ("hlo.tar", ".optimized.hlo.gz")):
        packed = _pack([p for p in files if p.endswith(suffix)], os.path.join(out, tar_name), notes)
        if packed:
            written.append(tar_name)
    with open(os.path.join(out, "run.log"), "w", encoding="utf-8", errors="replace") as log:
        for name in LOGS:
            path = os.path.join(work, name)
            if os.path.isfile(path):
                log.write(f"===== {name}\n")
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                # The tail where a log is long: the limit is the device tool's, and the end says how it ended.
                log.write(text if len(text) < 4 * 2 ** 20 else text[-4 * 2 ** 20:])
                log.write("\n")
        for note in notes:
            log.write(note + "\n")
    written.append("run.log")
    return written


def _pack(files: list, tar_path: str, notes: list) -> int:
    """``files`` into ``tar_path`` in their order, up to TAR_BUDGET; the ones left out named in ``notes``."""
    total, packed = 0, []
    for path in files:
        size = os.path.getsize(path)
        if total + size > TAR_BUDGET:
            notes.append(f"collect: {os.path.basename(path)} ({size / 2 ** 20:.2f} MiB) left out of "
                         f"{os.path.basename(tar_path)}")
            continue
        total += size
        packed.append(path)
    if packed:
        with tarfile.open(tar_path, "w") as tar:
            for path in packed:
                tar.add(path, arcname=os.path.basename(path))
    return len(packed)


def main(argv=None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        sys.exit("usage: collect.py WORK OUT")
    names = collect(*args)
    print(f"collect.py: {', '.join(names)} in {args[1]}")


if __name__ == "__main__":
    main()
