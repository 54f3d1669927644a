import json

from ets.tree import SearchTree, kv_size


def build():
    #            root (5 prompt tokens)
    #           /     \
    #        a(3)     b(2)
    #        /  \        \
    #     c(4)  d(1)     e(6)
    tree = SearchTree("Q", [1, 2, 3, 4, 5])
    a = tree.add_child(tree.root, "a", [10, 11, 12])
    b = tree.add_child(tree.root, "b", [20, 21])
    c = tree.add_child(a, "c", [30, 31, 32, 33])
    d = tree.add_child(a, "d", [40], terminal=True)
    e = tree.add_child(b, "e", [50, 51, 52, 53, 54, 55])
    return tree, a, b, c, d, e


def test_paths_tokens_and_depth():
    tree, a, b, c, d, e = build()
    tree.check()
    assert c.path_token_ids() == [1, 2, 3, 4, 5, 10, 11, 12, 30, 31, 32, 33]
    assert c.cum_tokens == 7 and e.cum_tokens == 8  # the prompt is not generated
    assert c.depth == 2 and c.step_texts() == ["a", "c"]
    assert d.terminal and not c.terminal


def test_kv_size_counts_shared_ancestors_once_and_the_prompt():
    tree, a, b, c, d, e = build()
    assert kv_size([c]) == 5 + 3 + 4
    assert kv_size([c, d]) == 5 + 3 + 4 + 1          # a shared
    assert kv_size([c, d, e]) == 5 + 3 + 4 + 1 + 2 + 6  # root shared by all
    assert kv_size([]) == 0


def test_export_json_and_networkx():
    tree, a, b, c, d, e = build()
    c.score = 0.25
    data = json.loads(tree.to_json())
    assert [n["parent"] for n in data["nodes"]] == [None, 0, 0, 1, 1, 2]
    assert data["nodes"][3]["score"] == 0.25 and data["nodes"][4]["terminal"] is True
    g = tree.to_networkx()
    assert g.number_of_nodes() == 6 and g.number_of_edges() == 5
    assert set(g.successors(1)) == {3, 4}
    assert g.nodes[5]["num_tokens"] == 6


def test_check_catches_broken_links():
    tree, a, *_ = build()
    a.depth = 7
    try:
        tree.check()
    except AssertionError as exc:
        assert "depth" in str(exc)
    else:
        raise AssertionError("check() missed a wrong depth")
