"""Pictures of schedules and of their traffic (book, Chapters 2 and 3).

Every function here returns a :mod:`warmup_kit.viz.widgets` spec (data only), so
the same picture is drawn by matplotlib in a kernel and by Plotly on the
static site. :func:`stepper` is the round-by-round view of any schedule: the
grid of which contributions each rank holds in each chunk, with the chunks
sent in the round outlined.
"""
from __future__ import annotations

import dataclasses
import html
from typing import Any, Sequence

from warmup_kit.algorithms import build
from warmup_kit.units import human_bytes
from warmup_kit.schedule import Schedule, simulate_contents, traffic
from warmup_kit.viz.widgets import (
    Bars, Figure, Grid, Knob, Line, Panel, Points, explore)

PHASES = {"ring": ("reduce-scatter", "all-gather")}
DONE = "done"          # the round knob's last position: the final state


def prefix(s: Schedule, rounds: int) -> Schedule:
    """The first ``rounds`` rounds of ``s`` (for drawing partial progress)."""
    return dataclasses.replace(s, rounds=s.rounds[:rounds])


def _cell(held: frozenset, chunk: int, n: int, moved: bool) -> str:
    if not held:
        return ""
    if not moved:
        ranks = sorted(r for r, _ in held)
        return "Σ all" if len(ranks) == n > 2 else "+".join(map(str, ranks))
    return ",".join(f"{r}.{c}" for r, c in sorted(held))


def holdings(s: Schedule, rounds: int) -> Grid:
    """Who holds what after ``rounds`` rounds: rows = ranks, cols = chunks.

    A cell lists the ranks whose contributions it holds ("0+2"), or "Σ all"
    once it holds all N; for all-to-all, "r.c" is rank r's chunk c. Colour
    is the fraction of the N contributions held.
    """
    state = simulate_contents(prefix(s, rounds))
    n = s.ranks
    return Grid(z=[[len(h) / n for h in row] for row in state],
                text=[[_cell(h, c, n, s.collective == "all_to_all")
                       for c, h in enumerate(row)]
                      for row in state],
                xlabels=[f"chunk {c}" for c in range(s.chunks)],
                ylabels=[f"rank {r}" for r in range(n)])


def sends(s: Schedule, k: int) -> Points:
    """The chunks sent in round ``k`` (none if k is past the end)."""
    xs, ys, text = [], [], []
    for t in (s.rounds[k] if k < s.steps else []):
        for c in t.chunks:
            xs.append(c)
            ys.append(t.src)
            text.append(f"{'+' if t.reduce else ''}→{t.dst}")
    return Points(xs, ys, text, name="sent", color="#d62728",
                  open_square=True)


def round_caption(s: Schedule, k: int) -> str:
    """'ring allreduce, N=4: round 2 of 6 (reduce-scatter)'."""
    head = f"{s.name} {s.collective}, N={s.ranks}"
    if k >= s.steps:
        return f"{head}: done after {s.steps} round{'s' * (s.steps != 1)}"
    phase = ""
    if s.name in PHASES and s.collective == "allreduce":
        phase = f" ({PHASES[s.name][k >= (s.ranks - 1)]})"
    return f"{head}: round {k + 1} of {s.steps}{phase}"


def stepper(collective: str, algorithm: str, n: int, k: int,
            root: int = 0) -> Panel:
    """Round ``k`` of a schedule: holdings before it, sends during it."""
    s = build(collective, algorithm, n, root=root)
    return Panel([holdings(s, k), sends(s, k)], title=round_caption(s, k))


def ring_stepper(n_values: Sequence[int] = range(2, 9), n: int = 4,
                 collective: str = "allreduce", algorithm: str = "ring"):
    """The Chapter 3 widget: knobs N and round (1-based; rounds past the
    end of a smaller N's schedule, and "done", show the final state)."""
    n_values = list(n_values)
    most = max(build(collective, algorithm, m).steps for m in n_values)

    def view(n: int, k: int | str) -> Panel:
        return stepper(collective, algorithm, n, _round_index(k, most))
    return explore(view, [Knob("n", n_values, "N", n), _round_knob(most)],
                   title=f"{algorithm} {collective}, round by round")


def _round_knob(most: int) -> Knob:
    """Rounds 1 .. ``most`` (the longest schedule shown), then "done", the
    final state: the slider never shows a round the schedules do not have."""
    return Knob("k", [*range(1, most + 1), DONE], "round", 1)


def _round_index(k: int | str, most: int) -> int:
    """0-based round of a round knob value ("done": past every round)."""
    return most if k == DONE else k - 1


# ----------------------------------------------------------- traffic
def ring_bytes(n: int, nbytes: float) -> float:
    """2(N-1)/N * V: bytes each rank sends in a ring all-reduce."""
    return 2 * (n - 1) / n * nbytes


def naive_bytes(n: int, nbytes: float) -> float:
    """(N-1) * V: bytes each rank sends when everyone sends everything."""
    return (n - 1) * nbytes


def sent_per_rank(algorithm: str, n: int, nbytes: int,
                  collective: str = "allreduce") -> int:
    """Most bytes any rank sends in the schedule (exact, uneven chunks)."""
    return max(traffic(build(collective, algorithm, n), nbytes).bytes_sent)


def bytes_vs_n(algorithm: str, ns: Sequence[int] = range(2, 65),
               measured: dict[str, dict[int, float]] | None = None,
               nbytes: int = 2**26) -> Panel:
    """Bytes each rank sends in an all-reduce, in units of V, against N.

    The ring and naive formulas, the schedule of ``algorithm`` (busiest rank
    and mean over ranks, exact for ``nbytes``), and optional measurements
    (label -> {N: bytes sent / V}).
    """
    ns = list(ns)
    tr = [traffic(build("allreduce", algorithm, n), nbytes) for n in ns]
    traces = [Line(ns, [naive_bytes(n, 1) for n in ns], "naive (N-1)·V",
                   dash=True, color="#7f7f7f"),
              Line(ns, [ring_bytes(n, 1) for n in ns], "ring 2(N-1)/N·V",
                   dash=True, color="#1f77b4"),
              Line(ns, [max(t.bytes_sent) / nbytes for t in tr],
                   f"{algorithm}: busiest rank", markers=True,
                   color="#ff7f0e"),
              Line(ns, [sum(t.bytes_sent) / n / nbytes for t, n in
                        zip(tr, ns)], f"{algorithm}: mean over ranks",
                   color="#9467bd")]
    for i, (label, pts) in enumerate(sorted((measured or {}).items())):
        xs = sorted(pts)
        traces.append(Line(xs, [pts[n] for n in xs], label, markers=True,
                           color=("#2ca02c", "#d62728", "#8c564b")[i % 3]))
    return Panel(traces, title=f"all-reduce, {algorithm}: bytes sent per rank",
                 xlabel="ranks N", ylabel="bytes sent / V", logy=True)


def ring_time_split(nbytes: float, alpha_s: float, bw_bytes_per_s: float,
                    ns: Sequence[int] = range(2, 257)) -> Panel:
    """Alpha-beta time of a ring all-reduce, latency and bandwidth terms.

    T = 2(N-1)·alpha + 2(N-1)/N · V / B (Chapter 3; Hockney 1994).
    """
    ns = list(ns)
    lat = [2 * (n - 1) * alpha_s * 1e6 for n in ns]
    bw = [ring_bytes(n, nbytes) / bw_bytes_per_s * 1e6 for n in ns]
    return Panel([Line(ns, [a + b for a, b in zip(lat, bw)], "total"),
                  Line(ns, lat, "latency 2(N-1)·α", dash=True),
                  Line(ns, bw, "bandwidth 2(N-1)/N·V/B", dash=True)],
                 title=f"ring all-reduce of V = {human_bytes(nbytes)}",
                 xlabel="ranks N", ylabel="time (µs)", logx=True, logy=True)




def collective_stepper(n: int = 4, collectives: Sequence[str] = (
        "broadcast", "reduce", "reduce_scatter", "all_gather", "all_to_all",
        "allreduce")):
    """The Chapter 2 widget: each collective's default algorithm, by round."""
    from warmup_kit.algorithms import default_algorithm
    most = max(build(c, default_algorithm(c), n).steps for c in collectives)

    def view(collective: str, k: int | str) -> Panel:
        return stepper(collective, default_algorithm(collective), n,
                       _round_index(k, most))
    return explore(view, [Knob("collective", list(collectives),
                               default="allreduce"), _round_knob(most)],
                   title=f"collectives on N = {n} ranks, round by round")


def factor_curve(ns: Sequence[int] = range(1, 65)) -> Panel:
    """2(N-1)/N against N: it approaches 2 and never reaches it."""
    ns = list(ns)
    return Panel([Line(ns, [2 * (n - 1) / n for n in ns], "2(N-1)/N",
                       markers=True),
                  Line([ns[0], ns[-1]], [2, 2], "limit 2", dash=True,
                       color="#7f7f7f")],
                 title="ring all-reduce: bytes sent per rank, in units of V",
                 xlabel="ranks N", ylabel="bytes sent / V", ylim=(0, 2.2))


def collective_bytes(n: int, nbytes: int) -> Panel:
    """Bytes each rank sends, for every collective (rank 0 and the max)."""
    names = ["broadcast", "reduce", "reduce_scatter", "all_gather",
             "all_to_all", "allreduce"]
    algos = {"broadcast": "tree", "reduce": "tree", "all_to_all": "direct"}
    most = [sent_per_rank(algos.get(c, "ring"), n, nbytes, c) / nbytes
            for c in names]
    return Panel([Bars(names, most, "max over ranks")],
                 title=f"N = {n}: bytes sent per rank, in units of V",
                 ylabel="bytes sent / V")


# ------------------------------------------------------------- tables
class Table:
    """A small table: an HTML ``<table>`` on the page and in JupyterLab
    (the site's theme and JupyterLab style it like their own tables),
    aligned text for ``print`` and for nbval's comparison."""

    def __init__(self, headers: Sequence[str], rows: Sequence[Sequence[Any]],
                 digits: int = 3):
        self.headers = [str(h) for h in headers]
        self.rows = [[_fmt(v, digits) for v in r] for r in rows]
        if any(len(r) != len(self.headers) for r in self.rows):
            raise ValueError(f"every row needs {len(self.headers)} cells")

    def _repr_html_(self) -> str:
        def cells(row, tag):
            return "".join(
                f'<{tag} class="text-{"left" if i == 0 else "right"}">'
                f"{html.escape(c)}</{tag}>" for i, c in enumerate(row))
        body = "".join(f"<tr>{cells(r, 'td')}</tr>" for r in self.rows)
        return (f'<table class="table wk-table"><thead><tr>'
                f"{cells(self.headers, 'th')}</tr></thead>"
                f"<tbody>{body}</tbody></table>")

    def __repr__(self) -> str:
        cols = list(zip(self.headers, *self.rows))
        widths = [max(len(c) for c in col) for col in cols]
        lines = [self.headers] + self.rows
        return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths))
                         for r in lines)


def _fmt(v: Any, digits: int) -> str:
    if isinstance(v, float):
        return f"{v:.{digits}g}" if abs(v) < 1e6 else f"{v:.{digits}e}"
    return str(v)


__all__ = ["Figure", "Table", "bytes_vs_n", "collective_bytes",
           "collective_stepper", "ring_time_split",
           "factor_curve", "holdings", "naive_bytes", "prefix", "ring_bytes",
           "ring_stepper", "round_caption", "sends", "sent_per_rank",
           "stepper"]
