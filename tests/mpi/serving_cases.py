"""Chapter 9's jobs as test cases, shared by the sockets, shared-memory and
MPI tests (tests/test_serving_ranks.py, tests/mpi/serving.py): each rank
runs tensor-parallel decoding, the routed MoE layer (EP over every rank,
and over sub-communicators of 2 when N = 4) and the KV hand-off; the jobs
are the package's own (:mod:`warmup_kit.serving`)."""
from warmup_kit.serving import handoff, moe_layer, tp_decode
from warmup_kit.serving.models.toy import ToyConfig

TOY = ToyConfig(layers=2, hidden=64, heads=8, kv_heads=2, ffn=128,
                vocab=128, max_seq=24)
BATCH, PROMPT, NEW = 3, 8, 6
MOE = moe_layer.MoEConfig(hidden=16, ffn=32, tokens_per_rank=24)
HANDOFF = handoff.HandoffConfig(toy=TOY, batch=BATCH, prompt=PROMPT,
                                new_tokens=NEW, reps=2)


def run_all(comm) -> dict:
    out = {"tp": {a: tp_decode.run_job(comm, TOY, batch=BATCH, prompt=PROMPT,
                                       new_tokens=NEW, algorithm=a)
                  for a in ("ring", "recursive_doubling")},
           "moe": moe_layer.run_job(comm, MOE)}
    if comm.size == 4:
        out["moe_ep2"] = moe_layer.run_job(comm, MOE, ep=2)
    if comm.size % 2 == 0:
        out["handoff"] = handoff.run_job(comm, HANDOFF)
    return out
