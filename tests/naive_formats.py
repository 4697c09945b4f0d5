"""Plain-Python references for the format adapters (slow, obvious, independent)."""
from __future__ import annotations

import struct


def crc32c(data: bytes) -> int:
    """Bit-by-bit CRC-32C (reflected polynomial 0x82F63B78)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(records) -> bytes:
    out = b""
    for r in records:
        length = struct.pack("<Q", len(r))
        out += length + struct.pack("<I", masked(crc32c(length))) + r + struct.pack("<I", masked(crc32c(r)))
    return out


def pack_sequences(seqs: list[dict], L: int = 512, max_predictions: int = 76, depth: int = 3) -> dict:
    """One packed MLPerf BERT record from a list of unpacked sequences (dicts with
    input_ids, segment_ids, masked_lm_positions, masked_lm_ids, next_sentence_labels),
    following formats.md line by line."""
    M = max_predictions + depth
    out = {
        "input_ids": [0] * L, "input_mask": [0] * L, "segment_ids": [0] * L, "positions": [0] * L,
        "masked_lm_positions": [0] * M, "masked_lm_ids": [0] * M, "masked_lm_weights": [0.0] * M,
        "next_sentence_positions": [0] * depth, "next_sentence_labels": [0] * depth,
        "next_sentence_weights": [0.0] * depth,
    }
    offset = 0
    m = 0
    for k, s in enumerate(seqs):
        n = len(s["input_ids"])
        for j in range(n):
            out["input_ids"][offset + j] = int(s["input_ids"][j])
            out["segment_ids"][offset + j] = int(s["segment_ids"][j])
            out["input_mask"][offset + j] = k + 1
            out["positions"][offset + j] = j
        for j in range(len(s["masked_lm_ids"])):
            out["masked_lm_positions"][m] = int(s["masked_lm_positions"][j]) + offset
            out["masked_lm_ids"][m] = int(s["masked_lm_ids"][j])
            out["masked_lm_weights"][m] = float(k + 1)
            m += 1
        out["next_sentence_positions"][k] = offset
        out["next_sentence_labels"][k] = int(s["next_sentence_labels"])
        out["next_sentence_weights"][k] = 1.0
        offset += n
    return out


def unpack_record(rec: dict) -> list[dict]:
    """Split one decoded packed record (dict of lists) back into sequences."""
    mask = [int(x) for x in rec["input_mask"]]
    k = max(mask) if mask else 0
    seqs = []
    for i in range(1, k + 1):
        idx = [j for j, v in enumerate(mask) if v == i]
        start = idx[0]
        preds = [j for j, w in enumerate(rec["masked_lm_weights"]) if float(w) == float(i)]
        seqs.append({
            "input_ids": [int(rec["input_ids"][j]) for j in idx],
            "segment_ids": [int(rec["segment_ids"][j]) for j in idx],
            "positions": [int(rec["positions"][j]) for j in idx],
            "start": start,
            "masked_lm_positions": [int(rec["masked_lm_positions"][j]) - start for j in preds],
            "masked_lm_ids": [int(rec["masked_lm_ids"][j]) for j in preds],
            "next_sentence_labels": int(rec["next_sentence_labels"][i - 1]),
            "next_sentence_position": int(rec["next_sentence_positions"][i - 1]),
            "next_sentence_weight": float(rec["next_sentence_weights"][i - 1]),
        })
    return seqs
