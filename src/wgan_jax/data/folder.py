"""``folder:/path``: a directory of PNG/JPEG files, converted once into an array_record dataset.

The conversion decodes every image (class subfolders are walked and ignored), centre-crops and
resizes it to the configured size, converts it to the configured channels (RGBA sprites stay 4
channels) and writes one record per image: the raw uint8 bytes of `[S, S, C]`, with the shape in
`meta.json`. The result lives under the data dir, in a directory named by a hash of the file
list, sizes and mtimes, the image size and the channel count, so an edited folder or a new size
is converted again and the image folder itself is never written to. TensorFlow is not needed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import uuid

import numpy as np
from PIL import Image

from wgan_jax.data.images import MappedSource, prepare_image
from wgan_jax.errors import DataError

log = logging.getLogger("wgan_jax")

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
FORMAT_VERSION = 1
RECORDS = "images.array_record"
META = "meta.json"


def list_images(root: str) -> list[tuple[str, int, int]]:
    """(relative path, size, mtime_ns) of every PNG/JPEG under `root`, sorted by path."""
    found = []
    for directory, subdirs, names in os.walk(root):
        subdirs.sort()
        for name in names:
            if name.lower().endswith(IMAGE_SUFFIXES) and not name.startswith("."):
                path = os.path.join(directory, name)
                st = os.stat(path)
                found.append((os.path.relpath(path, root), st.st_size, st.st_mtime_ns))
    return sorted(found)


def fingerprint(files: list[tuple[str, int, int]], size: int, channels: int) -> str:
    """A hash of the file list (paths, sizes, mtimes) and the conversion settings."""
    h = hashlib.sha256(json.dumps([FORMAT_VERSION, size, channels, files]).encode())
    return h.hexdigest()[:16]


def decode_file(path: str, size: int, channels: int) -> np.ndarray:
    """One file -> uint8 `[size, size, channels]`; OSError/ValueError if it is corrupt."""
    with Image.open(path) as img:
        img.load()
        return prepare_image(img, size, channels, path)


def _convert(
    root: str, files: list[tuple[str, int, int]], out_dir: str, size: int, channels: int,
    skip_corrupt: bool,
) -> None:
    from array_record.python.array_record_module import ArrayRecordWriter

    tmp = f"{out_dir}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    os.makedirs(tmp)
    skipped: list[str] = []
    count = 0
    try:
        writer = ArrayRecordWriter(os.path.join(tmp, RECORDS), "group_size:1")
        try:
            for rel, _, _ in files:
                path = os.path.join(root, rel)
                try:
                    image = decode_file(path, size, channels)
                except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as error:
                    if not skip_corrupt:
                        raise DataError(
                            f"folder:{root}: cannot read image {path}: {error} (set "
                            "config.skip_corrupt_images=True to skip such files)"
                        ) from None
                    log.warning("folder:%s: skipping corrupt image %s (%s)", root, path, error)
                    skipped.append(rel)
                    continue
                writer.write(image.tobytes())
                count += 1
        finally:
            writer.close()
        if count == 0:
            raise DataError(f"folder:{root}: none of the {len(files)} image files could be read")
        meta = {
            "version": FORMAT_VERSION, "source": root, "num_examples": count,
            "shape": [size, size, channels], "skipped": skipped,
        }
        with open(os.path.join(tmp, META), "w") as f:
            json.dump(meta, f, indent=1)
        try:
            os.rename(tmp, out_dir)
        except OSError:  # another process finished the same conversion first
            if not os.path.exists(os.path.join(out_dir, META)):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class _RawDecoder:
    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape

    def __call__(self, record: bytes) -> np.ndarray:
        return np.frombuffer(record, np.uint8).reshape(self.shape)


def prepared_dir(root: str, data_dir: str, size: int, channels: int) -> str:
    """Where the converted dataset of `root` lives (converted or not)."""
    files = list_images(root)
    if not files:
        raise DataError(f"folder:{root}: no PNG or JPEG images found (searched recursively)")
    name = os.path.basename(os.path.normpath(root)) or "root"
    return os.path.join(data_dir, "folders", f"{name}-{fingerprint(files, size, channels)}")


def folder_source(
    path: str, data_dir: str, size: int, channels: int, skip_corrupt: bool = False
) -> MappedSource:
    """The images of folder `path` as a random-access uint8 source (converting it if needed)."""
    from array_record.python.array_record_data_source import ArrayRecordDataSource

    root = os.path.abspath(os.path.expanduser(path))
    if not os.path.isdir(root):
        raise DataError(f"folder:{path}: no such directory")
    files = list_images(root)
    out_dir = prepared_dir(root, data_dir, size, channels)
    if not os.path.exists(os.path.join(out_dir, META)):
        log.info("converting %d images of %s into %s", len(files), root, out_dir)
        try:
            os.makedirs(os.path.dirname(out_dir), exist_ok=True)
        except OSError as error:
            raise DataError(f"folder:{path}: cannot create data dir {data_dir}: {error}") from None
        _convert(root, files, out_dir, size, channels, skip_corrupt)
    with open(os.path.join(out_dir, META)) as f:
        meta = json.load(f)
    if meta["skipped"]:
        if not skip_corrupt:
            raise DataError(
                f"folder:{path}: {len(meta['skipped'])} corrupt images (e.g. "
                f"{meta['skipped'][0]}); set config.skip_corrupt_images=True to skip them"
            )
        log.warning("folder:%s: skipped %d corrupt image files of %d (first: %s)", path,
                    len(meta["skipped"]), len(files), meta["skipped"][0])
    records = ArrayRecordDataSource([os.path.join(out_dir, RECORDS)])
    if len(records) != meta["num_examples"]:
        raise DataError(f"folder:{path}: prepared dataset {out_dir} is incomplete; delete it")
    return MappedSource(records, _RawDecoder(tuple(meta["shape"])))
