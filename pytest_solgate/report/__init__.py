"""Report: renderers over finished records (terminal, JSON, Markdown, HTML, benchmark-action)."""
