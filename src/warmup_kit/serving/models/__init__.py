"""Chapter 9's serving model: model shapes, KV cache sizes, decode and
prefill latency, disaggregation, the MoE all-to-all, top-k routing and the
numpy toy decoder. No transport, no collectives, nothing that runs on ranks
(tests/test_layers.py holds them to it): the graders, the plots and the
runs on a communicator (:mod:`warmup_kit.serving`) all build on it.
"""
