from uniradix.tree.lru import LRUList
from uniradix.tree.node import TreeNode


def nodes(n):
    return [TreeNode(i, b"", None, 2, None, 0) for i in range(n)]


def order(lru):
    return [n.id for n in lru]


def test_insert_remove_move_and_membership():
    lru = LRUList(index=1, num_components=2)
    a, b, c = nodes(3)
    for n in (a, b, c):
        lru.insert_mru(n)
    assert order(lru) == [2, 1, 0] and len(lru) == 3
    lru.move_to_mru(a)
    assert order(lru) == [0, 2, 1]
    lru.remove(c)
    assert c not in lru and order(lru) == [0, 1]
    lru.insert_after(a, c)
    assert order(lru) == [0, 2, 1]
    assert a.data[0].lru_prev is None  # other components' links are untouched


def test_least_recent_unlocked_skips_locked_nodes():
    lru = LRUList(index=0, num_components=1)
    a, b, c = nodes(3)
    for n in (a, b, c):
        lru.insert_mru(n)  # order c, b, a (a least recent)
    a.data[0].lock_ref = 1
    assert lru.least_recent_unlocked() is b
    assert lru.least_recent_unlocked(before=b) is c
    assert lru.least_recent_unlocked(before=c) is None
    lru.remove(b)
    assert lru.least_recent_unlocked(before=b) is c  # a cursor that left restarts at the tail


def test_move_to_mru_of_the_head_and_of_the_tail_keeps_every_link():
    lru = LRUList(index=0, num_components=1)
    a, b, c = nodes(3)
    for n in (a, b, c):
        lru.insert_mru(n)  # order c, b, a
    lru.move_to_mru(c)  # already the most recent
    assert order(lru) == [2, 1, 0] and len(lru) == 3
    lru.move_to_mru(a)  # the least recent
    assert order(lru) == [0, 2, 1] and len(lru) == 3
    assert lru.least_recent_unlocked() is b
    backwards = []
    node = lru.tail.data[0].lru_prev
    while node is not lru.head:
        backwards.append(node.id)
        node = node.data[0].lru_prev
    assert backwards == [1, 2, 0]


def test_place_after_moves_a_listed_node_behind_another_or_leaves_it_in_place():
    lru = LRUList(index=0, num_components=1)
    a, b, c, d = nodes(4)
    for n in (a, b, c, d):
        lru.insert_mru(n)  # order d, c, b, a
    lru.place_after(lru.head, a)  # the least recent to the front
    assert order(lru) == [0, 3, 2, 1] and len(lru) == 4
    lru.place_after(a, b)  # from the tail end to right behind a
    assert order(lru) == [0, 1, 3, 2]
    lru.place_after(a, b)  # already there: nothing moves
    assert order(lru) == [0, 1, 3, 2] and len(lru) == 4
    backwards = []
    node = lru.tail.data[0].lru_prev
    while node is not lru.head:
        backwards.append(node.id)
        node = node.data[0].lru_prev
    assert backwards == [2, 3, 1, 0]
