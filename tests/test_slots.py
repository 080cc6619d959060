import threading

from agent.sessions.slots import hold_slot

URL = "http://127.0.0.1:1"


def test_a_second_session_waits_for_the_only_slot_with_a_message():
    notes: list[str] = []
    order: list[str] = []
    first_in = threading.Event()
    release = threading.Event()

    def first() -> None:
        with hold_slot(URL, 1, notes.append) as slot:
            order.append(f"first:{slot}")
            first_in.set()
            release.wait(10)
        order.append("first-done")

    def second() -> None:
        first_in.wait(10)
        with hold_slot(URL, 1, notes.append, poll=0.05) as slot:
            order.append(f"second:{slot}")

    a, b = threading.Thread(target=first), threading.Thread(target=second)
    a.start()
    b.start()
    first_in.wait(10)
    deadline = threading.Event()
    for _ in range(200):
        if notes:
            break
        deadline.wait(0.05)
    assert notes and "busy with another session" in notes[0]
    release.set()
    a.join(10)
    b.join(10)
    assert order == ["first:0", "first-done", "second:0"]


def test_with_two_slots_sessions_run_side_by_side_on_different_slots():
    with hold_slot(URL, 2, lambda m: None) as one, hold_slot(URL, 2, lambda m: None) as two:
        assert {one, two} == {0, 1}


def test_alternating_sessions_keep_their_own_slots():
    seen = []
    for session in ["a", "b", "a", "b"]:
        with hold_slot(URL, 2, lambda m: None, session) as slot:
            seen.append((session, slot))
    assert seen[0][1] != seen[1][1]
    assert seen[2] == seen[0] and seen[3] == seen[1]
