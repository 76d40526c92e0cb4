"""Markdown tables for the benchmark reports (bench/report.py and bench/levers_report.py)."""

from __future__ import annotations


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A GitHub-flavoured markdown table, one line per row."""
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *["| " + " | ".join(row) + " |" for row in rows]]
