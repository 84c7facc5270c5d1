"""Renderers: each turns results into one format (terminal, JSON, Markdown, HTML)."""
