"""The book's graders (warmup_kit.exercises): each accepts a right answer
worked out here independently, rejects wrong ones with a message that
says what is wrong (never the answer), and rejects bad input clearly."""
from __future__ import annotations

import math

import pytest

from warmup_kit import exercises as E
from warmup_kit.algorithms import build
from warmup_kit.model.hardware import SYSTEMS
from warmup_kit.model.nccl import best_for_shape, choices
from warmup_kit.model.hardware import cluster
from warmup_kit.schedule import Schedule, Transfer


def _hand_ring_reduce_scatter(n: int) -> Schedule:
    """Written out from Chapter 3's description, not from ring.py: in round
    k rank i adds chunk (i - k - 1) mod n into rank i + 1's copy."""
    rounds = []
    for k in range(n - 1):
        rounds.append([Transfer(i, (i + 1) % n, ((i - k - 1) % n,),
                                reduce=True) for i in range(n)])
    return Schedule("mine", "reduce_scatter", n, n, rounds)


def _fails(r, *words):
    assert not r.passed and not r
    text = " ".join(str(r).split())     # as read: str() wraps at 86 columns
    assert "NOT YET" in text and "hint:" in text
    for w in words:
        assert w in text, text
    return text


# ------------------------------------------------------------ schedules
@pytest.mark.parametrize("n", [2, 3, 4, 7, 8])
def test_reduce_scatter_accepts_a_hand_written_ring(n):
    r = E.check_reduce_scatter(_hand_ring_reduce_scatter(n), n)
    assert r.passed and "PASSED" in str(r)
    assert f"{n - 1} rounds" in str(r)


def test_reduce_scatter_names_the_bad_slot():
    s = _hand_ring_reduce_scatter(4)
    short = Schedule("mine", "reduce_scatter", 4, 4, s.rounds[:-1])
    _fails(E.check_reduce_scatter(short, 4), "verify() rejects", "rank")


def test_reduce_scatter_rejects_the_wrong_collective_and_size():
    _fails(E.check_reduce_scatter(build("allreduce", "ring", 4), 4),
           "allreduce")
    _fails(E.check_reduce_scatter(_hand_ring_reduce_scatter(4), 8),
           "4 ranks")


def test_reduce_scatter_rejects_a_correct_but_wasteful_schedule():
    """Everyone sends every chunk straight to its owner, then the owner
    forwards its raw chunk around too: correct, more than (N-1)/N V."""
    n = 4
    direct = [[Transfer(i, j, (j,), reduce=True)
               for i in range(n) for j in range(n) if i != j]]
    ok = E.check_reduce_scatter(Schedule("d", "reduce_scatter", n, n,
                                         direct), n)
    assert ok.passed                  # direct: (N-1)/N V per rank, 1 round
    extra = direct + [[Transfer(0, 1, (0,))]]   # a useless copy more
    _fails(E.check_reduce_scatter(Schedule("d", "reduce_scatter", n, n,
                                           extra), n), "busiest rank")


def test_reduce_scatter_rejects_non_schedules():
    with pytest.raises(TypeError, match="Schedule"):
        E.check_reduce_scatter([[(0, 1, 0)]], 2)
    with pytest.raises(ValueError, match="n must be"):
        E.check_reduce_scatter(_hand_ring_reduce_scatter(2), 1)


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_bytes_per_rank_ring_allreduce(n):
    V = 64 * 2**20
    right = 2 * (n - 1) * V // n                  # Chapter 3's 2(N-1)/N V
    assert E.check_bytes_per_rank(right, collective="allreduce", n=n,
                                  nbytes=V).passed
    text = _fails(E.check_bytes_per_rank(2 * V, collective="allreduce",
                                         n=n, nbytes=V), "too high")
    assert f"{right:,} bytes" not in text         # the answer is not given


def test_bytes_per_rank_all_gather_and_bad_input():
    n, V = 8, 8 * 2**20
    assert E.check_bytes_per_rank((n - 1) * V // n, collective="all_gather",
                                  n=n, nbytes=V).passed
    _fails(E.check_bytes_per_rank(V / n, collective="all_gather", n=n,
                                  nbytes=V), "too low")
    with pytest.raises(TypeError, match="answer must be a number"):
        E.check_bytes_per_rank("7 MiB", collective="all_gather", n=n,
                               nbytes=V)
    with pytest.raises(ValueError, match="collective"):
        E.check_bytes_per_rank(1, collective="allgather", n=n, nbytes=V)
    with pytest.raises(TypeError, match="n must be an int"):
        E.check_bytes_per_rank(1, collective="all_gather", n=8.0, nbytes=V)


# ------------------------------------------------------------ costs
def test_crossover_closed_form_for_a_full_tree():
    """N = 15: a full binary tree of depth D = 3, Chapter 4's V*."""
    n, alpha, bw = 15, 5e-6, 50e9
    D, beta = 3, 1 / bw
    v_star = (n - 1 - D) * alpha / ((2 * D - (n - 1) / n) * beta)
    assert E.check_crossover(v_star, n=n, alpha_s=alpha,
                             bw_bytes_per_s=bw).passed
    _fails(E.check_crossover(2 * v_star, n=n, alpha_s=alpha,
                             bw_bytes_per_s=bw), "too high")
    _fails(E.check_crossover(alpha * bw, n=n, alpha_s=alpha,
                             bw_bytes_per_s=bw), "too low")


def test_crossover_bad_input():
    with pytest.raises(ValueError, match="alpha_s must be > 0"):
        E.check_crossover(1e5, n=15, alpha_s=-1, bw_bytes_per_s=1e9)
    with pytest.raises(TypeError):
        E.check_crossover([1e5], n=15, alpha_s=5e-6, bw_bytes_per_s=1e9)


# ------------------------------------------------------------ NCCL
def test_busbw_by_definition():
    V, t, n = 2**30, 0.010, 16
    algbw = V / t / 1e9
    assert E.check_busbw(algbw * 2 * (n - 1) / n, collective="allreduce",
                         nbytes=V, time_s=t, n=n).passed
    _fails(E.check_busbw(algbw, collective="allreduce", nbytes=V,
                         time_s=t, n=n), "too low")
    assert E.check_busbw(algbw * (n - 1) / n, collective="reduce_scatter",
                         nbytes=V, time_s=t, n=n).passed
    with pytest.raises(ValueError, match="collective"):
        E.check_busbw(1.0, collective="alltoall", nbytes=V, time_s=t, n=n)
    with pytest.raises(ValueError, match="time_s"):
        E.check_busbw(1.0, collective="allreduce", nbytes=V, time_s=0, n=n)


@pytest.mark.parametrize("nbytes", [2**10, 2**20, 2**30])
def test_nccl_choice_matches_the_fastest_listed(nbytes):
    fastest = choices("allreduce", nbytes, cluster("dgx-h100", 2))[0]
    assert E.check_nccl_choice(fastest.algorithm, collective="allreduce",
                               nbytes=nbytes).passed
    assert E.check_nccl_choice((fastest.algorithm, fastest.protocol),
                               collective="allreduce", nbytes=nbytes).passed
    other = next(a for a in ("ring", "tree") if a != fastest.algorithm)
    _fails(E.check_nccl_choice(other, collective="allreduce",
                               nbytes=nbytes), "does not pick")


def test_nccl_choice_bad_input():
    with pytest.raises(ValueError, match="algorithm"):
        E.check_nccl_choice("butterfly", collective="allreduce", nbytes=1)
    with pytest.raises(ValueError, match="pair"):
        E.check_nccl_choice(("ring", "LL", 1), collective="allreduce",
                            nbytes=1)
    with pytest.raises(TypeError):
        E.check_nccl_choice(3, collective="allreduce", nbytes=1)


def test_spread_slowdown_from_group_shapes():
    """8 GPUs on one node (1 island of 8) against 2 nodes (2 islands of
    4), timed on the shapes directly."""
    V = 2 * 2048 * 8192
    s = SYSTEMS["dgx-h100"]
    ratio = (best_for_shape("allreduce", float(V), s, 8, 2, 4).time_s
             / best_for_shape("allreduce", float(V), s, 8, 1, 8).time_s)
    assert ratio > 1
    assert E.check_spread_slowdown(ratio, nbytes=V).passed
    _fails(E.check_spread_slowdown(20.0, nbytes=V), "too high")
    with pytest.raises(ValueError, match="system"):
        E.check_spread_slowdown(2.0, nbytes=V, system="dgx-z900")


# ------------------------------------------------------------ layout
def test_layout_fits_on_64_gpus():
    P = E.layout.GPT_39B.params
    # by hand: 16 bytes per parameter of weights, gradients and Adam
    assert 16 * P / 16 < 80e9 < 16 * P     # t*p = 16 can fit, 1 cannot
    assert E.check_layout(8, 2, 4).passed
    _fails(E.check_layout(1, 1, 64), "GiB per GPU")
    _fails(E.check_layout(16, 2, 2), "NVLink island")
    _fails(E.check_layout(8, 2, 4, order=("tp", "pp", "dp")),
           "NVLink island")
    _fails(E.check_layout(8, 2, 2), "not 64")


def test_layout_bad_input():
    with pytest.raises(TypeError, match="tp must be an int"):
        E.check_layout("8", 2, 4)
    with pytest.raises(ValueError, match="pp must be >= 1"):
        E.check_layout(8, 0, 4)
    with pytest.raises(TypeError, match="Transformer"):
        E.check_layout(8, 2, 4, model="gpt3")


# ------------------------------------------------------------ overlap
def test_bucket_cap_extremes():
    """Huge per-bucket latency: one bucket is best; free latency and
    communication faster than compute: the smallest buckets are."""
    lb, ls = [1 << 20] * 32, [1e-3] * 32
    whole = sum(lb)
    slow = dict(layer_s=ls, layer_bytes=lb, alpha_s=0.1,
                bw_bytes_per_s=1e10)
    assert E.check_bucket_cap(whole, **slow).passed
    _fails(E.check_bucket_cap(1 << 20, **slow), "too many")
    fast = dict(layer_s=ls, layer_bytes=lb, alpha_s=0.0,
                bw_bytes_per_s=1e10)
    assert E.check_bucket_cap(1 << 20, **fast).passed
    _fails(E.check_bucket_cap(whole, **fast), "too few")


def test_bucket_cap_bad_input():
    kw = dict(layer_s=[1e-3] * 4, layer_bytes=[1 << 20] * 4, alpha_s=0.0,
              bw_bytes_per_s=1e10)
    with pytest.raises(TypeError, match="bucket_bytes"):
        E.check_bucket_cap(1.5e6, **kw)
    with pytest.raises(ValueError, match="one compute time"):
        E.check_bucket_cap(1 << 20, **{**kw, "layer_s": [1e-3] * 3})
    with pytest.raises(TypeError, match="sequences"):
        E.check_bucket_cap(1 << 20, **{**kw, "layer_s": "fast"})


# ------------------------------------------------------------ goodput
def test_checkpoint_interval_young_passes_extremes_fail():
    M, delta, R, work = 4 * 3600.0, 300.0, 600.0, 200 * 3600.0
    young = math.sqrt(2 * delta * M)             # Young 1974
    kw = dict(mtbf_s=M, ckpt_s=delta, restart_s=R, work_s=work)
    assert E.check_checkpoint_interval(young, **kw).passed
    _fails(E.check_checkpoint_interval(young / 6, **kw), "too often")
    _fails(E.check_checkpoint_interval(young * 4, **kw), "too rarely")


def test_checkpoint_interval_bad_input():
    kw = dict(mtbf_s=3600.0, ckpt_s=60.0, restart_s=60.0, work_s=36000.0)
    with pytest.raises(ValueError, match="tau_s must be > 0"):
        E.check_checkpoint_interval(-5, **kw)
    with pytest.raises(TypeError, match="tau_s"):
        E.check_checkpoint_interval("1h", **kw)
    with pytest.raises(ValueError, match="mtbf_s"):
        E.check_checkpoint_interval(600, **{**kw, "mtbf_s": 0})


# ------------------------------------------------------------ serving
@pytest.mark.parametrize("tp", [8, 16])
def test_kv_cache_llama3_70b(tp):
    # 80 layers, 8 KV heads of 128, bf16; a head per GPU from t = 8 on
    # (replicated at t = 16)
    per_token_gpu = 80 * 2 * 1 * 128 * 2
    right = 16 * 8192 * per_token_gpu
    kw = dict(model_name="Llama 3 70B", tp=tp, batch=16, context=8192)
    assert E.check_kv_cache(right, **kw).passed
    _fails(E.check_kv_cache(right * 8 / tp / 2, **kw), "too low")


def test_kv_cache_bad_input():
    kw = dict(tp=8, batch=1, context=1024)
    with pytest.raises(ValueError, match="unknown model"):
        E.check_kv_cache(1e9, model_name="Llama 9", **kw)
    with pytest.raises(TypeError, match="model_name"):
        E.check_kv_cache(1e9, model_name=70, **kw)
    with pytest.raises(ValueError, match="tp = 3"):
        E.check_kv_cache(1e9, model_name="Llama 3 70B", tp=3, batch=1,
                         context=1024)


def test_result_placeholder_and_spellings():
    """The shared Result: ``...`` is 'not answered yet' (neither passed nor
    a failure with a hint); spellings normalise case, '-' and '_'."""
    from warmup_kit.exercises.result import spelled, unanswered
    r = unanswered("ch01 layout", "three degrees t, p, d")
    assert not r.passed and not r.answered and not bool(r)
    assert str(r) == ("[NOT ANSWERED YET] ch01 layout: replace ... with "
                      "three degrees t, p, d")
    assert E.Result("x", False, "wrong", "look").answered
    names = {"tp": "tp", "tensor parallel": "tp", "dp": "dp"}
    assert spelled("answer", "Tensor-Parallel", names) == "tp"
    assert spelled("answer", "  tensor_parallel ", names) == "tp"
    with pytest.raises(ValueError, match=r"\['dp', 'tp'\]"):
        spelled("answer", "zero", names)
    with pytest.raises(TypeError, match="answer must be a string"):
        spelled("answer", 3, names)


def test_a_result_prints_no_line_wider_than_the_sites_code_column():
    """A long verdict or hint wraps (the site shows a notebook's output in
    a column about 86 characters wide; a longer line scrolls sideways)."""
    from warmup_kit.exercises.result import WIDTH, Result
    r = Result("ch05 knobs", False, "word " * 40, "look " * 30)
    lines = repr(r).splitlines()
    assert len(lines) > 2 and max(map(len, lines)) <= WIDTH
    assert lines[0].startswith("[NOT YET] ch05 knobs: word")
    assert " ".join(repr(r).split()) == " ".join(str(r).split()) == (
        "[NOT YET] ch05 knobs: " + "word " * 39 + "word hint: " +
        "look " * 29 + "look")
