"""One-off measurements behind figures in docs/ (each names the page it serves)."""
