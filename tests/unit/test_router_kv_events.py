"""vLLM KV events → our chained hashes: captured real messages, both encodings, bounded
map, unknown parents, removals, and a real ZMQ round trip."""

from __future__ import annotations

import time

import msgpack
import pytest
import zmq

from contracts.hashing import block_hashes
from router.kv_events import KVEventTranslator, decode_payload
from router.kv_subscriber import KVEventSubscriber
from router.prefix_policy import MODE_PRECISE, PrefixAwarePolicy
from router.types import KVBlocksRemoved, KVBlocksStored, ReplicaView
from router.views import make_request_view

# Encoded by vLLM 0.32's own classes (vllm.distributed.kv_events.KVEventBatch with
# BlockStored/BlockRemoved/AllBlocksCleared, msgspec.msgpack.Encoder) — see
# test_captured_bytes_match_vllm_encoder, which re-encodes them when vLLM is importable.
# 1: BlockStored of 2 vLLM blocks (block_size 32, bytes hashes aa.., bb..), tokens 100..163
# 2: BlockStored child cc.. of bb.. (tokens 200..231), then BlockRemoved [bb.., cc..]
# 3: AllBlocksCleared
# 4: BlockStored with int hashes 12345, 67890, medium None, dp_rank None
CAPTURED = [
    bytes.fromhex(
        "93cb41d954fc402000009188a474797065ab426c6f636b53746f726564ac626c6f636b5f68617368657392c420aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaac420bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb1706172656e745f626c6f636b5f68617368c0a9746f6b656e5f696473dc00406465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7fcc80cc81cc82cc83cc84cc85cc86cc87cc88cc89cc8acc8bcc8ccc8dcc8ecc8fcc90cc91cc92cc93cc94cc95cc96cc97cc98cc99cc9acc9bcc9ccc9dcc9ecc9fcca0cca1cca2cca3aa626c6f636b5f73697a6520a76c6f72615f6964c0a66d656469756da3475055a96c6f72615f6e616d65c000"
    ),
    bytes.fromhex(
        "93cb41d954fc404000009288a474797065ab426c6f636b53746f726564ac626c6f636b5f68617368657391c420ccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccb1706172656e745f626c6f636b5f68617368c420bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbba9746f6b656e5f696473dc0020ccc8ccc9cccacccbcccccccdcccecccfccd0ccd1ccd2ccd3ccd4ccd5ccd6ccd7ccd8ccd9ccdaccdbccdcccddccdeccdfcce0cce1cce2cce3cce4cce5cce6cce7aa626c6f636b5f73697a6520a76c6f72615f6964c0a66d656469756da3475055a96c6f72615f6e616d65c083a474797065ac426c6f636b52656d6f766564ac626c6f636b5f68617368657392c420bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbc420cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccca66d656469756da3475055c0"
    ),
    bytes.fromhex("93cb41d954fc408000009181a474797065b0416c6c426c6f636b73436c6561726564c0"),
    bytes.fromhex(
        "93cb3ff00000000000009188a474797065ab426c6f636b53746f726564ac626c6f636b5f68617368657392cd3039ce00010932b1706172656e745f626c6f636b5f68617368c0a9746f6b656e5f696473dc00406465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7fcc80cc81cc82cc83cc84cc85cc86cc87cc88cc89cc8acc8bcc8ccc8dcc8ecc8fcc90cc91cc92cc93cc94cc95cc96cc97cc98cc99cc9acc9bcc9ccc9dcc9ecc9fcca0cca1cca2cca3aa626c6f636b5f73697a6520a76c6f72615f6964c0a66d656469756dc0a96c6f72615f6e616d65c0c0"
    ),
]
TOKENS = list(range(100, 164))
H1, H2, H3 = b"\xaa" * 32, b"\xbb" * 32, b"\xcc" * 32


def _frames(payload: bytes, seq: int) -> list[bytes]:
    return [b"kv", seq.to_bytes(8, "big"), payload]


def test_decode_captured_batch() -> None:
    batch = decode_payload(CAPTURED[0])
    assert batch.ts == 1700000000.5
    assert batch.dp_rank == 0
    (ev,) = batch.events
    assert ev["type"] == "BlockStored"
    assert ev["block_hashes"] == [H1, H2]
    assert ev["parent_block_hash"] is None
    assert ev["block_size"] == 32
    assert ev["token_ids"] == TOKENS


def test_translate_captured_messages_to_our_chained_hashes() -> None:
    t = KVEventTranslator("r0", block_size=16)
    (stored,) = t.translate_message(_frames(CAPTURED[0], 0), now=1.0)
    assert stored == KVBlocksStored("r0", block_hashes(TOKENS, 16), 1.0)
    child, removed = t.translate_message(_frames(CAPTURED[1], 1), now=2.0)
    expected_child = block_hashes(TOKENS + list(range(200, 232)), 16)
    assert isinstance(child, KVBlocksStored)
    assert child.block_hashes == expected_child[4:]
    assert removed == KVBlocksRemoved("r0", expected_child[2:], 2.0)
    assert len(t) == 1
    assert t.seq_gaps == 0
    (cleared,) = t.translate_message(_frames(CAPTURED[2], 5), now=3.0)
    assert cleared == KVBlocksRemoved("r0", expected_child[:2], 3.0)
    assert len(t) == 0
    assert t.seq_gaps == 1


def test_translated_hashes_match_the_ingress_request_view() -> None:
    t = KVEventTranslator("r0", block_size=16)
    policy = PrefixAwarePolicy(mode=MODE_PRECISE)
    for ev in t.translate_message(_frames(CAPTURED[3], 0), now=0.0):  # int hashes
        policy.observe(ev)
    req = make_request_view("q", [*TOKENS, 1, 2, 3], block_size=16)
    assert policy.matches(req, [ReplicaView("r0"), ReplicaView("r1")]) == {"r0": 4, "r1": 0}


def test_array_tagged_encoding_and_unknown_parent_and_other_media() -> None:
    stored = ["BlockStored", [1, 2], None, TOKENS, 32, None, "GPU"]
    orphan = ["BlockStored", [9], 777, list(range(32)), 32, None, "GPU"]
    offloaded = {
        "type": "BlockStored",
        "block_hashes": [5],
        "parent_block_hash": None,
        "token_ids": list(range(32)),
        "block_size": 32,
        "medium": "CPU",
    }
    removed = ["BlockRemoved", [2], "GPU"]
    payload = msgpack.packb([1.0, [stored, orphan, offloaded, removed]])
    t = KVEventTranslator("r", block_size=16)
    out = t.translate_batch(decode_payload(payload), now=0.0)
    ours = block_hashes(TOKENS, 16)
    assert out == [KVBlocksStored("r", ours, 0.0), KVBlocksRemoved("r", ours[2:], 0.0)]
    assert t.skipped_unknown_parent == 1


def test_block_size_not_multiple_is_skipped_and_map_is_bounded() -> None:
    t = KVEventTranslator("r", block_size=16, max_entries=100)
    bad = {
        "type": "BlockStored",
        "block_hashes": [1],
        "parent_block_hash": None,
        "token_ids": list(range(24)),
        "block_size": 24,
    }
    assert t.translate_batch(decode_payload(msgpack.packb([0.0, [bad]])), 0.0) == []
    assert t.skipped_bad_block_size == 1
    for k in range(1000):
        ev = {
            "type": "BlockStored",
            "block_hashes": [k],
            "parent_block_hash": None,
            "token_ids": [k] * 16,
            "block_size": 16,
        }
        t.translate_batch(decode_payload(msgpack.packb([0.0, [ev]])), 0.0)
    assert len(t) == 100
    with pytest.raises(ValueError, match=r"KV event batch must be"):
        decode_payload(msgpack.packb({"not": "a batch"}))


def test_subscriber_receives_over_zmq(tmp_path) -> None:
    endpoint = f"ipc://{tmp_path}/kv.sock"
    pub = zmq.Context.instance().socket(zmq.PUB)
    pub.bind(endpoint)
    got: list = []
    sub = KVEventSubscriber(endpoint, "r0", got.append, block_size=16, poll_ms=10).start()
    try:
        deadline = time.monotonic() + 5.0
        seq = 0
        while not got and time.monotonic() < deadline:  # PUB/SUB slow joiner: resend
            pub.send_multipart(_frames(CAPTURED[3], seq))
            seq += 1
            time.sleep(0.02)
    finally:
        sub.stop()
        pub.close(linger=0)
    assert got
    assert got[0].block_hashes == block_hashes(TOKENS, 16)


@pytest.mark.slow
def test_captured_bytes_match_vllm_encoder() -> None:
    kv = pytest.importorskip("vllm.distributed.kv_events")
    import msgspec

    enc = msgspec.msgpack.Encoder()
    gpu = {"lora_id": None, "medium": "GPU", "lora_name": None}
    batch = kv.KVEventBatch(
        ts=1700000000.5,
        events=[
            kv.BlockStored(
                block_hashes=[H1, H2],
                parent_block_hash=None,
                token_ids=TOKENS,
                block_size=32,
                **gpu,
            )
        ],
        data_parallel_rank=0,
    )
    assert enc.encode(batch) == CAPTURED[0]
    batch = kv.KVEventBatch(ts=1700000002.0, events=[kv.AllBlocksCleared()])
    assert enc.encode(batch) == CAPTURED[2]
