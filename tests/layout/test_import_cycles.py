"""No import cycles between Kelp's modules (issue 19), checked on every test run.

Why: a cycle makes import order matter (a module is seen half-initialised),
and it was only ever hidden by moving an import into a function or under
`if TYPE_CHECKING:`. Such imports are counted here too (see import_graph.py),
so a cycle cannot come back by deferring one side of it. Two modules that
need each other share a third module, or one of them gets a narrow interface
it is handed (as the Kafka connection gets `ConnectionHost`).
"""

from __future__ import annotations

from collections import deque

from tests.layout.import_graph import FILES, graph


def _components(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in edges:
                    continue
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def _shortest_cycle(edges: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest cycle through the component's first module, as a path that ends where it starts."""
    members = set(component)
    start = component[0]
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(edges[node] & members):
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if child not in came_from:
                came_from[child] = node
                queue.append(child)
    raise AssertionError(f"no cycle through {start} in {component}")  # a component always has one


def cycles(edges: dict[str, set[str]]) -> list[str]:
    """One line per group of modules that import each other: a shortest cycle, and the whole group when
    more modules are caught in it."""
    out = []
    for component in _components(edges):
        cycle = _shortest_cycle(edges, component)
        line = " -> ".join(cycle)
        if len(component) > len(cycle) - 1:
            line += f"  (all of: {', '.join(component)})"
        out.append(line)
    return out


def test_no_import_cycles() -> None:
    found = cycles(graph())
    assert not found, "import cycles between Kelp modules:\n" + "\n".join(found)


def test_the_graph_sees_kelp_imports() -> None:
    """Guards the guard: the mapped packages, relative and function-level imports all reach the graph."""
    edges = graph()
    assert {"kelp.broker.app", "kelp.operator.manifests.spec", "kelp.cli.main"} <= set(FILES)
    assert "kelp.config.broker" in edges["kelp.broker.app"]  # `from kelp.config.broker import BrokerConfig`
    assert "kelp.config.broker" in edges["kelp.operator.manifests.spec"]  # from the mapped operator
    assert "kelp.broker.kafka.server" in edges["kelp.broker.app"]  # `from .kafka.server import ...`, relative


def test_the_checker_sees_a_cycle() -> None:
    """Guards the guard: a cycle, also one through three modules and next to an acyclic part, is named."""
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"f"}, "f": {"e"}, "g": {"g"}}
    assert cycles(edges) == ["a -> b -> c -> a", "e -> f -> e"]
    assert cycles({"a": {"b"}, "b": set()}) == []
