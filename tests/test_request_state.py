"""requestState sealing (2026-07-28 MRTR "Server Requirements" 4-5, "Security
Considerations"): tampered, expired, cross-principal, cross-request and
foreign-instance state is rejected."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from gateway.core.request_state import (
    Claims,
    ConsumedStates,
    Sealer,
    StateRejected,
    params_digest,
)

KEY = b"k" * 32
CLAIMS = Claims(
    instance="gw-a",
    principal="alice",
    method="tools/call",
    digest=params_digest({"name": "t", "arguments": {"x": 1}}),
    round=1,
    expires_ms=10_000,
    handle="h1",
)


def open_(token: object, **over: object) -> Claims:
    args: dict[str, object] = {
        "principal": "alice",
        "method": "tools/call",
        "digest": CLAIMS.digest,
        "now_ms": 5_000,
    }
    args.update(over)
    return Sealer(KEY, "gw-a").open(token, **args)  # type: ignore[arg-type]


def test_round_trip() -> None:
    token = Sealer(KEY, "gw-a").seal(CLAIMS)
    assert open_(token) == CLAIMS


@pytest.mark.parametrize(
    ("over", "why"),
    [
        ({"principal": "bob"}, "another principal"),
        ({"method": "prompts/get"}, "issued for tools/call"),
        ({"digest": "0" * 32}, "other params"),
        ({"now_ms": 10_000}, "expired"),
    ],
)
def test_mismatches_are_rejected(over: dict[str, object], why: str) -> None:
    token = Sealer(KEY, "gw-a").seal(CLAIMS)
    with pytest.raises(StateRejected, match=why):
        open_(token, **over)


def test_other_instance_and_other_key() -> None:
    with pytest.raises(StateRejected, match="another gateway instance"):
        open_(Sealer(KEY, "gw-b").seal(replace(CLAIMS, instance="gw-b")))
    with pytest.raises(StateRejected, match="failed verification"):
        open_(Sealer(b"z" * 32, "gw-a").seal(CLAIMS))


@pytest.mark.parametrize("token", [None, 3, "", "g1", "g1.a.b", "x.y.z", "g1.!!.??"])
def test_garbage_is_rejected(token: object) -> None:
    with pytest.raises(StateRejected):
        open_(token)


def test_a_trailing_pad_is_rejected() -> None:
    """Issue defect: "A `requestState` with a trailing `=` is accepted
    (non-canonical encoding)". Only the encoding the gateway produced opens."""
    token = Sealer(KEY, "gw-a").seal(CLAIMS)
    body_end = token.rindex(".")
    for forged in (token + "=", token + "==", token[:body_end] + "=" + token[body_end:]):
        with pytest.raises(StateRejected, match="malformed"):
            open_(forged)


MUTATIONS = st.sampled_from(("replace", "insert", "delete"))
TOKEN = Sealer(KEY, "gw-a").seal(CLAIMS)


@settings(max_examples=500)
@example("insert", len(TOKEN), "=")  # the padding the issue found
@example("insert", TOKEN.rindex("."), "=")
@example("insert", 5, "\n")  # a character the decoder would skip
@given(MUTATIONS, st.integers(min_value=0), st.characters(codec="utf-8"))
def test_any_mutation_of_a_valid_token_is_rejected(kind: str, pos: int, char: str) -> None:
    """2026-07-28 MRTR "Server Requirements" 5: the server MUST validate
    requestState. Any change to an issued token (a character replaced,
    inserted or removed anywhere, padding or base64 slack included) is
    refused; nothing decodes to the same claims from another string."""
    token = Sealer(KEY, "gw-a").seal(CLAIMS)
    i = pos % (len(token) + 1)
    if kind == "replace":
        i = min(i, len(token) - 1)
        forged = token[:i] + char + token[i + 1 :]
    elif kind == "insert":
        forged = token[:i] + char + token[i:]
    else:
        i = min(i, len(token) - 1)
        forged = token[:i] + token[i + 1 :]
    assume(forged != token)
    with pytest.raises(StateRejected):
        open_(forged)


def test_digest_ignores_mrtr_plumbing_and_meta_but_not_arguments() -> None:
    base = {"name": "t", "arguments": {"a": 1, "b": 2}}
    assert params_digest(base) == params_digest(
        {
            "arguments": {"b": 2, "a": 1},
            "name": "t",
            "_meta": {"x": 1},
            "inputResponses": {"k": {}},
            "requestState": "s",
        }
    )
    assert params_digest(base) != params_digest({"name": "t", "arguments": {"a": 2, "b": 2}})


def test_short_keys_are_refused() -> None:
    with pytest.raises(ValueError):
        Sealer(b"short", "gw")


REPLAY = replace(CLAIMS, handle=None, nonce="n-1")


def test_a_rerun_state_is_consumed_once_until_it_expires() -> None:
    """Issue defect: "In replay mode one state can be presented any number of
    times". Single-use within the state's lifetime; the memory of it goes
    with its expiry (an expired state is refused by `open` anyway)."""
    consumed = ConsumedStates(limit=4)
    consumed.consume(REPLAY, now_ms=5_000)
    with pytest.raises(StateRejected, match="already used"):
        consumed.consume(REPLAY, now_ms=5_001)
    consumed.consume(replace(REPLAY, nonce="n-2", expires_ms=20_000), now_ms=5_002)
    assert len(consumed) == 2
    consumed.consume(replace(REPLAY, nonce="n-3", expires_ms=20_000), now_ms=10_000)
    assert len(consumed) == 2  # n-1 expired at 10_000 and is forgotten


def test_consumed_states_are_bounded_and_refuse_rather_than_forget() -> None:
    consumed = ConsumedStates(limit=2)
    consumed.consume(replace(REPLAY, nonce="a"), now_ms=0)
    consumed.consume(replace(REPLAY, nonce="b"), now_ms=0)
    with pytest.raises(ConsumedStates.Full):
        consumed.consume(replace(REPLAY, nonce="c"), now_ms=0)
    with pytest.raises(StateRejected, match="already used"):
        consumed.consume(replace(REPLAY, nonce="a"), now_ms=0)
    consumed.consume(replace(REPLAY, nonce="c"), now_ms=10_000)  # room again once a, b expired


@pytest.mark.parametrize("nonce", [None, "", 7])
def test_a_rerun_state_without_a_nonce_is_refused(nonce: object) -> None:
    with pytest.raises(StateRejected, match="malformed"):
        ConsumedStates(limit=2).consume(replace(REPLAY, nonce=nonce), now_ms=0)  # type: ignore[arg-type]


def test_the_nonce_survives_sealing() -> None:
    token = Sealer(KEY, "gw-a").seal(REPLAY)
    assert open_(token) == REPLAY


def test_a_state_that_reruns_the_call_opens_on_any_instance() -> None:
    """Issue #13: "with a shared state key, `replay_tools` work whichever
    replica gets the retry". Only a parked call's state (it has a handle) is
    bound to the instance holding the call; a replay or re-send state is not."""
    replay = replace(CLAIMS, instance="gw-b", handle=None)
    assert open_(Sealer(KEY, "gw-b").seal(replay)).instance == "gw-b"
    resend = replace(CLAIMS, instance="gw-b", handle=None, resend=True)
    assert open_(Sealer(KEY, "gw-b").seal(resend)).resend


# -- key rotation (issue #13: "several keys, the first seals and all open") -------------

KEY_A = b"a" * 32
KEY_B = b"b" * 32


def open_with(keys: list[bytes], token: str) -> Claims:
    return Sealer(keys, "gw-a").open(
        token, principal="alice", method="tools/call", digest=CLAIMS.digest, now_ms=5_000
    )


def test_a_state_sealed_with_the_old_key_opens_once_the_new_key_is_first() -> None:
    """Issue #13: "State-key rotation without downtime: several keys, the
    first seals and all open, so replicas can roll to a new key one by one"."""
    sealed_by_a = Sealer(KEY_A, "gw-a").seal(CLAIMS)
    assert open_with([KEY_B, KEY_A], sealed_by_a) == CLAIMS


def test_the_first_listed_key_seals() -> None:
    """Issue #13: "the first seals": [B, A] seals with B, which B alone opens
    and A alone does not."""
    token = Sealer([KEY_B, KEY_A], "gw-a").seal(CLAIMS)
    assert open_with([KEY_B], token) == CLAIMS
    with pytest.raises(StateRejected, match="failed verification"):
        open_with([KEY_A], token)


def test_a_state_sealed_with_a_dropped_key_is_refused() -> None:
    """Once the old key is dropped, what it sealed fails as any other key's."""
    sealed_by_a = Sealer(KEY_A, "gw-a").seal(CLAIMS)
    with pytest.raises(StateRejected, match=r"failed verification \(tampered or another key\)"):
        open_with([KEY_B], sealed_by_a)


def test_a_forged_mac_is_refused_by_every_listed_key() -> None:
    """2026-07-28 MRTR "Server Requirements" 5: more keys open more tokens
    only by their own MACs; a forged one still fails."""
    token = Sealer(KEY_A, "gw-a").seal(CLAIMS)
    head, _, mac = token.rpartition(".")
    forged = f"{head}.{'A' if mac[0] != 'A' else 'B'}{mac[1:]}"
    with pytest.raises(StateRejected, match="failed verification"):
        open_with([KEY_B, KEY_A], forged)
    body = replace(CLAIMS, principal="mallory")
    other = Sealer(b"m" * 32, "gw-a").seal(body)
    with pytest.raises(StateRejected, match="failed verification"):
        open_with([KEY_B, KEY_A], other)


@pytest.mark.parametrize("keys", [[], [KEY_A, b"short"]])
def test_an_empty_or_short_key_list_is_refused(keys: list[bytes]) -> None:
    with pytest.raises(ValueError):
        Sealer(keys, "gw")


KEYS = st.lists(st.binary(min_size=16, max_size=48), min_size=1, max_size=4)


@given(KEYS, KEYS, st.integers(min_value=0))
def test_a_state_opens_on_any_list_holding_its_sealing_key(
    sealing: list[bytes], others: list[bytes], where: int
) -> None:
    """Property (issue #13): seal-then-open round-trips on any key list that
    contains the key that sealed, wherever it stands in the list."""
    token = Sealer(sealing, "gw-a").seal(CLAIMS)
    opening = list(others)
    opening.insert(where % (len(opening) + 1), sealing[0])
    assert open_with(opening, token) == CLAIMS
