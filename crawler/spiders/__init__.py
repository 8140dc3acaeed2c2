"""Rule-driven spiders (``precise``, ``universal``)."""
