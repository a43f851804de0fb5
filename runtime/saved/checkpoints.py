"""Saved points on disk: DIR/<scope>/<key>.safetensors for the tensors, <key>.json for the manifest.

The manifest names the saved-point format, the scope (keys.scope_of), the key, the length, the point's
extents (point.Extent: id, positions and the checkpoint whose file holds its keys and values) and, per
tensor of its file, its dtype, shape and sha256. A point's file holds its token ids, GDN states and conv
windows and the extents no checkpoint written before it holds: a point that extends a written one writes
only its new positions' keys and values, and a read takes the others from the files its manifest names.
Both files are written atomically (a temporary file in the same directory, fsync, rename, then fsync of
the directory), tensors first: a manifest exists only for complete tensors.
A read verifies everything the manifests it reads say (checksums in parallel threads) and that the tokens
hash to the key and to every extent's id, and refuses a corrupt, truncated, foreign or other-format
checkpoint, or one whose extent's file is gone, with a logged reason: the request is then computed fresh.
Removing a session's checkpoints keeps a file another checkpoint's extents still read. A
failed write (a full disk, a read-only directory) is logged and counted; it never fails a request.
Writes run on a background thread, off the request's path (at most WRITE_QUEUE points wait; a save past
that waits for room); `flush` waits for every queued write, and so does the process at exit. The caller's
thread copies what a write takes to pageable host memory: the writer makes no CUDA call, which would break
a CUDA graph the main thread may be capturing.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import queue
import secrets
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import safetensors.torch
import torch

from flidec.runtime.saved.keys import BLOCK, FORMAT, prefix_keys
from flidec.runtime.saved.point import Extent, PointLayout, PointRefused, SavedPoint, check_tensors, extent_id

log = logging.getLogger("flidec.saved")
WRITE_QUEUE = 8

DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16",
               torch.int64: "int64"}


def tensor_sha256(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()).hexdigest()


@cache
def _hashers() -> ThreadPoolExecutor:
    """Threads for a read's checksums: hashlib releases the GIL, so a point's tensors hash side by side,
    and beside their copy to the device. (Writes hash on the writer thread: it also runs at exit, after
    the pool is shut down.)"""
    return ThreadPoolExecutor(min(8, os.cpu_count() or 1), thread_name_prefix="flidec-sha256")


@dataclass(frozen=True)
class _Write:
    """One checkpoint to write: its tensors in host memory and its manifest's extents."""

    key: str
    length: int
    tensors: dict[str, torch.Tensor]
    extents: list[dict]


class Checkpoints:
    """One scope's checkpoints in `directory` (created if missing; a directory that cannot be created or
    written is reported on every write and never fails a request)."""

    def __init__(self, directory: str | Path, scope: str, layout: PointLayout):
        self.root = Path(directory)
        self.dir = self.root / scope[:32]
        self.scope, self.layout = scope, layout
        self.refused: Counter[str] = Counter()  # reason kind -> checkpoints refused
        self.write_failures = 0
        self._refused_keys: set[str] = set()  # refused once: not read again until rewritten
        self._files: dict[str, str] = {}  # extent id -> the checkpoint whose file holds it (written or read)
        self._keys: set[str] = set()  # checkpoints in the directory (refresh)
        self._stamp: int | None = None  # the directory's mtime when they were listed
        self._queue: queue.Queue[_Write] = queue.Queue(WRITE_QUEUE)
        self._writer: threading.Thread | None = None
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            log.warning("saved states: checkpoint directory %s unusable (%s): nothing will be written",
                        self.dir, e.strerror or e)

    def paths(self, key: str) -> tuple[Path, Path]:
        return self.dir / f"{key}.safetensors", self.dir / f"{key}.json"

    def has(self, key: str) -> bool:
        """Whether a checkpoint of `key` is in the directory, as of the last `refresh`."""
        return key not in self._refused_keys and key in self._keys

    def refresh(self) -> None:
        """List the directory's checkpoints again if it changed since (another process may write to it): one
        stat a lookup, not one a block."""
        try:
            stamp = self.dir.stat().st_mtime_ns
            if stamp != self._stamp:
                self._keys = {m.name[: -len(".json")] for m in self.dir.glob("*.json")
                              if not m.name.endswith(".extents.json")}
                self._stamp = stamp
        except OSError:
            self._keys, self._stamp = set(), None

    def nbytes(self) -> int:
        """Bytes of this scope's checkpoint files now."""
        try:
            return sum(p.stat().st_size for p in self.dir.iterdir() if p.suffix in (".safetensors", ".json"))
        except OSError:
            return 0

    def write(self, point: SavedPoint) -> None:
        """Queue `point` for its atomic write (the writer thread starts with the first). Its file takes the
        extents no checkpoint holds yet, copied to host memory here; the others are named in its manifest."""
        extents, tensors = [], {}
        for name in self.layout.fixed_shapes(point.length):
            tensors[name] = point.tokens if name == "tokens" else _tensor_of(point, name)
        for e in point.extents:
            file = self._files.get(e.id)
            if file is None:
                file = point.key
                for i, (k, v) in enumerate(zip(e.keys, e.values, strict=True)):
                    tensors[f"kv.{e.start}.attention.{i}.keys"] = k
                    tensors[f"kv.{e.start}.attention.{i}.values"] = v
                self._files[e.id] = point.key
            extents.append({"id": e.id, "start": e.start, "end": e.end, "file": file})
        host = {name: t.detach().to("cpu").contiguous() for name, t in tensors.items()}
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_queued, name="flidec-checkpoints", daemon=True)
            self._writer.start()
            atexit.register(self.flush)
        self._queue.put(_Write(point.key, point.length, host, extents))

    def flush(self) -> None:
        """Wait until every queued point is written (or its failure logged)."""
        self._queue.join()

    def _write_queued(self) -> None:
        while True:
            item = self._queue.get()
            try:
                self.write_now(item)
            except Exception as e:  # noqa: BLE001 -- a writer that dies would lose every later point
                self._failed(item)
                log.warning("saved states: could not write checkpoint %s (%s: %s)", item.key,
                            type(e).__name__, e)
            finally:
                self._queue.task_done()

    def write_now(self, item: _Write) -> bool:
        """Write one checkpoint atomically, now; False (logged) when the directory cannot take it."""
        digests = {name: tensor_sha256(t) for name, t in item.tensors.items()}
        manifest = {"flidec_saved_state": FORMAT, "scope": self.scope, "key": item.key, "length": item.length,
                    "extents": item.extents,
                    "tensors": {name: {"dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape),
                                       "sha256": digests[name]} for name, t in sorted(item.tensors.items())}}
        data, meta = self.paths(item.key)
        try:
            _write_atomic(data, safetensors.torch.save(item.tensors))
            _write_atomic(meta, json.dumps(manifest, indent=1).encode())
            _fsync_dir(self.dir)
        except OSError as e:
            self._failed(item)
            log.warning("saved states: could not write checkpoint %s (%s); the request is unaffected", data,
                        e.strerror or e)
            return False
        self._refused_keys.discard(item.key)
        self._keys.add(item.key)
        return True

    def _failed(self, item: _Write) -> None:
        """A write that failed: later points write the extents it would have held themselves."""
        self.write_failures += 1
        for e in item.extents:
            if e["file"] == item.key and self._files.get(e["id"]) == item.key:
                del self._files[e["id"]]

    def read(self, key: str, device: torch.device | None = None) -> SavedPoint | None:
        """The verified point under `key` (on `device`, else in host memory), or None (a refusal is logged
        with its reason and counted)."""
        data, meta = self.paths(key)
        try:
            return self._read(key, data, meta, device)
        except PointRefused as e:
            self._refuse(key, str(e).split(":")[0], f"{data}: {e}")
        except Exception as e:  # a damaged file may fail anywhere in a parser: refused, never raised
            self._refuse(key, "unreadable", f"{data}: unreadable ({type(e).__name__}: {e})")
        return None

    def remove(self, keys: set[str]) -> None:
        """Remove these checkpoints. One whose file another checkpoint's extents read keeps its file, its
        manifest renamed <key>.extents.json: no longer a saved point, still its extents' file, removed in
        turn once nothing reads it."""
        manifests = self._manifests()
        candidates = set(keys) | {k for k, m in manifests.items() if m["_extents_only"]}
        gone: set[str] = set()
        while True:
            read = {e["file"] for k, m in manifests.items() if k not in gone
                    for e in m.get("extents", []) if isinstance(e, dict) and e.get("file") != k}
            more = candidates - gone - read
            if not more:
                break
            gone |= more
        for key in keys | gone:
            data, meta = self.paths(key)
            try:
                if key in gone:
                    data.unlink(missing_ok=True)
                    meta.unlink(missing_ok=True)
                    meta.with_suffix(".extents.json").unlink(missing_ok=True)
                else:
                    os.replace(meta, meta.with_suffix(".extents.json"))
            except OSError as e:
                log.warning("saved states: could not remove checkpoint %s (%s)", data, e.strerror or e)
        self._keys -= keys
        self._files = {eid: file for eid, file in self._files.items() if file not in gone}

    def _manifests(self) -> dict[str, dict]:
        """Every manifest in the directory by key, an extents-only one (Checkpoints.remove) marked."""
        out: dict[str, dict] = {}
        try:
            paths = list(self.dir.glob("*.json"))
        except OSError:
            return out
        for m in paths:
            try:
                manifest = json.loads(m.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(manifest, dict):
                only = m.name.endswith(".extents.json")
                out[m.name.split(".")[0]] = {**manifest, "_extents_only": only}
        return out

    def _refuse(self, key: str, kind: str, message: str) -> None:
        self.refused[kind] += 1
        self._refused_keys.add(key)
        log.warning("saved states: checkpoint refused, computing fresh: %s", message)

    def _manifest(self, key: str) -> dict:
        """The manifest of checkpoint `key`, its format, scope, key and length checked."""
        try:
            manifest = json.loads(self.paths(key)[1].read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise PointRefused(f"bad manifest: {type(e).__name__}: {e}") from None
        return self._checked(key, manifest)

    def _checked(self, key: str, manifest: object) -> dict:
        if not isinstance(manifest, dict) or manifest.get("flidec_saved_state") != FORMAT:
            got = manifest.get("flidec_saved_state") if isinstance(manifest, dict) else None
            raise PointRefused(f"other format: saved-state format {got!r}, this runtime reads {FORMAT}")
        if manifest.get("scope") != self.scope:
            raise PointRefused("foreign: made for another model, artifact or engine")
        length = manifest.get("length")
        if manifest.get("key") != key or not isinstance(length, int) or length <= 0 or length % BLOCK:
            raise PointRefused("bad manifest: its key or length is not this file's")
        if not isinstance(manifest.get("tensors"), dict) or not isinstance(manifest.get("extents"), list):
            raise PointRefused("bad manifest: no tensor or extent list")
        return manifest

    def _tensors(self, key: str, manifest: dict, names: set[str] | None = None,
                 device: torch.device | None = None) -> dict[str, torch.Tensor]:
        """Tensors of checkpoint `key`'s file (all, or `names`), each checked against its manifest; on
        `device` (token ids stay on the host), copied there while their checksums are computed and
        returned only once every checksum holds."""
        listed = manifest["tensors"]
        data = self.paths(key)[0]
        try:
            with safetensors.safe_open(data, framework="pt") as f:
                present = set(f.keys())
                if set(listed) != present:
                    raise PointRefused("truncated: the tensor file and its manifest list different tensors")
                tensors = {n: f.get_tensor(n) for n in sorted(present if names is None else names)}
        except PointRefused:
            raise
        except OSError as e:
            raise PointRefused(f"unreadable: {e.strerror or e}") from None
        except Exception as e:
            raise PointRefused(f"corrupt: the tensor file {data.name} does not parse ({e})") from None
        for name, t in tensors.items():
            entry = listed.get(name)
            if (not isinstance(entry, dict) or entry.get("dtype") != DTYPE_NAMES.get(t.dtype)
                    or entry.get("shape") != list(t.shape)):
                raise PointRefused(f"corrupt: tensor {name} is not what the manifest lists")
        digests = {name: _hashers().submit(tensor_sha256, t) for name, t in tensors.items()}
        moved = tensors if device is None or device.type == "cpu" else {
            name: t if name == "tokens" else t.to(device) for name, t in tensors.items()}
        for name, digest in digests.items():
            if listed[name].get("sha256") != digest.result():
                raise PointRefused(f"corrupt: tensor {name} fails its checksum")
        return moved

    def _read(self, key: str, data: Path, meta: Path, device: torch.device | None) -> SavedPoint:
        manifest = self._manifest(key)
        length = manifest["length"]
        spans = _spans(manifest["extents"], length)
        own = [(a, b) for _, a, b, file in spans if file == key]
        want = dict(self.layout.fixed_shapes(length))
        for a, b in own:
            want.update(self.layout.extent_shapes(a, b))
        tensors = self._tensors(key, manifest, device=device)
        check_tensors(tensors, want)  # PointRefused: another model
        tokens = tensors["tokens"]
        prefixes = prefix_keys(self.scope, tokens.numpy(), length // BLOCK)
        if prefixes[-1] != key:
            raise PointRefused("corrupt: its tokens do not hash to its key")
        extents = []
        for eid, a, b, file in spans:
            if eid != extent_id(prefixes[b // BLOCK - 1], a):
                raise PointRefused(f"corrupt: extent {eid} is not of its tokens")
            if file == key:
                kv = tensors
            else:
                other = self._manifest_of_file(file)
                if not any(isinstance(e, dict) and e.get("id") == eid and e.get("file") == file
                           for e in other["extents"]):
                    raise PointRefused(f"corrupt: checkpoint {file} does not hold extent [{a}, {b})")
                names = set(self.layout.extent_shapes(a, b))
                kv = self._tensors(file, other, names, device)
                check_tensors(kv, self.layout.extent_shapes(a, b))
            n = self.layout.attention_layers
            extents.append(Extent(eid, a, b, tuple(kv[f"kv.{a}.attention.{i}.keys"] for i in range(n)),
                                  tuple(kv[f"kv.{a}.attention.{i}.values"] for i in range(n))))
        for eid, _, _, file in spans:
            self._files.setdefault(eid, file)
        return SavedPoint(key, length, tokens, tuple(extents),
                          tuple(tensors[f"gdn.{i}.state"] for i in range(self.layout.gdn_layers)),
                          tuple(tensors[f"gdn.{i}.window"] for i in range(self.layout.gdn_layers)))

    def _manifest_of_file(self, file: str) -> dict:
        """The manifest of a file another checkpoint reads: its point's, or the one its removal left
        (Checkpoints.remove); refused when neither can be read."""
        meta = self.paths(file)[1]
        if not meta.is_file() and meta.with_suffix(".extents.json").is_file():
            meta = meta.with_suffix(".extents.json")
        try:
            manifest = json.loads(meta.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise PointRefused(f"truncated: checkpoint {file}, which holds some of its extents, is "
                               f"unreadable ({type(e).__name__})") from None
        return self._checked(file, manifest)


def _spans(listed: list, length: int) -> list[tuple[str, int, int, str]]:
    """A manifest's extents as (id, start, end, file), checked to cover [0, length) on block boundaries."""
    out, at = [], 0
    for e in listed:
        if not (isinstance(e, dict) and isinstance(e.get("id"), str) and isinstance(e.get("file"), str)
                and e.get("start") == at and isinstance(e.get("end"), int) and at < e["end"] <= length
                and e["end"] % BLOCK == 0 and all(c in "0123456789abcdef" for c in e["file"])
                and len(e["file"]) == 32):
            raise PointRefused("bad manifest: its extents do not cover the point's positions")
        out.append((e["id"], e["start"], e["end"], e["file"]))
        at = e["end"]
    if at != length:
        raise PointRefused("bad manifest: its extents do not cover the point's positions")
    return out


def _tensor_of(point: SavedPoint, name: str) -> torch.Tensor:
    kind, i, part = name.split(".")
    return (point.states if part == "state" else point.windows)[int(i)]


def _write_atomic(path: Path, payload: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
