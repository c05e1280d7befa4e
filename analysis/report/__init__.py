"""Renderers of a Verdict: terminal text, Markdown, JSON and self-contained HTML."""
