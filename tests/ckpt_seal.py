#!/usr/bin/python3
"""The version-2 checkpoint header (docs/CHECKPOINT.md, "The header"), for tests that edit checkpoints.

  ckpt_seal.py PATH...           rewrites the header of each PATH to match its bytes: after an h5py edit
                                 (which cannot keep the digest), so that the reader's inner checks run
  ckpt_seal.py --check PATH...   exit 0 when every PATH's header matches its bytes, 1 otherwise
  ckpt_seal.py --v1 SRC DST      writes DST, a version-1 file with SRC's objects and attributes: no user
                                 block, no run_id, version=1 (needs h5py)

The header is the first line of the 512-byte HDF5 user block, zero-padded:
  cnn_mpi-checkpoint v2 crc32=<zlib crc32 of every byte after the block, 8 hex> bytes=<their count>\\n
"""
import sys
import zlib

USER_BLOCK = 512
SIGNATURE = b"\x89HDF\r\n\x1a\n"


def header(body):
    line = b"cnn_mpi-checkpoint v2 crc32=%08x bytes=%d\n" % (zlib.crc32(body), len(body))
    return line + bytes(USER_BLOCK - len(line))


def seal(path):
    with open(path, "r+b") as f:
        data = f.read()
        if data[USER_BLOCK:USER_BLOCK + len(SIGNATURE)] != SIGNATURE:
            sys.exit(f"ckpt_seal: {path}: no HDF5 signature after a {USER_BLOCK}-byte user block")
        f.seek(0)
        f.write(header(data[USER_BLOCK:]))


def sealed(path):
    data = open(path, "rb").read()
    return data[:USER_BLOCK] == header(data[USER_BLOCK:])


def to_version1(source, target):
    import h5py
    import numpy as np

    with h5py.File(source, "r") as src, h5py.File(target, "w") as dst:
        for name, value in src.attrs.items():
            if name != "run_id":
                dst.attrs[name] = value
        dst.attrs["version"] = np.int64(1)
        for name in src:
            src.copy(src[name], dst, name=name)  # groups, datasets and their attributes, recursively


def main(argv):
    if len(argv) == 3 and argv[0] == "--v1":
        to_version1(argv[1], argv[2])
    elif argv and argv[0] == "--check":
        bad = [p for p in argv[1:] if not sealed(p)]
        for p in bad:
            print(f"ckpt_seal: {p}: header does not match the bytes")
        return 1 if bad else 0
    elif argv:
        for path in argv:
            seal(path)
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
