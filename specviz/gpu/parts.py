"""A payload too big for one transfer, cut into parts that each fit one, and joined again exactly.

A transfer to a lent GPU machine carries at most 64 MiB, the tracked tree included, and the default
target's GGUF alone is larger. So `pack` (here) writes one payload, a gzip'd tar of the GGUF and the wheels
the machine lacks, and cuts it into parts, each in its own folder `.gpu/part-<i>/` beside a copy of the
manifest (the sha256 of every part, of the payload and of every file in it). There, each call `stash`es
its part outside the tree (replaced on every call; /tmp stays while the machine does), and the last
`assemble`s them, checking every part, then the joined payload, then every file.
Standard library only: it runs before the wheels it unpacks are installed.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

MIB = 1024 * 1024
TRANSFER_LIMIT = 64 * MIB  # one `run` call's tree, carried paths included
MARGIN = 2 * MIB  # for files the tree gains between `pack` and the calls (a note, a record)
SMALLEST_PART = 8 * MIB  # below this the calls outnumber what a 15-minute lease can start
MANIFEST = "manifest.json"
PAYLOAD = "payload.tar.gz"
GGUF_ENV = "SPECVIZ_GGUF"  # the carried GGUF, which specviz.models.convert converts instead of the wheel's


def sha256_of(path: Path) -> str:
    with open(path, "rb") as stream:
        return hashlib.file_digest(stream, "sha256").hexdigest()


def travelling_bytes(repo: Path) -> int:
    """What every call carries besides its parts: tracked files and untracked ones git does not ignore."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=repo,
                            capture_output=True, check=True).stdout.split(b"\0")
    return sum((repo / name.decode()).stat().st_size for name in listed if name and (repo / name.decode()).is_file())


def part_bytes_for(tree_bytes: int, limit: int = TRANSFER_LIMIT) -> int:
    """The largest part one call can carry beside the tree (and a manifest), or a message why none fits."""
    room = limit - tree_bytes - MARGIN
    if room < SMALLEST_PART:
        raise ValueError(f"the travelling tree is {tree_bytes / MIB:.1f} MiB: with the {limit / MIB:.0f} MiB a call "
                         f"carries that leaves {max(room, 0) / MIB:.1f} MiB a part, under the {SMALLEST_PART / MIB:.0f} "
                         f"MiB that keeps the calls few; shrink the tree first")
    return room


def pack(files: dict[str, Path], dest: Path, part_bytes: int) -> dict:
    """The files (archive name → path) as one payload cut into parts under dest/part-<i>/; the manifest."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    payload = dest / PAYLOAD
    with tarfile.open(payload, "w:gz", compresslevel=1) as archive:  # level 1: the GGUF barely compresses anyway
        for name, path in files.items():
            archive.add(path, arcname=name)
    parts = []
    with open(payload, "rb") as stream:
        for index, chunk in enumerate(iter(lambda: stream.read(part_bytes), b""), start=1):
            folder = dest / f"part-{index}"
            folder.mkdir()
            (folder / f"{PAYLOAD}.{index}").write_bytes(chunk)
            parts.append({"index": index, "file": f"{PAYLOAD}.{index}", "bytes": len(chunk),
                          "sha256": hashlib.sha256(chunk).hexdigest()})
    manifest = {"payload_sha256": sha256_of(payload), "payload_bytes": payload.stat().st_size, "parts": parts,
                "files": {name: {"bytes": path.stat().st_size, "sha256": sha256_of(path)} for name, path in files.items()}}
    payload.unlink()  # the parts are the payload now
    for part in parts:
        (dest / f"part-{part['index']}" / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


def read_manifest(folder: Path) -> dict:
    return json.loads((folder / MANIFEST).read_text())


def stash(part_dir: Path, store: Path) -> list[int]:
    """Copy a carried part into the store outside the tree, checked; the parts the store now holds.
    A store holding another payload's parts is emptied first."""
    manifest = read_manifest(part_dir)
    store.mkdir(parents=True, exist_ok=True)
    if (store / MANIFEST).is_file() and read_manifest(store)["payload_sha256"] != manifest["payload_sha256"]:
        shutil.rmtree(store)
        store.mkdir(parents=True)
    shutil.copyfile(part_dir / MANIFEST, store / MANIFEST)
    for part in manifest["parts"]:
        path = part_dir / part["file"]
        if path.is_file() and not is_intact(path, part):
            raise ValueError(f"{path.name} is damaged ({path.stat().st_size} bytes, sha256 {sha256_of(path)[:12]}…; "
                             f"the manifest says {part['bytes']} bytes, {part['sha256'][:12]}…): "
                             "pack and send it again")
        if path.is_file():
            shutil.copyfile(path, store / part["file"])
    return [part["index"] for part in manifest["parts"] if is_intact(store / part["file"], part)]


def is_intact(path: Path, part: dict) -> bool:
    return path.is_file() and path.stat().st_size == part["bytes"] and sha256_of(path) == part["sha256"]


def assemble(store: Path, dest: Path) -> dict[str, Path]:
    """Join the stored parts, check the payload and unpack it into dest: archive name → path, each checked."""
    manifest = read_manifest(store)
    missing = [part["index"] for part in manifest["parts"] if not is_intact(store / part["file"], part)]
    if missing:
        raise ValueError(f"parts {', '.join(map(str, missing))} of {len(manifest['parts'])} are not in {store} (or damaged): "
                         "stash each with its own call, back to back, while the machine stays up")
    dest.mkdir(parents=True, exist_ok=True)
    payload = dest / PAYLOAD
    with open(payload, "wb") as out:
        for part in manifest["parts"]:
            with open(store / part["file"], "rb") as stream:
                shutil.copyfileobj(stream, out, MIB)
    if sha256_of(payload) != manifest["payload_sha256"]:
        raise ValueError("the joined parts are not the payload that was packed: pack and send every part again")
    with tarfile.open(payload) as archive:
        archive.extractall(dest, filter="data")
    payload.unlink()
    files = {name: dest / name for name in manifest["files"]}
    for name, expected in manifest["files"].items():
        if sha256_of(files[name]) != expected["sha256"]:
            raise ValueError(f"{name} unpacked differently from what was packed")
    return files


def install_wheels(wheels: list[Path], site: Path) -> None:
    """pip-install the wheels into `site` (no index, no dependencies: the machine has the rest), which
    the run then puts first on PYTHONPATH; the interpreter's own packages stay as they are."""
    if wheels:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
                        "--disable-pip-version-check", "--no-compile", "--upgrade", "--target", str(site), *map(str, wheels)], check=True)
