"""Models registered with fairseq.

Imported by the package ``__init__`` and by fairseq's ``--user-dir`` loader; importing
twice registers once.
"""
