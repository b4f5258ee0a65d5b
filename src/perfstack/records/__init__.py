"""The records a Run is made of, one package per section, on one tolerant record base (``base.Record``).

They stand below ``model`` (the Run) and import nothing above them: ``profile`` (the profile section),
``trial`` (the ``try`` section). Each reads its JSON once, when a Run is loaded, checked against its
annotations (a wrong type is refused naming the field), keeps the keys it does not know and writes them back.
"""
