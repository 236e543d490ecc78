"""The plot of ``gym train`` runs: mean reward per round, from each run's ``summary.json``.

``python -m gym_train.report OUT.png NAME=RUN_DIR...`` draws several runs in one figure (how
docs/training.md's figure is made).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = ["plot_rewards", "main"]


def plot_rewards(runs: Mapping[str, Path], path: Path) -> Path:
    """Plot the mean reward of every round of each run (``name -> run directory``) against the round,
    the evaluation round (after the last step) marked; write a PNG to ``path``."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    figure, axes = plt.subplots(figsize=(6.4, 3.8), dpi=120)
    for name, directory in runs.items():
        summary = json.loads((Path(directory) / "summary.json").read_text())
        rounds = [r for r in summary["rounds"] if r["mean_reward"] is not None]
        xs = [r["round"] for r in rounds]
        (line,) = axes.plot(
            xs,
            [r["mean_reward"] for r in rounds],
            marker="o",
            label=f"{name} ({summary['tasks']} tasks x {summary['repeats']})",
        )
        for r in rounds:
            if r["evaluation"]:
                axes.plot([r["round"]], [r["mean_reward"]], marker="*", markersize=14, color=line.get_color())
            axes.annotate(
                f"v{r['policy_version']}",
                (r["round"], r["mean_reward"]),
                textcoords="offset points",
                xytext=(0, 6),
                ha="center",
                fontsize=7,
                color=line.get_color(),
            )
    axes.set_xlabel("round (v = policy version that collected it; * = after the last step)")
    axes.set_ylabel("mean reward")
    axes.set_ylim(-0.05, 1.12)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    axes.set_title("gym train: GRPO on SmolLM2-135M, CPU", fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2 or any("=" not in a for a in args[1:]):
        print("usage: python -m gym_train.report OUT.png NAME=RUN_DIR...", file=sys.stderr)
        return 2
    runs = dict(a.split("=", 1) for a in args[1:])
    print(plot_rewards({k: Path(v) for k, v in runs.items()}, Path(args[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
