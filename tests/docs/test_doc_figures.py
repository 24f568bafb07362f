"""The figures the docs quote are the ones their commands print today (`make docs-check`).

Two kinds of check, both on deterministic commands quick enough for every run:

- a fenced block right after a `<!-- docs-check: NAME -->` comment is a stretch of command
  NAME's output, line for line (``BLOCK_COMMANDS``);
- a figure quoted in prose or a table is rebuilt from the command's output and looked for on
  its page (``test_the_quoted_train_figures_are_what_train_prints``, the README's submit
  example).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.service_fixtures import run_cli

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "training_data" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKED = re.compile(r"<!-- docs-check: (?P<name>[\w-]+) -->\n```[^\n]*\n(?P<body>.*?)\n```", re.DOTALL)
#: The commands the marked blocks name; `--models` is the test's own folder.
BLOCK_COMMANDS = {"train"}
JOB = ROOT / "training_data" / "example_job_training.yaml"


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("doc-figures") / "models"


@pytest.fixture(scope="module")
def train_output(models: Path) -> str:
    result = run_cli("train", "--models", models)
    assert result.code == 0, result.err
    return result.out


def marked_blocks(pages: list[Path]) -> list[tuple[Path, str, str]]:
    return [
        (page, match["name"], match["body"])
        for page in pages
        for match in MARKED.finditer(page.read_text(encoding="utf-8"))
    ]


def missing_lines(block: str, output: str) -> list[str]:
    """The block's lines that the output does not print (trailing blanks aside)."""
    printed = {line.rstrip() for line in output.splitlines()}
    return [line for line in block.splitlines() if line.strip() and line.rstrip() not in printed]


def test_every_marked_block_names_a_command_this_check_runs() -> None:
    blocks = marked_blocks(PAGES)
    assert blocks, "no <!-- docs-check: ... --> block found"
    assert {name for _, name, _ in blocks} <= BLOCK_COMMANDS


def test_each_marked_train_block_is_what_train_prints(train_output: str) -> None:
    for page, name, body in marked_blocks(PAGES):
        if name == "train":
            assert missing_lines(body, train_output) == [], page.relative_to(ROOT)


def train_figures(output: str) -> dict[str, str]:
    """The figures the prose quotes, as `gpuplan train` prints them."""
    row = re.search(r"^lightgbm \(P50/P90\)\s+(\d+)\s+(.*)$", output, re.MULTILINE)
    size = re.search(r"^size-only baseline\s+\d+\s+([\d.]+)", output, re.MULTILINE)
    flops = re.search(r"^analytic-FLOPs baseline\s+\d+\s+([\d.]+)", output, re.MULTILINE)
    summary = re.search(
        r"log-MAE ([\d.]+)x lower .*P90 coverage ([\d.]+) overall, ([\d.]+-[\d.]+) across", output
    )
    pinball = re.search(r"pinball loss on log hours at 0.5 / 0.9: ([\d.]+) / ([\d.]+)", output)
    quintiles = re.findall(r"^hours\s+Q\d\s+\d+\s+\S+ h\s+[\d.]+\s+([\d.]+)", output, re.MULTILINE)
    assert row and size and flops and summary and pinball and len(quintiles) == 5, output
    columns = row[2].split()
    sharp = sorted(float(q) for q in quintiles)
    return {
        "jobs": f"{int(row[1]):,}",
        "log_mae": columns[0],
        "coverage": columns[1],
        "gpu_accuracy": f"{float(columns[4]):.1%}",
        "gpu_coverage": columns[5],
        "size_only": size[1],
        "flops": flops[1],
        "ratio": summary[1],
        "quintiles": summary[3],
        "pinball": f"{float(pinball[1]):.3f} / {float(pinball[2]):.3f}",
        "sharpness": f"{sharp[0]:.2f}-{sharp[-1]:.2f}",
    }


#: Each page's sentences that quote train's figures, with the figures as placeholders.
QUOTED_TRAIN_FIGURES = {
    "README.md": [
        (
            "| training jobs, held-out last 20% ({jobs}; `gpuplan train`): log-MAE of hours; P90 coverage "
            "| {log_mae}; {coverage} ({quintiles} in each P50 quintile) | size-only {size_only}; "
            "analytic-FLOPs {flops} |"
        ),
        "P50 GPU count exact; P90 GPU coverage | {gpu_accuracy}; {gpu_coverage} |",
    ],
    "docs/forecasting.md": [
        "- **P90 coverage per quintile of the predicted P50: {quintiles}**",
        "the median P90/P50 is {sharpness} in every quintile.",
        "- **Pinball loss on log hours at 0.5 / 0.9: {pinball}.**",
        "The log-MAE of the P50 is\n  {log_mae};",
        "the P50 GPU count equals the analytic memory count for {gpu_accuracy} of jobs.",
    ],
}


def test_the_quoted_train_figures_are_what_train_prints(train_output: str) -> None:
    figures = train_figures(train_output)
    for page, quotes in QUOTED_TRAIN_FIGURES.items():
        text = (ROOT / page).read_text(encoding="utf-8")
        for quote in quotes:
            assert quote.format(**figures) in text, (page, quote.format(**figures))


def readme_submit_answer() -> dict[str, object]:
    """The JSON the README's tour shows under its `submit ... --json` command."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(
        r"\$G submit training_data/example_job_training.yaml --json[^\n]*\n(\{.*?\n\})", text, re.DOTALL
    )
    assert match, "README.md: the tour's submit example is gone"
    answer: dict[str, object] = json.loads(match[1])
    return answer


def test_the_readme_submit_example_is_what_submit_prints(
    train_output: str, models: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tour's steps 1 and 3 at the README's times, on the forecasters `train` wrote: the
    job, its GPUs and hours are the README's; the plan's start depends on the machine's load
    (a wall-clock budget), so of it only the keys are compared."""
    shown = readme_submit_answer()
    monkeypatch.chdir(models.parent)  # the daemon and submit read ./models
    db = f"sqlite:///{tmp_path / 'tour.db'}"
    assert run_cli("daemon", "--db", db, "--once", "--at", "2026-12-01T09:00").code == 0
    result = run_cli("submit", JOB, "--json", "--db", db, "--at", "2026-12-01T09:05:25")
    assert result.code == 0, result.err
    printed = json.loads(result.out)
    assert set(printed) == set(shown)
    for key in ("job", "gpus", "hours_p50", "hours_p90"):
        assert printed[key] == shown[key], key


def test_the_check_finds_a_figure_that_moved(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Printed:\n\n<!-- docs-check: train -->\n```\nlog-MAE 6.6x lower\nkept line\n```\n", encoding="utf-8"
    )
    [(_, name, body)] = marked_blocks([page])
    assert name == "train"
    assert missing_lines(body, "kept line\nlog-MAE 6.9x lower\n") == ["log-MAE 6.6x lower"]


def test_the_per_model_forecast_in_pools_md_is_what_forecast_job_prints(
    models: Path, train_output: str, tmp_path: Path
) -> None:
    config = tmp_path / "pools.yaml"
    config.write_text(
        "cluster:\n  pools:\n    - {name: h100, gpu_model: h100, gpus: 32}\n"
        "    - {name: a100, gpu_model: a100, gpus: 32}\n"
    )
    result = run_cli("forecast", "job", JOB, "--config", config, "--models", models)
    assert result.code == 0, result.err
    page = (ROOT / "docs" / "pools.md").read_text()
    lines = result.out.splitlines()[1:]  # the first names the fit's time
    assert len(lines) == 5 and all(line in page for line in lines), result.out
