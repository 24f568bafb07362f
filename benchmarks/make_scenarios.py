"""The benchmark scenario files: ``python -m benchmarks.make_scenarios DIR [--uncalibrated | --heldout]``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gpuplan.app.lab.synthetic import SHAPES, calibrated, fifo_utilization, generate, heldout_documents


def main(argv: list[str]) -> int:
    """``python -m benchmarks.make_scenarios DIR [--uncalibrated | --heldout]``: the seven
    benchmark files, calibrated to the published FIFO utilization (or as first built, from
    seed 2026), or the held-out split of the wide shapes (benchmarks/heldout/)."""
    if len(argv) not in (1, 2) or (len(argv) == 2 and argv[1] not in ("--uncalibrated", "--heldout")):
        sys.stderr.write("usage: python -m benchmarks.make_scenarios DIR [--uncalibrated | --heldout]\n")
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    if argv[1:] == ["--heldout"]:
        for stem, doc in heldout_documents():
            (out / f"{stem}.json").write_text(json.dumps(doc, indent=1) + "\n")
            sys.stdout.write(f"{out / stem}.json\n")
        return 0
    for index, shape in enumerate(SHAPES.values(), start=1):
        if len(argv) == 2:
            doc = generate(SHAPES["large-mixed"] if shape.uniform_priority else shape, seed=2026)
            if shape.uniform_priority:
                doc = {**doc, "name": shape.name, "jobs": [{**j, "priority": 50} for j in doc["jobs"]]}
        else:
            doc, seed = calibrated(shape.name)
            sys.stdout.write(f"{shape.name}: seed {seed}, FIFO utilization {fifo_utilization(doc):.1%}\n")
        (out / f"{index}-{shape.name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
