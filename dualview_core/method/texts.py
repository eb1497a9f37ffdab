"""What the encoder reads: a query joined with its instruction, and a document as title and body.

The paper trains and evaluates on query ⊕ instruction, one string; a model's own query prompt, if
its folder declares one, goes before that whole string (sentence-transformers adds it). Documents
are title, a space, body, as BEIR and mteb join them.

    >>> query_text("wind power subsidies", "Only documents about Europe.")
    'wind power subsidies Only documents about Europe.'
    >>> doc_text("Wind", "Subsidies rose.")
    'Wind Subsidies rose.'
"""

from __future__ import annotations

QUERY_TEMPLATE = "{query} {instruction}"


def query_text(query: str, instruction: str, template: str = QUERY_TEMPLATE) -> str:
    """Query ⊕ instruction, as one string for the encoder. An empty instruction leaves the query."""
    return template.format(query=query, instruction=instruction).strip() if instruction else query


def doc_text(title: str, text: str) -> str:
    """A document as the encoder sees it: title, a space, body."""
    return f"{title} {text}".strip()
