"""GitHub integration: the sticky PR comment (``hfexport comment``)."""
