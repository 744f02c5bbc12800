"""``python -m warmup_kit.doctor``: see :mod:`warmup_kit.doctor`."""
from warmup_kit.doctor.cli import main

raise SystemExit(main())
