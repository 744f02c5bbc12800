"""The cluster doctor: "is my busbw normal?" (book, Chapter 5).

``python -m warmup_kit.doctor LOG [LOG ...]`` reads nccl-tests / rccl-tests
output (with any ``NCCL_DEBUG=INFO`` lines), this kit's ``warmup-bench
--json`` files and the emulated cluster's reports, holds every row against
the model's expected bus bandwidth (:mod:`warmup_kit.model.nccl`) and
says, per run, ``healthy``, ``degraded`` or ``broken``, with likely causes
ranked and each with its evidence.

Modules, one idea each: :mod:`~.nccltests` and :mod:`~.ncclinfo` parse
logs, :mod:`~.kitjson` the kit's JSON, :mod:`~.parse` reads a file,
:mod:`~.systems` maps GPU names and ``--nic`` to the hardware table,
:mod:`~.setup` settles a run's system and shape, :mod:`~.expect` asks the
model, :mod:`~.diagnose` judges a run, :mod:`~.emulated` adds what a whole
emulated-cluster report shows, :mod:`~.report` prints, writes JSON and
draws; :mod:`~.faultcheck` (not imported here) sets the doctor's answers on
the emulated cluster's fault reports beside the faults they were given.
"""
from __future__ import annotations

from warmup_kit.doctor.diagnose import Diagnosis, diagnose
from warmup_kit.doctor.emulated import add_report_causes
from warmup_kit.doctor.errors import DoctorInputError
from warmup_kit.doctor.parse import load, parse_text
from warmup_kit.doctor.report import document, table
from warmup_kit.doctor.setup import Flags, resolve


def examine(paths: list[str], flags: Flags | None = None
            ) -> list[Diagnosis]:
    """Every run of every file in ``paths``, diagnosed."""
    flags = flags or Flags()
    out = []
    for p in paths:
        for run in load(p):
            out.append(diagnose(run, resolve(run, flags)))
    add_report_causes(out)
    return out


def examine_text(text: str, flags: Flags | None = None,
                 source: str = "<text>") -> list[Diagnosis]:
    """:func:`examine` for a log held in a string (the book's cells)."""
    flags = flags or Flags()
    out = [diagnose(r, resolve(r, flags))
           for r in parse_text(text, source, source)]
    add_report_causes(out)
    return out


__all__ = ["Diagnosis", "DoctorInputError", "Flags", "diagnose", "document",
           "examine", "examine_text", "load", "parse_text", "resolve",
           "table"]
