"""The conformance dashboard: a static site built from result rows alone.

``python -m torch_onnx_conformance.reports build ROWS... --html DIR`` writes ``DIR/index.html`` with the static
``dashboard.js`` and ``dashboard.css`` beside it, and the data as small ``.js`` files under
``DIR/data/`` that assign to a global when a ``<script>`` tag loads them (``fetch()`` of a local
file is blocked on ``file://``): ``index.js`` (run header, columns, per-family cell counts),
one ``f<N>.js`` per family (its cases, loaded when the family is opened), ``diff.js`` (the
changes against ``--baseline``) and ``history.js``. Nothing is loaded from outside ``DIR``,
and every text from a row is put into the page as text, never as markup.
"""

from torch_onnx_conformance.reports.html.site import build_site

__all__ = ["build_site"]
