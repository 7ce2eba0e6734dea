"""Multi-seed experiments reproducing each paper's claim (issue 15); results in docs/results/."""
