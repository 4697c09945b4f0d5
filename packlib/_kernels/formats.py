"""Kernels for the format adapters: TFRecord framing and a fixed-schema
``tf.train.Example`` encoder/decoder (int64 and float lists only).

A *schema* is given as arrays: ``keys`` (uint8, the feature names concatenated in sorted
order) with ``key_offsets``, ``kinds`` (0 = int64 list, 1 = float list), ``widths`` (the
list length of each feature) and ``cols`` (where each feature starts in its matrix: the
int64 matrix for int features, the uint32 matrix of float32 bit patterns for floats).
"""
import numpy as np

from .._jit import jit
from .crc32c import crc32c_update

# error codes shared with packlib.formats
OK = 0
TRUNCATED_HEADER = 1
BAD_LENGTH_CRC = 2
TRUNCATED_DATA = 3
BAD_PROTO = 4
UNKNOWN_FEATURE = 5
WRONG_LENGTH = 6
WRONG_TYPE = 7
MISSING_FEATURE = 8


@jit
def _mask(c):
    c = np.uint64(c)
    m = (((c >> np.uint64(15)) | (c << np.uint64(17))) + np.uint64(0xA282EAD8)) & np.uint64(0xFFFFFFFF)
    return np.uint32(m)


@jit
def scan_frames(buf, tables):
    """Split a TFRecord stream into records, checking the framing and the length CRCs.

    Returns ``(starts, stops, error, error_record, error_offset)``: data of record ``i`` is
    ``buf[starts[i]:stops[i]]``, its stored masked data CRC follows at ``stops[i]``. Every
    record, the last included, is checked to lie whole inside ``buf`` (header, data and
    data CRC), in signed arithmetic on the bytes left, so no declared length can wrap.
    """
    n = buf.size
    cap = 16
    starts = np.empty(cap, dtype=np.int64)
    stops = np.empty(cap, dtype=np.int64)
    pos = np.int64(0)  # typed: a literal 0 would compile the callees once more for it
    k = 0
    err = OK
    while pos < n:
        left = n - pos
        if left < 12:
            err = TRUNCATED_HEADER
            break
        length = np.uint64(0)
        for b in range(8):
            length |= np.uint64(buf[pos + b]) << np.uint64(8 * b)
        stored = np.uint32(0)
        for b in range(4):
            stored |= np.uint32(buf[pos + 8 + b]) << np.uint32(8 * b)
        if _mask(crc32c_update(np.uint32(0), buf, pos, pos + 8, tables)) != stored:
            err = BAD_LENGTH_CRC
            break
        if left < 16 or length > np.uint64(left - 16):
            err = TRUNCATED_DATA
            break
        if k == cap:
            cap *= 2
            s2 = np.empty(cap, dtype=np.int64)
            e2 = np.empty(cap, dtype=np.int64)
            s2[:k] = starts[:k]
            e2[:k] = stops[:k]
            starts = s2
            stops = e2
        starts[k] = pos + 12
        stops[k] = pos + 12 + np.int64(length)
        pos = stops[k] + 4
        k += 1
    return starts[:k].copy(), stops[:k].copy(), err, k, pos


@jit
def masked_crcs(buf, starts, stops, tables):
    """Masked CRC-32C of each ``buf[starts[i]:stops[i]]``."""
    out = np.empty(starts.size, dtype=np.uint32)
    for i in range(starts.size):
        out[i] = _mask(crc32c_update(np.uint32(0), buf, starts[i], stops[i], tables))
    return out


@jit
def stored_crcs(buf, stops):
    """The masked data CRC stored after each record."""
    out = np.empty(stops.size, dtype=np.uint32)
    for i in range(stops.size):
        p = stops[i]
        out[i] = (np.uint32(buf[p]) | (np.uint32(buf[p + 1]) << np.uint32(8))
                  | (np.uint32(buf[p + 2]) << np.uint32(16)) | (np.uint32(buf[p + 3]) << np.uint32(24)))
    return out


@jit
def frame_records(data, offsets, data_crcs, tables):
    """TFRecord framing of records ``data[offsets[i]:offsets[i+1]]`` with the given
    masked data CRCs; returns the framed stream (uint8)."""
    n = offsets.size - 1
    out = np.empty(data.size + 16 * n, dtype=np.uint8)
    pos = np.int64(0)  # typed: a literal 0 would compile the callees once more for it
    for i in range(n):
        length = offsets[i + 1] - offsets[i]
        for b in range(8):
            out[pos + b] = (length >> (8 * b)) & 0xFF
        c = _mask(crc32c_update(np.uint32(0), out, pos, pos + 8, tables))
        for b in range(4):
            out[pos + 8 + b] = (c >> np.uint32(8 * b)) & np.uint32(0xFF)
        pos += 12
        out[pos:pos + length] = data[offsets[i]:offsets[i + 1]]
        pos += length
        c = data_crcs[i]
        for b in range(4):
            out[pos + b] = (c >> np.uint32(8 * b)) & np.uint32(0xFF)
        pos += 4
    return out


# ------------------------------------------------------------------------------------
# protobuf helpers
# ------------------------------------------------------------------------------------
@jit
def _varint_size(v):
    u = np.uint64(v)
    if u < np.uint64(1 << 7):
        return 1
    if u < np.uint64(1 << 14):
        return 2
    if u < np.uint64(1 << 21):
        return 3
    s = 4
    u >>= np.uint64(28)
    while u > np.uint64(0):
        u >>= np.uint64(7)
        s += 1
    return s


@jit
def _put_varint(out, pos, v):
    u = np.uint64(v)
    while u >= np.uint64(128):
        out[pos] = np.uint8((u & np.uint64(127)) | np.uint64(128))
        u >>= np.uint64(7)
        pos += 1
    out[pos] = np.uint8(u)
    return pos + 1


@jit
def _get_varint(buf, pos, stop):
    """Returns (value as uint64, new pos); new pos = -1 on a malformed varint."""
    result = np.uint64(0)
    shift = np.uint64(0)
    while pos < stop:
        b = buf[pos]
        pos += 1
        if shift < np.uint64(64):
            result |= np.uint64(b & 127) << shift
        if b < 128:
            return result, pos
        shift += np.uint64(7)
        if shift >= np.uint64(70):
            return result, -1
    return result, -1


@jit
def encode_examples(ints, fbits, keys, key_offsets, kinds, widths, cols):
    """Serialise one ``tf.train.Example`` per row; keys in the given (sorted) order.

    One pass over the values: each list body is encoded into a scratch buffer, then
    prefixed with its (now known) nested lengths. Returns ``(data, offsets)``: example
    ``r`` is ``data[offsets[r]:offsets[r+1]]``.
    """
    nrows = ints.shape[0] if kinds.size == 0 or ints.shape[1] > 0 else fbits.shape[0]
    nf = kinds.size
    bound = 16
    wmax = 1
    for f in range(nf):
        w = widths[f]
        body = 10 * w + 2 if kinds[f] == 0 else 4 * w
        bound += 40 + (key_offsets[f + 1] - key_offsets[f]) + body
        wmax = max(wmax, body)
    body = np.empty(wmax, dtype=np.uint8)
    row = np.empty(bound, dtype=np.uint8)
    cap = max(1024, nrows * min(bound, 4096))
    out = np.empty(cap, dtype=np.uint8)
    offsets = np.empty(nrows + 1, dtype=np.int64)
    offsets[0] = 0
    pos = np.int64(0)  # typed zeros: a literal 0 would compile the callees once more for it
    for r in range(nrows):
        rp = np.int64(0)
        for f in range(nf):
            w = widths[f]
            c = cols[f]
            s = np.int64(0)
            if kinds[f] == 0:
                for j in range(w):
                    u = np.uint64(ints[r, c + j])
                    if u < np.uint64(1 << 21):  # branch-free for the common 1-3 byte case
                        more1 = np.uint64(u >= np.uint64(128))
                        more2 = np.uint64(u >= np.uint64(1 << 14))
                        body[s] = np.uint8((u & np.uint64(127)) | (more1 << np.uint64(7)))
                        body[s + 1] = np.uint8(((u >> np.uint64(7)) & np.uint64(127)) | (more2 << np.uint64(7)))
                        body[s + 2] = np.uint8(u >> np.uint64(14))
                        s += 1 + np.int64(more1) + np.int64(more2)
                    else:
                        s = _put_varint(body, s, u)
            else:
                for j in range(w):
                    v = fbits[r, c + j]
                    body[s] = v & np.uint32(0xFF)
                    body[s + 1] = (v >> np.uint32(8)) & np.uint32(0xFF)
                    body[s + 2] = (v >> np.uint32(16)) & np.uint32(0xFF)
                    body[s + 3] = (v >> np.uint32(24)) & np.uint32(0xFF)
                    s += 4
            lst = 0 if w == 0 else 1 + _varint_size(s) + s
            feat = 1 + _varint_size(lst) + lst
            k0 = key_offsets[f]
            klen = key_offsets[f + 1] - k0
            entry = 1 + _varint_size(klen) + klen + 1 + _varint_size(feat) + feat
            row[rp] = 0x0A
            rp = _put_varint(row, rp + 1, entry)
            row[rp] = 0x0A
            rp = _put_varint(row, rp + 1, klen)
            row[rp:rp + klen] = keys[k0:k0 + klen]
            rp += klen
            row[rp] = 0x12
            rp = _put_varint(row, rp + 1, feat)
            row[rp] = 0x1A if kinds[f] == 0 else 0x12
            rp = _put_varint(row, rp + 1, lst)
            if w > 0:
                row[rp] = 0x0A
                rp = _put_varint(row, rp + 1, s)
                row[rp:rp + s] = body[:s]
                rp += s
        need = pos + rp + 11
        if need > cap:
            while cap < need:
                cap *= 2
            grown = np.empty(cap, dtype=np.uint8)
            grown[:pos] = out[:pos]
            out = grown
        out[pos] = 0x0A
        pos = _put_varint(out, pos + 1, rp)
        out[pos:pos + rp] = row[:rp]
        pos += rp
        offsets[r + 1] = pos
    return out[:pos], offsets


@jit
def _skip_field(buf, pos, stop, wire):
    if wire == 0:
        _, pos = _get_varint(buf, pos, stop)
        return pos
    if wire == 1:
        return pos + 8 if pos + 8 <= stop else -1
    if wire == 5:
        return pos + 4 if pos + 4 <= stop else -1
    if wire == 2:
        ln, pos = _get_varint(buf, pos, stop)
        if pos < 0 or np.uint64(stop - pos) < ln:
            return -1
        return pos + np.int64(ln)
    return -1


@jit
def _find_key(buf, k0, k1, keys, key_offsets):
    nf = key_offsets.size - 1
    klen = k1 - k0
    for f in range(nf):
        a = key_offsets[f]
        if key_offsets[f + 1] - a != klen:
            continue
        same = True
        for j in range(klen):
            if keys[a + j] != buf[k0 + j]:
                same = False
                break
        if same:
            return f
    return -1


@jit
def _decode_list(buf, p, q, kind, ints, fbits, r, col, width):
    """Decode an Int64List/FloatList body buf[p:q] (packed or not) into row r; returns the
    number of values (or -1 if malformed, -2 if too many)."""
    n = 0
    while p < q:
        tag, p = _get_varint(buf, p, q)
        if p < 0:
            return -1
        field = tag >> np.uint64(3)
        wire = tag & np.uint64(7)
        if field != np.uint64(1):
            p = _skip_field(buf, p, q, wire)
            if p < 0:
                return -1
            continue
        if kind == 0 and wire == np.uint64(0):
            v, p = _get_varint(buf, p, q)
            if p < 0:
                return -1
            if n >= width:
                return -2
            ints[r, col + n] = np.int64(v)
            n += 1
        elif kind == 1 and wire == np.uint64(5):
            if p + 4 > q:
                return -1
            if n >= width:
                return -2
            fbits[r, col + n] = (np.uint32(buf[p]) | (np.uint32(buf[p + 1]) << np.uint32(8))
                                 | (np.uint32(buf[p + 2]) << np.uint32(16)) | (np.uint32(buf[p + 3]) << np.uint32(24)))
            p += 4
            n += 1
        elif wire == np.uint64(2):
            ln, p = _get_varint(buf, p, q)
            if p < 0 or np.uint64(q - p) < ln:
                return -1
            e = p + np.int64(ln)
            if kind == 0:
                while p < e:
                    v, p = _get_varint(buf, p, e)
                    if p < 0:
                        return -1
                    if n >= width:
                        return -2
                    ints[r, col + n] = np.int64(v)
                    n += 1
            else:
                if (e - p) % 4 != 0:
                    return -1
                while p < e:
                    if n >= width:
                        return -2
                    fbits[r, col + n] = (np.uint32(buf[p]) | (np.uint32(buf[p + 1]) << np.uint32(8))
                                         | (np.uint32(buf[p + 2]) << np.uint32(16)) | (np.uint32(buf[p + 3]) << np.uint32(24)))
                    p += 4
                    n += 1
        else:
            return -1
    return n


@jit
def _field(buf, p, stop):
    """Read the field at ``buf[p:stop]``: returns ``(tag, start, end)``. For a
    length-delimited field (wire type 2), ``buf[start:end]`` is its payload; for any other
    wire type the field is skipped and ``start == end`` is the position after it. ``end``
    is -1 if the field is malformed or runs past ``stop``."""
    tag, p = _get_varint(buf, p, stop)
    if p < 0:
        return tag, -1, -1
    wire = tag & np.uint64(7)
    if wire != np.uint64(2):
        p = _skip_field(buf, p, stop, wire)
        return tag, p, p
    ln, p = _get_varint(buf, p, stop)
    if p < 0 or np.uint64(stop - p) < ln:
        return tag, -1, -1
    return tag, p, p + np.int64(ln)


@jit
def decode_examples(buf, starts, stops, keys, key_offsets, kinds, widths, cols, n_int, n_float):
    """Decode fixed-schema Examples into an int64 matrix and a uint32 (float32 bits)
    matrix. Features not in the schema are refused (so nothing is silently dropped).

    The four nested messages (Example, Features, the map entry, Feature) are each a loop
    over :func:`_field`. Returns ``(ints, fbits, error, error_record, error_feature)``.
    """
    nrec = starts.size
    nf = kinds.size
    ints = np.zeros((nrec, n_int), dtype=np.int64)
    fbits = np.zeros((nrec, n_float), dtype=np.uint32)
    seen = np.zeros(nf, dtype=np.int64)
    for r in range(nrec):
        seen[:] = 0
        p = starts[r]
        q = stops[r]
        while p < q:  # Example: features = 1
            tag, fa, fe = _field(buf, p, q)
            if fe < 0:
                return ints, fbits, BAD_PROTO, r, -1
            p = fe
            if tag != np.uint64(0x0A):
                continue
            while fa < fe:  # Features: repeated map entries (field 1)
                tag, ea, ee = _field(buf, fa, fe)
                if ee < 0:
                    return ints, fbits, BAD_PROTO, r, -1
                fa = ee
                if tag != np.uint64(0x0A):
                    continue
                k0 = ee
                k1 = ee
                v0 = -1
                v1 = -1
                while ea < ee:  # map entry: key = 1, value = 2
                    tag, a, e = _field(buf, ea, ee)
                    if e < 0:
                        return ints, fbits, BAD_PROTO, r, -1
                    ea = e
                    if tag == np.uint64(0x0A):
                        k0 = a
                        k1 = e
                    elif tag == np.uint64(0x12):
                        v0 = a
                        v1 = e
                f = _find_key(buf, k0, k1, keys, key_offsets)
                if f < 0:
                    return ints, fbits, UNKNOWN_FEATURE, r, -1
                n = 0
                want = np.uint64(3) if kinds[f] == 0 else np.uint64(2)
                while v0 < v1:  # Feature: oneof bytes=1 float=2 int64=3
                    tag, a, e = _field(buf, v0, v1)
                    if e < 0:
                        return ints, fbits, BAD_PROTO, r, f
                    v0 = e
                    if tag & np.uint64(7) != np.uint64(2):
                        continue
                    field = tag >> np.uint64(3)
                    if field == want:
                        n = _decode_list(buf, a, e, kinds[f], ints, fbits, r, cols[f], widths[f])
                        if n == -1:
                            return ints, fbits, BAD_PROTO, r, f
                        if n == -2:
                            return ints, fbits, WRONG_LENGTH, r, f
                    elif field == np.uint64(1) or field == np.uint64(2) or field == np.uint64(3):
                        return ints, fbits, WRONG_TYPE, r, f
                if n != widths[f]:
                    return ints, fbits, WRONG_LENGTH, r, f
                seen[f] += 1
        for f in range(nf):
            if seen[f] == 0:
                return ints, fbits, MISSING_FEATURE, r, f
    return ints, fbits, OK, nrec, -1
