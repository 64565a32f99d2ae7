"""``graph.npz`` read and written an array chunk at a time, for :mod:`.graphstream`: the old file's
members (:class:`OldGraph`: the small ones whole, each array in chunks, every CRC checked) and the
new file's arrays gathered in anonymous temp files, then written as the ``.npy`` members of a zip
(:class:`NewGraph`), the layout ``numpy.savez`` gives and ``numpy.load`` reads."""
from __future__ import annotations

import tempfile
import zipfile
from collections.abc import Iterator
from typing import IO, Any

import numpy as np

#: the edge arrays a change reads (``weight`` and ``kinds`` are computed from them) and writes
EDGE_IN = ("src", "dst", "base", "syn_lo", "syn_hi", "syn_dirs")
EDGE_OUT = {"src": np.int64, "dst": np.int64, "weight": np.float64, "kinds": np.uint8, "base": np.float64,
            "syn_lo": np.float64, "syn_hi": np.float64, "syn_dirs": np.uint8}


class GraphFileError(ValueError):
    """The graph file cannot take the change (missing, of another version, damaged, or not holding
    what the change names)."""


class OldGraph:
    """A ``graph.npz`` opened for streaming: its small members, and each array a chunk at a time."""

    def __init__(self, src: str | IO[bytes]):
        try:
            self.zf = zipfile.ZipFile(src)
        except (OSError, zipfile.BadZipFile) as e:
            raise GraphFileError(f"unreadable graph file: {e}") from e
        have = set(self.zf.namelist())
        missing = [m for m in ("node_ids", "num_entities", "version", *EDGE_IN) if f"{m}.npy" not in have]
        if missing:
            raise GraphFileError(f"the graph file lacks {', '.join(missing)}")
        self.has_digest = "content_digest.npy" in have
        self.ne = int(self.small("num_entities"))
        self.n, self.id_dtype = self._head("node_ids")
        self.m = self._head("src")[0]
        if any(self._head(f)[0] != self.m for f in EDGE_IN) or not 0 <= self.ne <= self.n:
            raise GraphFileError("the graph file's arrays disagree in size")

    def small(self, name: str) -> np.ndarray:
        with self.zf.open(f"{name}.npy") as f:
            return np.lib.format.read_array(f, allow_pickle=False)

    def _head(self, name: str) -> tuple[int, np.dtype]:
        with self.zf.open(f"{name}.npy") as f:
            shape, dtype = _read_header(f)
        return shape, dtype

    def chunks(self, name: str, size: int) -> Iterator[np.ndarray]:
        """The 1-d array ``name`` in chunks of ``size``; its CRC is checked when it is read through."""
        with self.zf.open(f"{name}.npy") as f:
            count, dtype = _read_header(f)
            left = count
            while left:
                k = min(size, left)
                data = f.read(k * dtype.itemsize)
                if len(data) != k * dtype.itemsize:
                    raise GraphFileError(f"the graph file's {name} is truncated")
                yield np.frombuffer(data, dtype)
                left -= k
            f.read()            # to the end: the CRC is checked here

    def check_rest(self) -> None:
        """Read the members the change does not stream (``weight``, ``kinds``, the labels) through:
        their CRCs are checked, as loading the file would."""
        streamed = {f"{m}.npy" for m in ("node_ids", *EDGE_IN)}
        for name in self.zf.namelist():
            if name not in streamed:
                with self.zf.open(name) as f:
                    while f.read(1 << 22):
                        pass

    def close(self) -> None:
        self.zf.close()


def _read_header(f) -> tuple[int, np.dtype]:
    version = np.lib.format.read_magic(f)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = read(f)
    if len(shape) != 1 or fortran or dtype.hasobject:
        raise GraphFileError("the graph file holds an array of an unexpected form")
    return int(shape[0]), dtype


class NewGraph:
    """The new arrays, appended chunk by chunk to anonymous temp files, then written as ``.npy``
    members of a zip."""

    def __init__(self, folder: str | None):
        self.files = {k: tempfile.TemporaryFile(dir=folder) for k in (*EDGE_OUT, "node_ids")}
        self.count = dict.fromkeys(self.files, 0)
        self.id_width = 1

    def put(self, name: str, arr: np.ndarray) -> None:
        self.files[name].write(np.ascontiguousarray(arr).tobytes())
        self.count[name] += len(arr)

    def write_zip(self, out: IO[bytes], id_dtype: np.dtype, small: dict[str, Any]) -> None:
        dtypes = {**{k: np.dtype(v) for k, v in EDGE_OUT.items()}, "node_ids": id_dtype}
        with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
            for name, f in self.files.items():
                f.seek(0)
                header = {"descr": np.lib.format.dtype_to_descr(dtypes[name]), "fortran_order": False,
                          "shape": (self.count[name],)}
                with zf.open(f"{name}.npy", "w", force_zip64=True) as m:
                    np.lib.format.write_array_header_1_0(m, header)
                    while block := f.read(1 << 22):
                        m.write(block)
            for name, value in small.items():
                with zf.open(f"{name}.npy", "w") as m:
                    np.lib.format.write_array(m, np.asarray(value), allow_pickle=False)

    def close(self) -> None:
        for f in self.files.values():
            f.close()


__all__ = ["EDGE_IN", "EDGE_OUT", "GraphFileError", "NewGraph", "OldGraph"]
