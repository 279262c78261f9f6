"""Shared slots given out fairly between owners: no owner holds more than their share, and a
free slot goes to the waiting owner holding fewest."""

from __future__ import annotations

import asyncio

import pytest

from jupyter_sandbox.sandbox.host.fair_share import FairShare, OwnerCap, current_owner


async def settle() -> None:
    """Let every task that can run, run."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_one_owner_at_their_share_leaves_the_rest_to_others() -> None:
    share = FairShare(total=4, per_owner=2)
    for _ in range(2):
        await share.acquire("alice")
    third = asyncio.ensure_future(share.acquire("alice"))
    await settle()
    assert not third.done()  # alice waits for one of her own
    await asyncio.wait_for(share.acquire("bob"), 0.1)  # bob is served at once
    assert share.held == {"alice": 2, "bob": 1}
    share.release("alice")
    assert await asyncio.wait_for(third, 0.1) == "alice"
    assert share.held == {"alice": 2, "bob": 1}


async def test_a_free_slot_goes_to_the_waiting_owner_holding_fewest() -> None:
    share = FairShare(total=2, per_owner=2)
    await share.acquire("alice")
    await share.acquire("alice")
    # alice asked first, many times; bob once, after her.
    alices = [asyncio.ensure_future(share.acquire("alice")) for _ in range(3)]
    await settle()
    bobs = asyncio.ensure_future(share.acquire("bob"))
    await settle()
    share.release("alice")
    await settle()
    assert bobs.done()
    assert not any(task.done() for task in alices)
    share.release("alice")  # now alice holds 0 and bob 1: alice's first waiter is next
    await settle()
    assert [task.done() for task in alices] == [True, False, False]
    for task in alices:
        task.cancel()
    await asyncio.gather(*alices, return_exceptions=True)


async def test_a_cancelled_wait_holds_nothing_and_loses_no_grant() -> None:
    share = FairShare(total=1, per_owner=1)
    await share.acquire("alice")
    waiting = asyncio.ensure_future(share.acquire("bob"))
    await settle()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert share.waiting() == 0
    # Granted and cancelled in the same turn: the slot goes on to the next waiter.
    granted_then_cancelled = asyncio.ensure_future(share.acquire("bob"))
    after = asyncio.ensure_future(share.acquire("carol"))
    await settle()
    share.release("alice")
    granted_then_cancelled.cancel()
    await asyncio.gather(granted_then_cancelled, return_exceptions=True)
    assert await asyncio.wait_for(after, 0.1) == "carol"
    assert share.held == {"carol": 1}
    assert share.in_use == 1


async def test_a_wait_cancelled_in_the_turn_its_slot_frees_is_passed_over() -> None:
    """The cancellation lands first: the waiter's task has not yet run to leave the queue when
    the release hands out the slot (a client leaves while its call waits for an engine thread,
    and a thread ends in the same turn). The release raised, counted the slot as held by
    nobody, and left the waiters after it unserved with slots free: the owner's calls then
    waited for good, on an idle loop (the shape of a CI hang at stop 44)."""
    share = FairShare(total=1, per_owner=1)
    await share.acquire("alice")
    cancelled = asyncio.ensure_future(share.acquire("alice"))
    after = asyncio.ensure_future(share.acquire("alice"))
    await settle()
    cancelled.cancel()
    share.release("alice")  # before the cancelled task has run
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert await asyncio.wait_for(after, 0.1) == "alice"  # the slot went to the next waiter
    assert (share.held, share.in_use, share.waiting()) == ({"alice": 1}, 1, 0)
    share.release("alice")
    assert (share.held, share.in_use) == ({}, 0)


async def test_the_owner_is_the_current_tasks_unless_named() -> None:
    share = FairShare(total=4, per_owner=1)

    async def as_owner(owner: str) -> str:
        current_owner.set(owner)
        async with share.slot() as taken:
            return taken

    assert await asyncio.gather(as_owner("alice"), as_owner("bob")) == ["alice", "bob"]
    async with share.slot() as taken:  # no request: the server's own work
        assert taken == ""
    assert share.in_use == 0


def test_an_owner_cap_refuses_past_either_cap_naming_its_setting() -> None:
    cap = OwnerCap("watches", "X.per_owner", "X.total")
    for _ in range(2):
        assert cap.refusal("alice", 2, 3) is None
        cap.take("alice")
    assert "X.per_owner" in (cap.refusal("alice", 2, 3) or "")
    assert cap.refusal("bob", 2, 3) is None  # alice's watches refuse only alice
    cap.take("bob")
    refusal = cap.refusal("carol", 2, 3) or ""
    assert "X.total" in refusal
    assert "3 watches" in refusal
    assert cap.refusal("carol", 0, 0) is None  # 0: no cap
    for owner in ("alice", "alice", "bob"):
        cap.give_back(owner)
    assert cap.held == {}
    assert cap.in_use == 0


def test_a_share_without_slots_is_refused() -> None:
    with pytest.raises(ValueError, match="needs slots"):
        FairShare(total=0, per_owner=1)
    assert FairShare(total=2, per_owner=5).per_owner == 2  # a share is at most the whole


async def test_a_slot_inside_a_slot_of_the_same_share_takes_none() -> None:
    """A request's turn around a core call that takes its own (snapshot restores): at the
    owner's share, a second slot would wait for the first for ever."""
    share = FairShare(total=4, per_owner=1)
    other = FairShare(total=4, per_owner=1)
    async with share.slot("alice"):
        async with asyncio.timeout(1), share.slot("alice"):
            assert share.held == {"alice": 1}
            async with other.slot("alice"):  # another share's slot is taken as ever
                assert other.held == {"alice": 1}

        async def started_inside() -> None:  # working for the holder: no slot of its own
            async with share.slot("alice"):
                assert share.held == {"alice": 1}

        await asyncio.wait_for(asyncio.ensure_future(started_inside()), 1)
    assert share.held == {}
    # Another request of alice's (a task not started inside the slot) waits for her turn.
    go = asyncio.Event()

    async def another_request() -> None:
        await go.wait()
        async with share.slot("alice"):
            assert share.held == {"alice": 1}

    elsewhere = asyncio.ensure_future(another_request())
    async with share.slot("alice"):
        go.set()
        await settle()
        assert not elsewhere.done()
    await asyncio.wait_for(elsewhere, 1)
    assert share.held == {}
