"""Chapter 8's failure models: straggler detection, goodput and checkpoint
intervals, blast radius, and the published failure records they are
checked against. Pure numpy on top of :mod:`warmup_kit.model`: no
transport, no collectives, nothing that runs on ranks (tests/test_layers.py
holds them to it), so the graders and the plots may use them anywhere.
"""
