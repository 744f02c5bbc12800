"""Published failure records of large training runs (book, Chapter 8).

Numbers as printed, with where they are printed; the chapter and the tests
derive everything else from them.

* Llama 3 405B pre-training (Llama Team, AI @ Meta 2024, "The Llama 3
  Herd of Models", section 3.3.4 and Table 5): a 54-day snapshot on up to
  16,384 H100 GPUs (section 3.3.1), 466 job interruptions, 47 planned
  (automated maintenance, operator actions) and 419 unexpected; "higher
  than 90% effective training time"; "approximately 78% of the unexpected
  interruptions" attributed to confirmed or suspected hardware issues; GPU
  issues "58.7% of all unexpected issues"; manual intervention needed
  three times. Checkpoints hold 1 MB to 4 GB per GPU; the storage sustains
  2 TB/s, 7 TB/s at peak (section 3.3.1). Layout on 16,384 GPUs: TP 8,
  CP 1, PP 16, DP 128 (Table 4); racks of 16 GPUs in two servers on one
  top-of-rack switch (section 3.3.1).
* OPT-175B (Zhang et al. 2022, section 2.5): 992 80 GB A100s, "at least 35
  manual restarts and the cycling of over 100 hosts over the course of 2
  months", and an estimated "70+ automatic restarts due to hardware
  failures".
"""
from __future__ import annotations

LLAMA3 = {"days": 54, "gpus": 16_384, "gpus_per_node": 8,
          "interruptions": 466, "planned": 47, "unexpected": 419,
          "hardware_share_text": 0.78, "gpu_share_text": 0.587,
          "effective_time_min": 0.90, "manual_interventions": 3,
          "ckpt_bytes_per_gpu_max": 4e9, "storage_sustained_bps": 2e12,
          "storage_peak_bps": 7e12, "tp": 8, "cp": 1, "pp": 16, "dp": 128,
          "gpus_per_tor": 16}

#: Table 5: (component, category, interruptions, % as printed)
LLAMA3_TABLE5 = (
    ("Faulty GPU", "GPU", 148, 30.1),
    ("GPU HBM3 Memory", "GPU", 72, 17.2),
    ("Software Bug", "Dependency", 54, 12.9),
    ("Network Switch/Cable", "Network", 35, 8.4),
    ("Host Maintenance", "Unplanned Maintenance", 32, 7.6),
    ("GPU SRAM Memory", "GPU", 19, 4.5),
    ("GPU System Processor", "GPU", 17, 4.1),
    ("NIC", "Host", 7, 1.7),
    ("NCCL Watchdog Timeouts", "Unknown", 7, 1.7),
    ("Silent Data Corruption", "GPU", 6, 1.4),
    ("GPU Thermal Interface + Sensor", "GPU", 6, 1.4),
    ("SSD", "Host", 3, 0.7),
    ("Power Supply", "Host", 3, 0.7),
    ("Server Chassis", "Host", 2, 0.5),
    ("IO Expansion Board", "Host", 2, 0.5),
    ("Dependency", "Dependency", 2, 0.5),
    ("CPU", "Host", 2, 0.5),
    ("System Memory", "Host", 2, 0.5),
)

OPT175B = {"gpus": 992, "months": 2, "manual_restarts_min": 35,
           "hosts_cycled_min": 100, "automatic_restarts_est": 70}


def by_category(table=LLAMA3_TABLE5) -> dict[str, tuple[int, float]]:
    """Category -> (interruptions, % as printed, summed)."""
    out: dict[str, tuple[int, float]] = {}
    for _, cat, n, pct in table:
        c, p = out.get(cat, (0, 0.0))
        out[cat] = (c + n, round(p + pct, 1))
    return out


def llama3_mtbf_s(unexpected_only: bool = True) -> float:
    """The job's mean time between interruptions, seconds."""
    n = LLAMA3["unexpected"] if unexpected_only else LLAMA3["interruptions"]
    return LLAMA3["days"] * 86400 / n


def llama3_ckpt_s(peak: bool = False) -> float:
    """A checkpoint of 4 GB from every GPU at once, at the storage's
    sustained (or peak) throughput: the stall if writes were blocking."""
    total = LLAMA3["ckpt_bytes_per_gpu_max"] * LLAMA3["gpus"]
    return total / LLAMA3["storage_peak_bps" if peak else
                          "storage_sustained_bps"]
