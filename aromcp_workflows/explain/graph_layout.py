"""Where each node of a workflow graph goes on a page: a layered (Sugiyama-style) layout.

The web view draws the graph `flow_graph` builds as SVG, with no graph library in the
page (nothing is fetched at run time), so positions are worked out here, in plain Python,
where they can be tested: loop back edges are set aside, every other edge points down,
nodes are put in layers by their longest path from the start, ordered within a layer by
the mean position of their neighbours (a few sweeps up and down), and placed left to
right as near those neighbours as the gaps allow.  Edges that span several layers pass
through invisible points, so they bend around the nodes between.  Each subgraph (a
sub-agent task, an included workflow, an error handler) is the box around its nodes.
"""

from __future__ import annotations

import textwrap
from collections import defaultdict
from dataclasses import dataclass, field

from aromcp_workflows.explain.mermaid import FlowGraph

CHAR_W = 6.6  # px per character of the page's 11px sans-serif labels, on average
LINE_H = 15
WRAP = 30  # characters per label line
MAX_LINES = 3
H_GAP = 28
V_GAP = 44
MARGIN = 24
LEFT = 60  # the left margin, where loop edges going back up on the left side pass
BLOCK_PAD = 12
BLOCK_TITLE = 16
SWEEPS = 6
DETAIL_ROOM = 150  # right of the rightmost node: its note (`2 of 3 tasks done`) is written beside it


@dataclass(frozen=True)
class Placed:
    """A node's box (x, y: its top-left corner) and its label cut into lines."""

    x: float
    y: float
    w: float
    h: float
    lines: list[str]


@dataclass(frozen=True)
class Route:
    """An edge's polyline; `back`: a loop's edge back up to its head."""

    source: str
    target: str
    points: list[tuple[float, float]]
    label: str | None
    dotted: bool
    back: bool


@dataclass(frozen=True)
class Box:
    id: str
    title: str
    kind: str
    x: float
    y: float
    w: float
    h: float


@dataclass
class Layout:
    width: float
    height: float
    nodes: dict[str, Placed] = field(default_factory=dict)
    edges: list[Route] = field(default_factory=list)
    blocks: list[Box] = field(default_factory=list)


@dataclass
class _Work:
    """The layout in progress: sizes, forward edges (with dummy points), layers, orders."""

    size: dict[str, tuple[float, float]]
    lines: dict[str, list[str]]
    down: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    up: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    layer: dict[str, int] = field(default_factory=dict)
    layers: list[list[str]] = field(default_factory=list)
    x: dict[str, float] = field(default_factory=dict)
    chains: dict[int, list[str]] = field(default_factory=dict)  # edge index -> dummy points on its way


def layout(graph: FlowGraph) -> Layout:
    """Positions for every node, edge and block of `graph`."""
    work = _Work(*_sizes(graph))
    back = _back_edges(graph)
    _layer(graph, work, back)
    _add_dummies(graph, work, back)
    _order(work)
    _place_x(work)
    ys = _place_y(work)
    return _result(graph, work, back, ys)


def _sizes(graph: FlowGraph) -> tuple[dict[str, tuple[float, float]], dict[str, list[str]]]:
    size: dict[str, tuple[float, float]] = {}
    lines: dict[str, list[str]] = {}
    for node in graph.nodes:
        wrapped = textwrap.wrap(node.label, WRAP, break_long_words=True) or [""]
        if len(wrapped) > MAX_LINES:
            rest = textwrap.shorten(" ".join(wrapped[MAX_LINES - 1:]), WRAP, placeholder="…")
            wrapped = wrapped[:MAX_LINES - 1] + [rest]
        pad = 40 if node.shape in ("diamond", "loop") else 24
        width = max(70.0, max(len(line) for line in wrapped) * CHAR_W + pad)
        size[node.id] = (width, float(len(wrapped) * LINE_H + (22 if node.shape == "diamond" else 14)))
        lines[node.id] = wrapped
    return size, lines


def _back_edges(graph: FlowGraph) -> set[int]:
    """Edges that close a cycle (a loop's repeat or continue), found by depth-first search
    from the nodes without incoming edges, in drawing order."""
    out: dict[str, list[tuple[int, str]]] = defaultdict(list)
    incoming: set[str] = set()
    for index, edge in enumerate(graph.edges):
        out[edge.source].append((index, edge.target))
        incoming.add(edge.target)
    back: set[int] = set()
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    roots = [n.id for n in graph.nodes if n.id not in incoming] + [n.id for n in graph.nodes]
    for root in roots:
        if root in state:
            continue
        stack = [(root, iter(out[root]))]
        state[root] = 1
        while stack:
            node, edges = stack[-1]
            step = next(edges, None)
            if step is None:
                state[node] = 2
                stack.pop()
            elif state.get(step[1]) == 1:
                back.add(step[0])
            elif step[1] not in state:
                state[step[1]] = 1
                stack.append((step[1], iter(out[step[1]])))
    return back


def _layer(graph: FlowGraph, work: _Work, back: set[int]) -> None:
    """Longest path from the sources along forward edges (a topological pass)."""
    preds: dict[str, list[str]] = defaultdict(list)
    indegree = {n.id: 0 for n in graph.nodes}
    succ: dict[str, list[str]] = defaultdict(list)
    for index, edge in enumerate(graph.edges):
        if index not in back and edge.source != edge.target:
            succ[edge.source].append(edge.target)
            preds[edge.target].append(edge.source)
            indegree[edge.target] += 1
    ready = [n.id for n in graph.nodes if indegree[n.id] == 0]
    while ready:
        node = ready.pop(0)
        work.layer[node] = max((work.layer[p] + 1 for p in preds[node]), default=0)
        for target in succ[node]:
            indegree[target] -= 1
            if indegree[target] == 0:
                ready.append(target)
    for each in graph.nodes:  # never reached by a topological pass (cannot happen after `_back_edges`)
        work.layer.setdefault(each.id, 0)


def _add_dummies(graph: FlowGraph, work: _Work, back: set[int]) -> None:
    """Forward edges between adjacent layers; longer ones through one dummy point per layer."""
    for index, edge in enumerate(graph.edges):
        if index in back or edge.source == edge.target:
            continue
        previous = edge.source
        chain = []
        for level in range(work.layer[edge.source] + 1, work.layer[edge.target]):
            dummy = f"_d{index}_{level}"
            work.layer[dummy], work.size[dummy] = level, (8.0, 0.0)
            work.down[previous].append(dummy)
            work.up[dummy].append(previous)
            chain.append(dummy)
            previous = dummy
        work.down[previous].append(edge.target)
        work.up[edge.target].append(previous)
        work.chains[index] = chain


def _order(work: _Work) -> None:
    """Layers in drawing order first, then sweeps that sort each layer by the mean position
    of its neighbours in the layer above (going down) or below (going up)."""
    count = max(work.layer.values(), default=-1) + 1
    work.layers = [[] for _ in range(count)]
    for node, level in work.layer.items():
        work.layers[level].append(node)
    for sweep in range(SWEEPS):
        downward = sweep % 2 == 0
        levels = range(1, count) if downward else range(count - 2, -1, -1)
        for level in levels:
            neighbours = work.up if downward else work.down
            ref = work.layers[level - 1] if downward else work.layers[level + 1]
            where = {node: i for i, node in enumerate(ref)}
            current = {node: i for i, node in enumerate(work.layers[level])}

            def mean(node: str, where: dict[str, int] = where, current: dict[str, int] = current,
                     neighbours: dict[str, list[str]] = neighbours) -> float:
                seen = [where[n] for n in neighbours[node] if n in where]
                return sum(seen) / len(seen) if seen else float(current[node])

            work.layers[level].sort(key=mean)


def _place_x(work: _Work) -> None:
    """Left to right within each layer, each node as near the mean centre of its neighbours
    as the gaps allow; alternating passes down and up steady the picture."""
    for row in work.layers:
        left = 0.0
        for node in row:
            width = work.size[node][0]
            work.x[node] = left + width / 2
            left += width + H_GAP
    for sweep in range(2 * SWEEPS):
        downward = sweep % 2 == 0
        neighbours = work.up if downward else work.down
        for row in (work.layers if downward else list(reversed(work.layers))):
            wanted = [_mean_x(work, neighbours[n], work.x[n]) for n in row]
            _pack(work, row, wanted)
    low = min((work.x[n] - work.size[n][0] / 2 for n in work.x), default=0.0)
    for node in work.x:
        work.x[node] += LEFT - low


def _mean_x(work: _Work, nodes: list[str], default: float) -> float:
    xs = [work.x[n] for n in nodes if n in work.x]
    return sum(xs) / len(xs) if xs else default


def _pack(work: _Work, row: list[str], wanted: list[float]) -> None:
    """Centres as close to `wanted` as possible, in this order, without overlapping."""
    half = [work.size[n][0] / 2 for n in row]
    xs = list(wanted)
    for i in range(1, len(row)):  # push right what overlaps its left neighbour
        xs[i] = max(xs[i], xs[i - 1] + half[i - 1] + H_GAP + half[i])
    drift = sum(x - w for x, w in zip(xs, wanted, strict=True)) / len(xs) if xs else 0.0
    for node, x in zip(row, xs, strict=True):  # then the row back left by what it was pushed on average
        work.x[node] = x - drift


def _place_y(work: _Work) -> list[float]:
    """The top of each layer; a layer is as tall as its tallest node."""
    tops, top = [], float(MARGIN + BLOCK_TITLE)
    for row in work.layers:
        tops.append(top)
        top += max((work.size[n][1] for n in row), default=0.0) + V_GAP
    return tops


def _result(graph: FlowGraph, work: _Work, back: set[int], tops: list[float]) -> Layout:
    out = Layout(0.0, 0.0)
    for node in graph.nodes:
        w, h = work.size[node.id]
        out.nodes[node.id] = Placed(round(work.x[node.id] - w / 2, 1), round(tops[work.layer[node.id]], 1),
                                    round(w, 1), round(h, 1), work.lines[node.id])
    for index, edge in enumerate(graph.edges):
        points = _route(out, work, tops, edge.source, edge.target, index, index in back)
        out.edges.append(Route(edge.source, edge.target, points, edge.label, edge.dotted, index in back))
    out.blocks = _boxes(graph, out)
    right = max([p.x + p.w for p in out.nodes.values()] + [b.x + b.w for b in out.blocks] + [0.0])
    bottom = max([p.y + p.h for p in out.nodes.values()] + [b.y + b.h for b in out.blocks] + [0.0])
    out.width, out.height = round(right + MARGIN + DETAIL_ROOM, 1), round(bottom + MARGIN, 1)
    return out


def _route(out: Layout, work: _Work, tops: list[float], source: str, target: str, index: int,
           back: bool) -> list[tuple[float, float]]:
    a, b = out.nodes[source], out.nodes[target]
    if back or source == target:
        return _back_route(out, work, a, b, index)
    points = [(round(a.x + a.w / 2, 1), a.y + a.h)]
    for dummy in work.chains.get(index, []):
        top = tops[work.layer[dummy]]
        points += [(round(work.x[dummy], 1), top), (round(work.x[dummy], 1), top + _row_height(work, dummy))]
    points.append((round(b.x + b.w / 2, 1), b.y))
    return points


def _back_route(out: Layout, work: _Work, a: Placed, b: Placed, index: int) -> list[tuple[float, float]]:
    """A loop's edge back up: out of the source on the side it stands on (left of the head:
    left), past every node of the layers between, into the head from that side."""
    between = [p for p in out.nodes.values() if b.y <= p.y <= a.y]
    offset = 18 + 6 * (index % 4)
    if a.x + a.w / 2 < b.x + b.w / 2:
        side = min(p.x for p in between) - offset
        return [(a.x, a.y + a.h / 2), (side, a.y + a.h / 2), (side, b.y + b.h / 2), (b.x, b.y + b.h / 2)]
    side = max(p.x + p.w for p in between) + offset
    return [(a.x + a.w, a.y + a.h / 2), (side, a.y + a.h / 2), (side, b.y + b.h / 2), (b.x + b.w, b.y + b.h / 2)]


def _row_height(work: _Work, dummy: str) -> float:
    return max((work.size[n][1] for n in work.layers[work.layer[dummy]]), default=0.0)


def _boxes(graph: FlowGraph, out: Layout) -> list[Box]:
    """Each block around its nodes and inner blocks (innermost first, so parents fit them)."""
    members: dict[str, list[tuple[float, float, float, float]]] = defaultdict(list)
    for node in graph.nodes:
        if node.block is not None:
            p = out.nodes[node.id]
            members[node.block].append((p.x, p.y, p.x + p.w, p.y + p.h))
    depth = {b.id: 0 for b in graph.blocks}
    parents = {b.id: b.parent for b in graph.blocks}
    for block in graph.blocks:
        parent = block.parent
        while parent is not None:
            depth[block.id] += 1
            parent = parents.get(parent)
    boxes: dict[str, Box] = {}
    for block in sorted(graph.blocks, key=lambda b: -depth[b.id]):
        spans = members.get(block.id, [])
        if not spans:
            continue
        x0, y0 = min(s[0] for s in spans) - BLOCK_PAD, min(s[1] for s in spans) - BLOCK_PAD - BLOCK_TITLE
        x1, y1 = max(s[2] for s in spans) + BLOCK_PAD, max(s[3] for s in spans) + BLOCK_PAD
        boxes[block.id] = Box(block.id, block.title, block.kind, round(x0, 1), round(y0, 1),
                              round(x1 - x0, 1), round(y1 - y0, 1))
        if block.parent is not None:
            members[block.parent].append((x0, y0, x1, y1))
    return [boxes[b.id] for b in graph.blocks if b.id in boxes]
