"""CRC-32C (Castagnoli), slicing-by-8, for when no C CRC package is installed.

The tables are built once in numpy at import (8 x 256 uint32, 8 KiB); the kernel reads
eight bytes per step. Check value: ``crc32c(b"123456789") == 0xE3069283``.
"""
import numpy as np

from .._jit import jit

_POLY = 0x82F63B78  # reflected Castagnoli polynomial


def _make_tables() -> np.ndarray:
    t = np.zeros((8, 256), dtype=np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ _POLY if c & 1 else c >> 1
        t[0, i] = c
    for k in range(1, 8):
        prev = t[k - 1]
        t[k] = (prev >> np.uint32(8)) ^ t[0][prev & np.uint32(0xFF)]
    return t


TABLES = _make_tables()


@jit
def crc32c_update(crc, data, start, stop, tables):
    """CRC-32C of ``data[start:stop]`` (uint8) continuing from ``crc`` (0 to start)."""
    c = np.uint32(crc) ^ np.uint32(0xFFFFFFFF)
    t0 = tables[0]
    t1 = tables[1]
    t2 = tables[2]
    t3 = tables[3]
    t4 = tables[4]
    t5 = tables[5]
    t6 = tables[6]
    t7 = tables[7]
    i = start
    while i + 8 <= stop:
        lo = c ^ (np.uint32(data[i]) | (np.uint32(data[i + 1]) << np.uint32(8))
                  | (np.uint32(data[i + 2]) << np.uint32(16)) | (np.uint32(data[i + 3]) << np.uint32(24)))
        c = (t7[lo & np.uint32(0xFF)] ^ t6[(lo >> np.uint32(8)) & np.uint32(0xFF)]
             ^ t5[(lo >> np.uint32(16)) & np.uint32(0xFF)] ^ t4[lo >> np.uint32(24)]
             ^ t3[data[i + 4]] ^ t2[data[i + 5]] ^ t1[data[i + 6]] ^ t0[data[i + 7]])
        i += 8
    while i < stop:
        c = t0[(c ^ np.uint32(data[i])) & np.uint32(0xFF)] ^ (c >> np.uint32(8))
        i += 1
    return c ^ np.uint32(0xFFFFFFFF)

