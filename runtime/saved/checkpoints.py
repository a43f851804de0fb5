"""Saved points on disk: DIR/<scope>/<key>.safetensors for the tensors, <key>.json for the manifest.

The manifest names the saved-point format, the scope (keys.scope_of), the key, the length and, per tensor,
its dtype, shape and sha256. Both files are written atomically (a temporary file in the same directory,
fsync, rename, then fsync of the directory), tensors first: a manifest exists only for complete tensors.
A read verifies everything the manifest says and that the tokens hash to the key, and refuses a corrupt,
truncated, foreign or other-format checkpoint with a logged reason: the request is then computed fresh. A
failed write (a full disk, a read-only directory) is logged and counted; it never fails a request.
Writes run on a background thread, off the request's path (at most WRITE_QUEUE points wait; a save past
that waits for room); `flush` waits for every queued write, and so does the process at exit. The points it
takes are in pageable host memory: the thread makes no CUDA call, which would break a CUDA graph the main
thread may be capturing.
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
from pathlib import Path

import safetensors.torch
import torch

from flidec.runtime.saved.keys import BLOCK, FORMAT, prefix_keys
from flidec.runtime.saved.point import PointLayout, PointRefused, SavedPoint

log = logging.getLogger("flidec.saved")
WRITE_QUEUE = 8

DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16",
               torch.int64: "int64"}


def tensor_sha256(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()).hexdigest()


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
        self._queue: queue.Queue[SavedPoint] = queue.Queue(WRITE_QUEUE)
        self._writer: threading.Thread | None = None
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            log.warning("saved states: checkpoint directory %s unusable (%s): nothing will be written",
                        self.dir, e.strerror or e)

    def paths(self, key: str) -> tuple[Path, Path]:
        return self.dir / f"{key}.safetensors", self.dir / f"{key}.json"

    def has(self, key: str) -> bool:
        return key not in self._refused_keys and self.paths(key)[1].is_file()

    def nbytes(self) -> int:
        """Bytes of this scope's checkpoint files now."""
        try:
            return sum(p.stat().st_size for p in self.dir.iterdir() if p.suffix in (".safetensors", ".json"))
        except OSError:
            return 0

    def write(self, point: SavedPoint) -> None:
        """Queue `point` for its atomic write (the writer thread starts with the first)."""
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_queued, name="flidec-checkpoints", daemon=True)
            self._writer.start()
            atexit.register(self.flush)
        self._queue.put(point)

    def flush(self) -> None:
        """Wait until every queued point is written (or its failure logged)."""
        self._queue.join()

    def _write_queued(self) -> None:
        while True:
            point = self._queue.get()
            try:
                self.write_now(point)
            except Exception as e:  # noqa: BLE001 -- a writer that dies would lose every later point
                self.write_failures += 1
                log.warning("saved states: could not write checkpoint %s (%s: %s)", point.key,
                            type(e).__name__, e)
            finally:
                self._queue.task_done()

    def write_now(self, point: SavedPoint) -> bool:
        """Write `point` atomically, now; False (logged) when the directory cannot take it."""
        tensors = {name: t.detach().cpu().contiguous() for name, t in point.tensors().items()}
        manifest = {"flidec_saved_state": FORMAT, "scope": self.scope, "key": point.key,
                    "length": point.length,
                    "tensors": {name: {"dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape),
                                       "sha256": tensor_sha256(t)} for name, t in sorted(tensors.items())}}
        data, meta = self.paths(point.key)
        try:
            _write_atomic(data, safetensors.torch.save(tensors))
            _write_atomic(meta, json.dumps(manifest, indent=1).encode())
            _fsync_dir(self.dir)
        except OSError as e:
            self.write_failures += 1
            log.warning("saved states: could not write checkpoint %s (%s); the request is unaffected", data,
                        e.strerror or e)
            return False
        self._refused_keys.discard(point.key)
        return True

    def read(self, key: str) -> SavedPoint | None:
        """The verified point under `key`, or None (a refusal is logged with its reason and counted)."""
        data, meta = self.paths(key)
        try:
            return self._read(key, data, meta)
        except PointRefused as e:
            self._refuse(key, str(e).split(":")[0], f"{data}: {e}")
        except Exception as e:  # a damaged file may fail anywhere in a parser: refused, never raised
            self._refuse(key, "unreadable", f"{data}: unreadable ({type(e).__name__}: {e})")
        return None

    def remove(self, key: str) -> None:
        for p in self.paths(key):
            try:
                p.unlink(missing_ok=True)
            except OSError as e:
                log.warning("saved states: could not remove %s (%s)", p, e.strerror or e)

    def _refuse(self, key: str, kind: str, message: str) -> None:
        self.refused[kind] += 1
        self._refused_keys.add(key)
        log.warning("saved states: checkpoint refused, computing fresh: %s", message)

    def _read(self, key: str, data: Path, meta: Path) -> SavedPoint:
        try:
            manifest = json.loads(meta.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise PointRefused(f"bad manifest: {type(e).__name__}: {e}") from None
        if not isinstance(manifest, dict) or manifest.get("flidec_saved_state") != FORMAT:
            got = manifest.get("flidec_saved_state") if isinstance(manifest, dict) else None
            raise PointRefused(f"other format: saved-state format {got!r}, this runtime reads {FORMAT}")
        if manifest.get("scope") != self.scope:
            raise PointRefused("foreign: made for another model, artifact or engine")
        length = manifest.get("length")
        if manifest.get("key") != key or not isinstance(length, int) or length <= 0 or length % BLOCK:
            raise PointRefused("bad manifest: its key or length is not this file's")
        listed = manifest.get("tensors")
        if not isinstance(listed, dict):
            raise PointRefused("bad manifest: no tensor list")
        try:
            tensors = safetensors.torch.load(data.read_bytes())
        except OSError as e:
            raise PointRefused(f"unreadable: {e.strerror or e}") from None
        except Exception as e:
            raise PointRefused(f"corrupt: the tensor file does not parse ({e})") from None
        if set(tensors) != set(listed):
            raise PointRefused("truncated: the tensor file and its manifest list different tensors")
        for name, t in tensors.items():
            entry = listed[name]
            if (not isinstance(entry, dict) or entry.get("dtype") != DTYPE_NAMES.get(t.dtype)
                    or entry.get("shape") != list(t.shape)):
                raise PointRefused(f"corrupt: tensor {name} is not what the manifest lists")
            if entry.get("sha256") != tensor_sha256(t):
                raise PointRefused(f"corrupt: tensor {name} fails its checksum")
        point = SavedPoint.from_tensors(key, length, tensors, self.layout)  # PointRefused: another model
        if prefix_keys(self.scope, point.tokens.numpy(), length // BLOCK)[-1] != key:
            raise PointRefused("corrupt: its tokens do not hash to its key")
        return point


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
